// Command carrier2 is the test bed's Carrier2, Gefyra's Pingora-based proxy.
// It is a test-bed tool, not a port of the real one: enough of its flags,
// configuration, proxying and upgrades for an operator under test to be
// judged on what the real one would do.
//
// It runs two ways. As the main process of a pod's container (the test bed
// runs the image quay.io/gefyra/carrier2:* as the local program `carrier2`,
// in the pod's network namespace) it serves: proxy ports route each request
// to the first bridge whose rules match it, else round-robin to the cluster
// upstream; probe ports answer 200. As the program an operator runs by
// `kubectl exec` (build.sh puts it in the test bed's pod-bin; see lib.sh) it
// checks a configuration and hands it to the serving process, which takes it
// over without dropping connections. Most of the test bed's pods are fakes
// that run no Carrier2: there an upgrade finds nothing listening and answers
// as if a new process had started, serving nothing.
//
// Flags are Pingora's: -c/--conf FILE, -u/--upgrade, -d/--daemon, -t/--test.
//
//   - `carrier2 [-c FILE]`: serve until SIGTERM or SIGINT (SIGQUIT,
//     which starts a Pingora upgrade, is logged and serving goes on). Without -c,
//     idle: no proxy port, only the upgrade socket (/tmp/carrier2.sock) and
//     the pid in /tmp/carrier2.pid. With -c, that configuration, its
//     upgrade_sock and pid_file.
//   - `carrier2 -c FILE -u`: check the configuration, then send it over its
//     upgrade_sock to the serving process (see serveUpgrades for the
//     protocol) and report what it answered.
//   - `carrier2 -c FILE -d`: a daemon start, exec'd where no Carrier2 runs
//     (see daemonStart): answers as a fresh start, serves nothing.
//   - `carrier2 -c FILE -t`: check only.
//
// What an operator reads after its reload script is what the real one says:
//
//   - a good configuration: log lines from "Bootstrap starting" to
//     "Bootstrap done" on stdout and appended to error_log, exit status 0;
//   - a bad configuration or flag, or one the serving process refused:
//     "thread 'main' panicked at src/main.rs: <what is wrong, with the
//     field's path>" on stderr and appended to error_log when the
//     configuration names one, exit status 1.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
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
	return runContext(context.Background(), args, stdout, stderr)
}

// runContext is run; a server also stops when ctx ends, which is how tests
// stop one without signalling their own process.
func runContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	opts, err := parseArgs(args)
	if err != nil {
		return panicked(stderr, errorLogFromFile(opts.conf), fmt.Sprintf("%v (%s)", err, usage))
	}
	if opts.help {
		fmt.Fprintln(stdout, usage)
		fmt.Fprintln(stdout, "The test bed's Carrier2: serves a configuration until SIGTERM (idle without -c);")
		fmt.Fprintln(stdout, "with -u hands a checked configuration to the serving process; with -t only checks.")
		return 0
	}
	if opts.conf == "" {
		if opts.test || opts.upgrade {
			// Nothing to check and nothing to hand over: bootstrap idle and
			// exit, as before there was a server.
			logTo(stdout, "", "WARN ", "No configuration provided. Idle mode ...", "Bootstrap starting", "Bootstrap done")
			return 0
		}
		return serve(ctx, opts, nil, stdout, stderr)
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
	if opts.upgrade {
		return upgrade(opts, cfg, data, stdout, stderr)
	}
	if opts.daemon {
		return daemonStart(opts, cfg, data, stdout, stderr)
	}
	return serve(ctx, opts, cfg, stdout, stderr)
}

