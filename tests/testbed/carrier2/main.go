// Command carrier2 stands in for Gefyra's Carrier2 proxy in the test bed's
// pods, which run no images: `kubectl exec` finds it on PATH as `carrier2`
// (build.sh puts it in the test bed's pod-bin; see lib.sh).
//
// It takes the real binary's flags (Pingora's: -c/--conf FILE, -u/--upgrade,
// -d/--daemon, -t/--test), checks the configuration strictly against
// Carrier2's schema (config.go) and answers as the real one does, which is
// what an operator reads after its reload script:
//
//   - a good configuration: log lines from "Bootstrap starting" to
//     "Bootstrap done" on stdout and appended to error_log, its pid in
//     pid_file (with -d), exit status 0;
//   - a bad configuration or flag: "thread 'main' panicked at src/main.rs:
//     <what is wrong, with the field's path>" on stderr and appended to
//     error_log when the configuration names one, exit status 1.
//
// It serves no traffic and does not stay running. With -t it only checks.
package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

const usage = "usage: carrier2 [-c|--conf FILE] [-u|--upgrade] [-d|--daemon] [-t|--test] [--nocapture]"

type options struct {
	conf                  string
	upgrade, daemon, test bool
	help                  bool
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	opts, err := parseArgs(args)
	if err != nil {
		return panicked(stderr, errorLogFromFile(opts.conf), fmt.Sprintf("%v (%s)", err, usage))
	}
	if opts.help {
		fmt.Fprintln(stdout, usage)
		fmt.Fprintln(stdout, "The test bed's stand-in for Gefyra's Carrier2: checks the configuration, serves nothing.")
		return 0
	}
	if opts.conf == "" {
		// The real one bootstraps an idle server; so does this one, and exits.
		logTo(stdout, "", "WARN ", "No configuration provided. Idle mode ...", "Bootstrap starting", "Bootstrap done")
		return 0
	}
	data, err := os.ReadFile(opts.conf)
	if err != nil {
		return panicked(stderr, "", fmt.Sprintf("cannot read configuration %s: %v", opts.conf, unwrapPathError(err)))
	}
	cfg, err := Parse(data)
	if err != nil {
		return panicked(stderr, ErrorLogOf(data), fmt.Sprintf("invalid configuration %s: %v", opts.conf, err))
	}
	if opts.test {
		logTo(stdout, "", "INFO ", "Bootstrap starting", "Server Test passed, exiting")
		return 0
	}

	lines := []string{"Bootstrap starting"}
	pidFile := cfg.PIDFile
	if pidFile == "" {
		pidFile = "/tmp/pingora.pid" // Pingora's default
	}
	if opts.upgrade {
		if old, err := os.ReadFile(pidFile); err == nil {
			lines = append(lines, fmt.Sprintf("upgrading from pid %s (stand-in: no sockets to take over)", strings.TrimSpace(string(old))))
		} else {
			lines = append(lines, fmt.Sprintf("upgrade requested, but there is no pid file %s: starting afresh", pidFile))
		}
	}
	lines = append(lines, fmt.Sprintf("Configure %d proxy", len(cfg.Proxy)))
	for _, p := range cfg.Proxy {
		scheme := "http"
		if p.TLS != nil {
			scheme = "https"
		}
		lines = append(lines, fmt.Sprintf("proxy on 0.0.0.0:%d (%s), cluster upstream %v, bridges %v",
			p.Port, scheme, p.ClusterUpstream, p.BridgeNames()))
	}
	if cfg.Probes != nil {
		if len(cfg.Probes.HTTPGet) > 0 {
			lines = append(lines, fmt.Sprintf("Configured httpGet (scheme HTTP) probe ports: %v", cfg.Probes.HTTPGet))
		}
		if len(cfg.Probes.HTTPSGet) > 0 {
			lines = append(lines, fmt.Sprintf("Configured httpsGet (scheme HTTPS) probe ports: %v", cfg.Probes.HTTPSGet))
		}
	}
	lines = append(lines, "Bootstrap done")
	if opts.daemon {
		pid := strconv.Itoa(os.Getpid())
		if err := os.WriteFile(pidFile, []byte(pid+"\n"), 0o644); err != nil {
			return panicked(stderr, cfg.ErrorLog, fmt.Sprintf("cannot write pid file: %v", err))
		}
		lines = append(lines, fmt.Sprintf("daemonized as pid %s (stand-in: exits now, nothing listens)", pid))
	}
	// stdout first: a caller may have sent it to the error log's file too
	// (`&> /tmp/carrier.log`); appending afterwards keeps both.
	logTo(stdout, "", "INFO ", lines...)
	if cfg.ErrorLog != "" {
		if err := logTo(nil, cfg.ErrorLog, "INFO ", lines...); err != nil {
			return panicked(stderr, "", fmt.Sprintf("cannot write error_log: %v", err))
		}
	}
	return 0
}

