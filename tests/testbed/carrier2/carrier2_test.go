package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// What Gefyra's operator writes (Carrier2Config.model_dump_yaml), with a
// bridge added.
const gefyraConfig = `version: 1
threads: 4
error_log: /tmp/carrier.log
pid_file: /tmp/carrier2.pid
upgrade_sock: /tmp/carrier2.sock
upstream_keepalive_pool_size: 100
probes:
  httpGet:
  - 8001
  httpsGet: []
proxy:
- port: 8080
  clusterUpstream:
  - web-abc.default.svc.cluster.local:8080
  - 10.244.0.7:8080
  bridges:
    user-1:
      endpoint: stowaway-port-10001.gefyra.svc.cluster.local:10001
      rules:
      - match:
        - matchHeader:
            name: x-gefyra
            value: user-1
            type: exact
        - matchPath:
            path: /api
            type: prefix
      - match:
        - matchPath:
            path: ^/always/[0-9]+$
            type: regex
- port: 8443
  clusterUpstream:
  - 10.244.0.7:8443
`

func TestParseAcceptsGefyrasConfig(t *testing.T) {
	cfg, err := Parse([]byte(gefyraConfig))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Version != 1 || *cfg.Threads != 4 || cfg.ErrorLog != "/tmp/carrier.log" || cfg.PIDFile != "/tmp/carrier2.pid" {
		t.Errorf("top level: %+v", cfg)
	}
	if len(cfg.Proxy) != 2 || cfg.Proxy[0].Port != 8080 || len(cfg.Proxy[0].ClusterUpstream) != 2 {
		t.Fatalf("proxies: %+v", cfg.Proxy)
	}
	bridge := cfg.Proxy[0].Bridges["user-1"]
	if len(bridge.Rules) != 2 || bridge.Rules[0].Match[0].Header.Name != "x-gefyra" ||
		bridge.Rules[0].Match[1].Path.Type != "prefix" {
		t.Errorf("bridge: %+v", bridge)
	}
	if cfg.Probes == nil || len(cfg.Probes.HTTPGet) != 1 || cfg.Probes.HTTPGet[0] != 8001 {
		t.Errorf("probes: %+v", cfg.Probes)
	}
}