// daemonStart is `-c FILE -d` without -u: Pingora forks a new server into
// the background and the command returns. In the test bed the serving
// Carrier2 is always a pod's main process (started without -d); a daemon
// start is exec'd only where none runs, into a fake pod whose commands run
// on the host: serving there would take the host's ports and outlive the
// pod. So it answers as a fresh start that serves nothing (the stand-in's
// answer). Where a Carrier2 does serve, a second one could not bind its
// ports, and says so as Pingora would.
//
// In a pod whose containers the test bed runs as processes (pod-runner
// marks its /tmp), the exec can come between the container's restart on
// the Carrier2 image and its process taking the upgrade socket. The real
// daemon would then serve the configuration itself; the stand-in hands it
// to the pod's Carrier2 once that listens, which serves the same.
func daemonStart(opts options, cfg *Config, data []byte, stdout, stderr io.Writer) int {
	sock := cfg.UpgradeSock
	if sock == "" {
		sock = defaultUpgradeSock
	}
	if serving(sock) {
		return panicked(stderr, cfg.ErrorLog, fmt.Sprintf(
			"a Carrier2 already serves on %s (its ports are taken): upgrade it with -u instead", sock))
	}
	if _, err := os.Stat(mainProcessMark); err == nil && servingWithin(sock, startingWait) {
		return upgrade(opts, cfg, data, stdout, stderr)
	}
	return upgradeWithNothingListening(opts, cfg, sock, stdout, stderr)
}