// panicked reports a failure the way the real binary's unwraps do, also in
// errorLog when known, and gives the exit status.
func panicked(stderr io.Writer, errorLog, msg string) int {
	line := "thread 'main' panicked at src/main.rs: " + msg + "\n"
	io.WriteString(stderr, line)
	if errorLog != "" {
		if f, err := os.OpenFile(errorLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err == nil {
			f.WriteString(line)
			f.Close()
		}
	}
	return 1
}

// logTo writes lines in env_logger's format to w, or appends them to file.
func logTo(w io.Writer, file, level string, lines ...string) error {
	var b strings.Builder
	for _, line := range lines {
		fmt.Fprintf(&b, "[%s %s pingora_core::server] %s\n",
			time.Now().UTC().Format("2006-01-02T15:04:05.000000000Z"), level, line)
	}
	if file == "" {
		_, err := io.WriteString(w, b.String())
		return err
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(b.String()); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// errorLogFromFile is the error_log of the configuration file, if any can be read.
func errorLogFromFile(conf string) string {
	if conf == "" {
		return ""
	}
	data, err := os.ReadFile(conf)
	if err != nil {
		return ""
	}
	return ErrorLogOf(data)
}

// parseArgs reads Pingora's flags: long ones with their value after a space
// or "=", short ones alone or bundled (-ud, -c FILE, -cFILE). On an error the
// options read so far (the configuration file among them) come back too.
func parseArgs(args []string) (options, error) {
	var o options
	for i := 0; i < len(args); i++ {
		arg := args[i]
		value := func(flag string) (string, error) {
			if i+1 >= len(args) {
				return "", fmt.Errorf("%s needs a value", flag)
			}
			i++
			return args[i], nil
		}
		switch {
		case arg == "-c" || arg == "--conf":
			v, err := value(arg)
			if err != nil {
				return o, err
			}
			o.conf = v
		case strings.HasPrefix(arg, "--conf="):
			o.conf = strings.TrimPrefix(arg, "--conf=")
		case arg == "--upgrade":
			o.upgrade = true
		case arg == "--daemon":
			o.daemon = true
		case arg == "--test":
			o.test = true
		case arg == "--help":
			o.help = true
		case arg == "--nocapture":
			// Pingora's; nothing to capture here.
		case strings.HasPrefix(arg, "--"):
			return o, fmt.Errorf("unexpected argument '%s'", arg)
		case strings.HasPrefix(arg, "-") && len(arg) > 1:
			for j := 1; j < len(arg); j++ {
				switch arg[j] {
				case 'u':
					o.upgrade = true
				case 'd':
					o.daemon = true
				case 't':
					o.test = true
				case 'h':
					o.help = true
				case 'c':
					if j+1 < len(arg) {
						o.conf = arg[j+1:]
					} else {
						v, err := value("-c")
						if err != nil {
							return o, err
						}
						o.conf = v
					}
					j = len(arg)
				default:
					return o, fmt.Errorf("unexpected argument '-%c'", arg[j])
				}
			}
		default:
			return o, fmt.Errorf("unexpected argument '%s'", arg)
		}
	}
	return o, nil
}