func TestMatchTypeDefaultsToExact(t *testing.T) {
	cfg, err := Parse([]byte(`version: 1
proxy:
- port: 80
  bridges:
    b:
      endpoint: 10.0.0.1:80
      rules:
      - match:
        - matchHeader: {name: x-user, value: me}
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Proxy[0].Bridges["b"].Rules[0].Match[0].Header.Type; got != "exact" {
		t.Errorf("type = %q", got)
	}
}

func TestParseRefusesWithTheFieldsPath(t *testing.T) {
	for _, tc := range []struct{ name, config, want string }{
		{"empty", ``, "the configuration is empty"},
		{"not a mapping", `- 1`, "must be a mapping, not a list"},
		{"unknown top-level field", "version: 1\nport: 8080\nproxy: [{port: 80}]", "port: unknown field"},
		{"missing version", "proxy: [{port: 80}]", "version: missing (required)"},
		{"version a string", "version: \"1\"\nproxy: [{port: 80}]", `version: must be an integer, not the string "1"`},
		{"threads negative", "version: 1\nthreads: -1\nproxy: [{port: 80}]", "threads: must be at least 0, not -1"},
		{"threads a float", "version: 1\nthreads: 1.5\nproxy: [{port: 80}]", "threads: must be an integer, not 1.5"},
		{"error_log a number", "version: 1\nerror_log: 3\nproxy: [{port: 80}]", "error_log: must be a string, not the number 3"},
		{"missing proxy", "version: 1", "proxy: missing (required)"},
		{"empty proxy", "version: 1\nproxy: []", "proxy: needs at least one proxy"},
		{"proxy a mapping", "version: 1\nproxy: {port: 80}", "proxy: must be a list, not a mapping"},
		{"missing port", "version: 1\nproxy: [{clusterUpstream: [a:1]}]", "proxy[0].port: missing (required)"},
		{"port a string", "version: 1\nproxy: [{port: \"80\"}]", `proxy[0].port: must be an integer, not the string "80"`},
		{"port out of range", "version: 1\nproxy: [{port: 70000}]", "proxy[0].port: 70000 is not a port (1-65535)"},
		{"duplicate port", "version: 1\nproxy: [{port: 80}, {port: 80}]", "proxy[1].port: 80 is already the port of proxy[0]"},
		{"unknown proxy field", "version: 1\nproxy: [{port: 80, upstream: [a:1]}]", "proxy[0].upstream: unknown field"},
		{"upstream without port", "version: 1\nproxy: [{port: 80, clusterUpstream: [web]}]", `proxy[0].clusterUpstream[0]: "web" is not host:port`},
		{"upstream port a name", "version: 1\nproxy: [{port: 80, clusterUpstream: [a:1, \"web:http\"]}]", `proxy[0].clusterUpstream[1]: port "http" of "web:http" is not a number`},
		{"upstream port 0", "version: 1\nproxy: [{port: 80, clusterUpstream: [\"web:0\"]}]", `proxy[0].clusterUpstream[0]: port 0 of "web:0" is not a port`},
		{"upstream without host", "version: 1\nproxy: [{port: 80, clusterUpstream: [\":80\"]}]", `proxy[0].clusterUpstream[0]: ":80" has no host`},
		{"upstream a number", "version: 1\nproxy: [{port: 80, clusterUpstream: [8080]}]", "proxy[0].clusterUpstream[0]: must be a string, not the number 8080"},
		{"tls missing key", "version: 1\nproxy: [{port: 80, tls: {certificate: /dev/null}}]", "proxy[0].tls.key: missing (required)"},
		{"tls file absent", "version: 1\nproxy: [{port: 80, tls: {certificate: /nonexistent/cert.pem, key: /dev/null}}]",
			`proxy[0].tls.certificate: cannot read "/nonexistent/cert.pem": no such file or directory`},
		{"tls file a directory", "version: 1\nproxy: [{port: 80, tls: {certificate: /, key: /dev/null}}]", `proxy[0].tls.certificate: "/" is a directory`},
		{"bridge without endpoint", "version: 1\nproxy: [{port: 80, bridges: {u: {rules: []}}}]", "proxy[0].bridges.u.endpoint: missing (required)"},
		{"bridge endpoint port", "version: 1\nproxy: [{port: 80, bridges: {u: {endpoint: \"a:99999\", rules: []}}}]", `proxy[0].bridges.u.endpoint: port 99999 of "a:99999" is not a port`},
		{"bridge unknown field", "version: 1\nproxy: [{port: 80, bridges: {u: {endpoint: \"a:1\", rules: [], tls: true}}}]", "proxy[0].bridges.u.tls: unknown field"},
		{"bridge null", "version: 1\nproxy: [{port: 80, bridges: {u: null}}]", "proxy[0].bridges.u: must be a mapping, not null"},
		{"match with both", "version: 1\nproxy: [{port: 80, bridges: {u: {endpoint: \"a:1\", rules: [{match: [{matchPath: {path: /}, matchHeader: {name: a, value: b}}]}]}}}]",
			"proxy[0].bridges.u.rules[0].match[0]: has both matchHeader and matchPath"},
		{"match with neither", "version: 1\nproxy: [{port: 80, bridges: {u: {endpoint: \"a:1\", rules: [{match: [{}]}]}}}]",
			"proxy[0].bridges.u.rules[0].match[0]: needs one of matchHeader, matchPath"},
		{"match unknown kind", "version: 1\nproxy: [{port: 80, bridges: {u: {endpoint: \"a:1\", rules: [{match: [{matchQuery: {q: 1}}]}]}}}]",
			"proxy[0].bridges.u.rules[0].match[0].matchQuery: unknown field"},
		{"match bad type", "version: 1\nproxy: [{port: 80, bridges: {u: {endpoint: \"a:1\", rules: [{match: [{matchPath: {path: /, type: glob}}]}]}}}]",
			`proxy[0].bridges.u.rules[0].match[0].matchPath.type: "glob" is not one of exact, prefix, regex`},
		{"match bad regex", "version: 1\nproxy: [{port: 80, bridges: {u: {endpoint: \"a:1\", rules: [{match: [{matchHeader: {name: x, value: \"(\", type: regex}}]}]}}}]",
			`proxy[0].bridges.u.rules[0].match[0].matchHeader.type: "(" is not a valid regular expression`},
		{"header without value", "version: 1\nproxy: [{port: 80, bridges: {u: {endpoint: \"a:1\", rules: [{match: [{matchHeader: {name: x}}]}]}}}]",
			"proxy[0].bridges.u.rules[0].match[0].matchHeader.value: missing (required)"},
		{"probe port", "version: 1\nprobes: {httpGet: [0]}\nproxy: [{port: 80}]", "probes.httpGet[0]: 0 is not a port"},
		{"probe unknown", "version: 1\nprobes: {tcp: [80]}\nproxy: [{port: 80}]", "probes.tcp: unknown field"},
		{"duplicate key", "version: 1\nversion: 2\nproxy: [{port: 80}]", "not valid YAML"},
		{"bad YAML", "version: [1\n", "not valid YAML"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.config))
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.config)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestErrorLogIsReadFromAConfigurationThatIsOtherwiseWrong(t *testing.T) {
	if got := ErrorLogOf([]byte("error_log: /tmp/x.log\nproxy: oops\nextra: 1")); got != "/tmp/x.log" {
		t.Errorf("got %q", got)
	}
	if got := ErrorLogOf([]byte("error_log: [")); got != "" {
		t.Errorf("got %q from broken YAML", got)
	}
}

func TestArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want options
	}{
		{[]string{"-c", "/tmp/c.yaml", "-u", "-d"}, options{conf: "/tmp/c.yaml", upgrade: true, daemon: true}},
		{[]string{"--conf", "c.yaml", "--upgrade", "--daemon"}, options{conf: "c.yaml", upgrade: true, daemon: true}},
		{[]string{"--conf=c.yaml", "--test"}, options{conf: "c.yaml", test: true}},
		{[]string{"-udc", "c.yaml"}, options{conf: "c.yaml", upgrade: true, daemon: true}},
		{[]string{"-tcc.yaml"}, options{conf: "c.yaml", test: true}},
	} {
		got, err := parseArgs(tc.args)
		if err != nil || got != tc.want {
			t.Errorf("%v: got %+v, %v; want %+v", tc.args, got, err, tc.want)
		}
	}
	for _, args := range [][]string{{"-x"}, {"--verbose"}, {"-c"}, {"extra"}, {"-u", "--conf"}} {
		if _, err := parseArgs(args); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

// writeConfig puts a configuration whose files live in dir into dir.
func writeConfig(t *testing.T, dir, body string) string {
	t.Helper()
	body = strings.ReplaceAll(body, "DIR", dir)
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// A server (-c without -u; -d is debug logging now and no longer forks and
// exits) writes its pid file; an upgrade hands over to it and names its pid.
func TestRunBootstrapsWritesPidAndLog(t *testing.T) {
	dir := t.TempDir()
	conf := writeConfig(t, dir, fmt.Sprintf("version: 1\nerror_log: DIR/carrier.log\npid_file: DIR/carrier2.pid\n"+
		"upgrade_sock: DIR/carrier2.sock\nproxy: [{port: %d, clusterUpstream: [\"web:80\"]}]\n", freePort(t)))
	srv := startServer(t, filepath.Join(dir, "carrier2.sock"), "-c", conf)
	if !strings.Contains(srv.stdout.String(), "Bootstrap starting") {
		t.Errorf("stdout: %s", srv.stdout.String())
	}
	pid, err := os.ReadFile(filepath.Join(dir, "carrier2.pid"))
	if err != nil || strings.TrimSpace(string(pid)) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("pid file: %q, %v", pid, err)
	}
	// An upgrade names the pid it takes over from.
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-c", conf, "-u", "-d"}, &stdout, &stderr); code != 0 {
		t.Fatalf("upgrade: exit %d: %s", code, stderr.String())
	}
	log, _ := os.ReadFile(filepath.Join(dir, "carrier.log"))
	if !strings.Contains(string(log), "upgrading from pid "+strings.TrimSpace(string(pid))) ||
		strings.Count(string(log), "Bootstrap starting") != 2 {
		t.Errorf("log:\n%s", log)
	}
	if code := srv.stop(); code != 0 {
		t.Errorf("server exit %d", code)
	}
	for _, f := range []string{"carrier2.pid", "carrier2.sock"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			t.Errorf("%s left behind after shutdown", f)
		}
	}
}

// A daemon start (-d without -u) is what an operator execs where no
// Carrier2 runs yet: in the test bed, a fake pod whose commands run on the
// host. It answers as a fresh start and serves nothing (no port taken);
// where a Carrier2 serves, it refuses, pointing at -u.
func TestDaemonStartServesNothingAndRefusesBesideAServer(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	conf := writeConfig(t, dir, fmt.Sprintf("version: 1\nerror_log: DIR/carrier.log\npid_file: DIR/carrier2.pid\n"+
		"upgrade_sock: DIR/carrier2.sock\nproxy: [{port: %d, clusterUpstream: [\"web:80\"]}]\n", port))
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-c", conf, "-d"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{"Bootstrap starting", "Bootstrap done", "daemonized as pid"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
		}
	}
	if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
		t.Errorf("port %d was taken by a daemon start: %v", port, err)
	} else {
		l.Close()
	}

	srv := startServer(t, filepath.Join(dir, "carrier2.sock"), "-c", conf)
	stdout.Reset()
	stderr.Reset()
	if code := run([]string{"-c", conf, "-d"}, &stdout, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "panicked") || !strings.Contains(stderr.String(), "upgrade it with -u") {
		t.Errorf("beside a server: exit %d, stderr %s", code, stderr.String())
	}
	if code := srv.stop(); code != 0 {
		t.Errorf("server exit %d", code)
	}
}

func TestRunPanicsIntoTheErrorLog(t *testing.T) {
	dir := t.TempDir()
	conf := writeConfig(t, dir, "version: 1\nerror_log: DIR/carrier.log\nproxy: [{port: 8080, clusterUpstream: [\"web:http\"]}]\n")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-c", conf, "-u", "-d"}, &stdout, &stderr); code != 1 {
		t.Fatalf("exit %d", code)
	}
	want := `thread 'main' panicked at src/main.rs: invalid configuration ` + conf +
		`: proxy[0].clusterUpstream[0]: port "http" of "web:http" is not a number`
	if !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr %q lacks %q", stderr.String(), want)
	}
	log, _ := os.ReadFile(filepath.Join(dir, "carrier.log"))
	if !strings.Contains(string(log), want) || strings.Contains(string(log), "Bootstrap starting") {
		t.Errorf("log:\n%s", log)
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout: %s", stdout.String())
	}
	// A bad flag panics into the log too, when the configuration names one.
	stderr.Reset()
	if code := run([]string{"-c", conf, "--bogus"}, &stdout, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "unexpected argument '--bogus'") {
		t.Errorf("bad flag: %s", stderr.String())
	}
	log, _ = os.ReadFile(filepath.Join(dir, "carrier.log"))
	if !strings.Contains(string(log), "unexpected argument '--bogus'") {
		t.Errorf("log after bad flag:\n%s", log)
	}
}

func TestRunTestOnlyChecks(t *testing.T) {
	dir := t.TempDir()
	conf := writeConfig(t, dir, "version: 1\nerror_log: DIR/carrier.log\npid_file: DIR/carrier2.pid\nproxy: [{port: 8080}]\n")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-t", "-c", conf}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "Server Test passed") {
		t.Errorf("stdout: %s", stdout.String())
	}
	for _, f := range []string{"carrier.log", "carrier2.pid"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			t.Errorf("-t wrote %s", f)
		}
	}
}

// In a process pod (pod-runner's mark in /tmp), a daemon start exec'd while
// the pod's own Carrier2 is still starting waits for it and hands it the
// configuration: the pod then serves it, as it would with the real daemon.
// Without the mark (a fake pod) it answers at once, as above.
func TestDaemonStartInAProcessPodHandsTheConfigToItsStartingCarrier(t *testing.T) {
	dir := t.TempDir()
	saved := mainProcessMark
	mainProcessMark = filepath.Join(dir, ".testbed-main-process")
	t.Cleanup(func() { mainProcessMark = saved })
	if err := os.WriteFile(mainProcessMark, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	conf := writeConfig(t, dir, fmt.Sprintf("version: 1\nerror_log: DIR/carrier.log\n"+
		"upgrade_sock: %s\nproxy: [{port: %d, clusterUpstream: [\"web:80\"]}]\n", defaultUpgradeSock, port))
	// The pod's Carrier2 (idle, on the default socket) starts a moment later.
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan int, 1)
	pod := &syncBuffer{}
	go func() {
		time.Sleep(300 * time.Millisecond)
		served <- runContext(ctx, nil, pod, io.Discard)
	}()
	defer func() {
		cancel()
		<-served
	}()
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-c", conf, "-d"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s%s", code, stdout.String(), stderr.String())
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pod's Carrier2 never served port %d: %s", port, pod.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