// servingWithin is whether a server listens on sock within d.
func servingWithin(sock string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for !serving(sock) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// serve runs a server on cfg (idle when nil) until a signal or ctx ends it.
func serve(ctx context.Context, opts options, cfg *Config, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	// Caught from the start: an upgrade may begin as soon as the pod runs.
	quit := make(chan os.Signal, 1)
	signal.Notify(quit, syscall.SIGQUIT)
	defer signal.Stop(quit)
	s := newServer(stdout, opts.daemon)
	sock, errorLog := defaultUpgradeSock, ""
	if cfg == nil {
		s.out.log("WARN ", "No configuration provided. Idle mode ...", "Bootstrap starting")
	} else {
		errorLog = cfg.ErrorLog
		if cfg.UpgradeSock != "" {
			sock = cfg.UpgradeSock
		}
		s.out.setErrorLog(errorLog)
		s.out.log("INFO ", "Bootstrap starting")
	}
	// The socket first: if another server owns it, this one must not go on
	// to fight over its ports.
	if err := s.listen(sock); err != nil {
		return panicked(stderr, errorLog, err.Error())
	}
	var err error
	if cfg == nil {
		err = s.writeIdlePID(idlePIDFile)
	} else {
		err = s.apply(cfg)
	}
	if err != nil {
		s.shutdown()
		return panicked(stderr, errorLog, err.Error())
	}
	s.out.log("INFO ", fmt.Sprintf("pid %d takes upgrades on %s", s.pid, sock), "Bootstrap done")
	// Pingora's upgrade starts with SIGQUIT to the serving process (Gefyra's
	// reload script sends it, then runs `carrier2 -u`), which then hands its
	// listeners to the new one. Here the serving process itself takes the
	// new configuration over the socket, so SIGQUIT only announces it: the
	// process keeps serving instead of dying as Go's default would have it.
	for waiting := true; waiting; {
		select {
		case <-quit:
			s.out.log("INFO ", fmt.Sprintf("SIGQUIT: an upgrade is coming; serving on until it arrives on %s", sock))
		case <-ctx.Done():
			waiting = false
		}
	}
	s.out.log("INFO ", "Graceful shutdown: no new connections, draining those in flight")
	s.shutdown()
	s.out.log("INFO ", "Shutdown done")
	return 0
}

// upgrade hands cfg to the server on its upgrade socket, or, when nothing
// listens there, answers as a process starting afresh would.
func upgrade(opts options, cfg *Config, data []byte, stdout, stderr io.Writer) int {
	sock := cfg.UpgradeSock
	if sock == "" {
		sock = defaultUpgradeSock
	}
	reply, reachable, err := askServer(sock, data)
	if err != nil {
		return panicked(stderr, cfg.ErrorLog, err.Error())
	}
	if !reachable {
		return upgradeWithNothingListening(opts, cfg, sock, stdout, stderr)
	}
	switch {
	case strings.HasPrefix(reply, "ok "):
		lines := []string{"Bootstrap starting", "upgrading from pid " + strings.TrimPrefix(reply, "ok ")}
		lines = append(lines, configLines(cfg)...)
		return emit(stdout, stderr, cfg.ErrorLog, append(lines, "Bootstrap done"))
	case strings.HasPrefix(reply, "error "):
		return panicked(stderr, cfg.ErrorLog, fmt.Sprintf("the carrier2 serving on %s refused configuration %s: %s",
			sock, opts.conf, strings.TrimPrefix(reply, "error ")))
	default:
		return panicked(stderr, cfg.ErrorLog, fmt.Sprintf("unexpected answer on the upgrade socket %s: %q", sock, reply))
	}
}

// upgradeWithNothingListening is the stand-in's answer from before there was
// a server, kept for the pods that run none: the pid file names the process
// "taken over" from, and -d leaves this process's pid in it.
func upgradeWithNothingListening(opts options, cfg *Config, sock string, stdout, stderr io.Writer) int {
	pidFile := cfg.PIDFile
	if pidFile == "" {
		pidFile = pingoraPIDFile
	}
	lines := []string{"Bootstrap starting"}
	if old, err := os.ReadFile(pidFile); err == nil {
		lines = append(lines, fmt.Sprintf("upgrading from pid %s (stand-in: nothing is listening on %s, so nothing took over)",
			strings.TrimSpace(string(old)), sock))
	} else {
		lines = append(lines, fmt.Sprintf("upgrade requested, but nothing is listening on %s and there is no pid file %s: starting afresh (nothing took over)",
			sock, pidFile))
	}
	lines = append(lines, configLines(cfg)...)
	lines = append(lines, "Bootstrap done")
	if opts.daemon {
		pid := strconv.Itoa(os.Getpid())
		if err := os.WriteFile(pidFile, []byte(pid+"\n"), 0o644); err != nil {
			return panicked(stderr, cfg.ErrorLog, fmt.Sprintf("cannot write pid file: %v", err))
		}
		lines = append(lines, fmt.Sprintf("daemonized as pid %s (stand-in: exits now, nothing listens)", pid))
	}
	return emit(stdout, stderr, cfg.ErrorLog, lines)
}

// configLines describe a configuration as it is applied.
func configLines(cfg *Config) []string {
	lines := []string{fmt.Sprintf("Configure %d proxy", len(cfg.Proxy))}
	for _, p := range cfg.Proxy {
		scheme := "http"
		if p.TLS != nil {
			scheme = "https"
		}
		lines = append(lines, fmt.Sprintf("proxy on %s:%d (%s), cluster upstream %v, bridges %v",
			listenHost, p.Port, scheme, p.ClusterUpstream, p.BridgeNames()))
	}
	if cfg.Probes != nil {
		if len(cfg.Probes.HTTPGet) > 0 {
			lines = append(lines, fmt.Sprintf("Configured httpGet (scheme HTTP) probe ports: %v", cfg.Probes.HTTPGet))
		}
		if len(cfg.Probes.HTTPSGet) > 0 {
			lines = append(lines, fmt.Sprintf("Configured httpsGet (scheme HTTPS) probe ports: %v", cfg.Probes.HTTPSGet))
		}
	}
	return lines
}

// emit logs the lines of a successful run and gives its exit status.
func emit(stdout, stderr io.Writer, errorLog string, lines []string) int {
	// stdout first: a caller may have sent it to the error log's file too
	// (`&> /tmp/carrier.log`); appending afterwards keeps both.
	logTo(stdout, "", "INFO ", lines...)
	if errorLog != "" {
		if err := logTo(nil, errorLog, "INFO ", lines...); err != nil {
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
