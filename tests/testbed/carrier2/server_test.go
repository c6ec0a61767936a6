package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	// Keep every default path off the machine's /tmp, where a real
	// carrier2 may be running, and every port on loopback.
	dir, err := os.MkdirTemp("", "carrier2-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	listenHost = "127.0.0.1"
	defaultUpgradeSock = filepath.Join(dir, "default.sock")
	idlePIDFile = filepath.Join(dir, "idle.pid")
	pingoraPIDFile = filepath.Join(dir, "pingora.pid")
	mainProcessMark = filepath.Join(dir, ".testbed-main-process") // absent unless a test makes it
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// syncBuffer is a server's stdout, written by its goroutines while the test
// reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

type runningServer struct {
	stdout, stderr *syncBuffer
	cancel         context.CancelFunc
	done           chan int
}

// stop ends the server as SIGTERM would and gives its exit status.
func (s *runningServer) stop() int {
	s.cancel()
	select {
	case code := <-s.done:
		s.done <- code
		return code
	case <-time.After(20 * time.Second):
		return -1
	}
}

// startServer runs carrier2 with args as a server and waits for its
// "Bootstrap done" (after which its ports listen) and its upgrade socket.
func startServer(t *testing.T, sock string, args ...string) *runningServer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &runningServer{stdout: &syncBuffer{}, stderr: &syncBuffer{}, cancel: cancel, done: make(chan int, 1)}
	go func() { s.done <- runContext(ctx, args, s.stdout, s.stderr) }()
	t.Cleanup(func() { s.stop() })
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(s.stdout.String(), "Bootstrap done") {
		select {
		case code := <-s.done:
			s.done <- code
			t.Fatalf("server exited %d before it was up: %s%s", code, s.stdout.String(), s.stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("server not up: %s%s", s.stdout.String(), s.stderr.String())
		}
	}
	if reply, ok, err := askServer(sock, nil); !ok || err != nil || reply != "ok "+strconv.Itoa(os.Getpid()) {
		t.Fatalf("ping on %s: %q, %v, %v", sock, reply, ok, err)
	}
	return s
}

// freePort is a loopback port nothing listened on a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// backend answers its name; /slow answers after 300 ms, /echo also reports
// the Host and X-Forwarded-For it saw.
func backend(t *testing.T, name string) *httptest.Server {
	t.Helper()
	b := httptest.NewServer(backendHandler(name))
	t.Cleanup(b.Close)
	return b
}

func backendHandler(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow":
			time.Sleep(300 * time.Millisecond)
		case "/echo":
			fmt.Fprintf(w, "%s host=%s xff=%s ae=%q ua=%q sni=", name, r.Host, r.Header.Get("X-Forwarded-For"),
				r.Header.Get("Accept-Encoding"), r.Header.Get("User-Agent"))
			if r.TLS != nil {
				io.WriteString(w, r.TLS.ServerName)
			}
			return
		}
		io.WriteString(w, name)
	})
}

func hostPort(s *httptest.Server) string { return s.Listener.Addr().String() }

// get sends one request on a new connection.
func get(t *testing.T, url string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if strings.EqualFold(header[i], "host") {
			req.Host = header[i+1]
		} else {
			req.Header.Set(header[i], header[i+1])
		}
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		// Headers the client did not set must not appear on their way.
		DisableCompression: true,
		TLSClientConfig:    &tls.Config{InsecureSkipVerify: true},
	}}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func wantBody(t *testing.T, url, want string, header ...string) {
	t.Helper()
	if code, body := get(t, url, header...); code != 200 || body != want {
		t.Errorf("GET %s %v: %d %q, want 200 %q", url, header, code, body, want)
	}
}

func proxyURL(port int, path string) string {
	return fmt.Sprintf("http://127.0.0.1:%d%s", port, path)
}

// keepAlive is one client connection reused for several requests.
type keepAlive struct {
	c net.Conn
	r *bufio.Reader
}

func dialKeepAlive(t *testing.T, port int) *keepAlive {
	t.Helper()
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &keepAlive{c: c, r: bufio.NewReader(c)}
}

func (k *keepAlive) get(t *testing.T, path string, header ...string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: app.test\r\n", path)
	for i := 0; i+1 < len(header); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", header[i], header[i+1])
	}
	b.WriteString("\r\n")
	k.c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(k.c, b.String()); err != nil {
		t.Fatalf("keep-alive connection: %v", err)
	}
	resp, err := http.ReadResponse(k.r, nil)
	if err != nil {
		t.Fatalf("keep-alive connection: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.Close {
		t.Fatalf("keep-alive connection: %d close=%v %q", resp.StatusCode, resp.Close, body)
	}
	return string(body)
}

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(body, "DIR", dir)), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func refused(port int) bool {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
	if err == nil {
		c.Close()
		return false
	}
	return true
}

func TestMatching(t *testing.T) {
	cfg, err := Parse([]byte(`version: 1
proxy:
- port: 80
  clusterUpstream: [shadow-1:80, shadow-2:80]
  bridges:
    b-header-exact:
      endpoint: exact:1
      rules:
      - match: [{matchHeader: {name: X-User, value: alice}}]
    a-shadows-b:
      endpoint: first:1
      rules:
      - match: [{matchHeader: {name: x-user, value: alice}}, {matchPath: {path: /first, type: prefix}}]
    c-header-prefix:
      endpoint: prefix:1
      rules:
      - match: [{matchHeader: {name: x-team, value: dev-, type: prefix}}]
    d-header-regex:
      endpoint: regex:1
      rules:
      - match: [{matchHeader: {name: x-tag, value: "[0-9]{3}", type: regex}}]
    e-path-exact:
      endpoint: path-exact:1
      rules:
      - match: [{matchPath: {path: /exact}}]
    f-path-prefix:
      endpoint: path-prefix:1
      rules:
      - match: [{matchPath: {path: /pre, type: prefix}}]
    g-path-regex:
      endpoint: path-regex:1
      rules:
      - match: [{matchPath: {path: "^/items/[0-9]+$", type: regex}}]
      - match: [{matchPath: {path: "debug=1", type: regex}}]
    h-and:
      endpoint: and:1
      rules:
      - match: [{matchHeader: {name: x-and, value: "yes"}}, {matchPath: {path: /and, type: prefix}}]
    i-host:
      endpoint: host:1
      rules:
      - match: [{matchHeader: {name: host, value: dev.test}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	rt, err := newRoute(cfg.Proxy[0], nil, func(string, ...any) {})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, target, want string
		header             []string
	}{
		{"header exact, name in any case", "/", "exact:1", []string{"X-USER", "alice"}},
		{"header exact is not a prefix", "/", "", []string{"x-user", "alicia"}},
		{"header exact is case-sensitive in the value", "/", "", []string{"x-user", "Alice"}},
		{"header: any of its values", "/", "exact:1", []string{"x-user", "bob", "x-user", "alice"}},
		{"header prefix", "/", "prefix:1", []string{"x-team", "dev-blue"}},
		{"header prefix misses", "/", "", []string{"x-team", "ops-dev-"}},
		{"header regex is unanchored", "/", "regex:1", []string{"x-tag", "build-1234"}},
		{"header regex misses", "/", "", []string{"x-tag", "12"}},
		{"host header", "/", "host:1", []string{"Host", "dev.test"}},
		{"path exact", "/exact", "path-exact:1", nil},
		{"path exact fails with a query", "/exact?x=1", "", nil},
		{"path prefix", "/pre/x", "path-prefix:1", nil},
		{"path prefix with a query", "/prefix?x=1", "path-prefix:1", nil},
		{"path regex", "/items/42", "path-regex:1", nil},
		{"path regex sees the query", "/items/42?x=1", "", nil},
		{"rules are OR'd: the query's rule", "/other?debug=1", "path-regex:1", nil},
		{"matches are AND'd: both", "/and/x", "and:1", []string{"x-and", "yes"}},
		{"matches are AND'd: header only", "/x", "", []string{"x-and", "yes"}},
		{"matches are AND'd: path only", "/and/x", "", nil},
		{"first bridge in name order wins", "/first", "first:1", []string{"x-user", "alice"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", tc.target, nil)
			for i := 0; i+1 < len(tc.header); i += 2 {
				if strings.EqualFold(tc.header[i], "host") {
					r.Host = tc.header[i+1]
				} else {
					r.Header.Add(tc.header[i], tc.header[i+1])
				}
			}
			got := rt.pick(r)
			if tc.want == "" {
				if !strings.HasPrefix(got, "shadow-") {
					t.Errorf("%s went to %s, want a cluster upstream", tc.target, got)
				}
			} else if got != tc.want {
				t.Errorf("%s went to %s, want %s", tc.target, got, tc.want)
			}
		})
	}

	t.Run("round robin alternates", func(t *testing.T) {
		var got []string
		for range 4 {
			got = append(got, rt.pick(httptest.NewRequest("GET", "/none", nil)))
		}
		if got[0] == got[1] || got[0] != got[2] || got[1] != got[3] {
			t.Errorf("picks %v", got)
		}
	})

	t.Run("no upstream at all", func(t *testing.T) {
		cfg, err := Parse([]byte("version: 1\nproxy: [{port: 80}]\n"))
		if err != nil {
			t.Fatal(err)
		}
		rt, _ := newRoute(cfg.Proxy[0], nil, func(string, ...any) {})
		w := httptest.NewRecorder()
		rt.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.Code != 502 || !strings.Contains(w.Body.String(), "no clusterUpstream") {
			t.Errorf("%d %q", w.Code, w.Body.String())
		}
	})
}

func TestServeRoutesAndUpgradesGracefully(t *testing.T) {
	dir := t.TempDir()
	shadow, dev := backend(t, "shadow"), backend(t, "dev")
	kept, removed, added, probe := freePort(t), freePort(t), freePort(t), freePort(t)
	head := "version: 1\nerror_log: DIR/carrier.log\npid_file: DIR/carrier2.pid\nupgrade_sock: DIR/carrier2.sock\n"
	before := writeFile(t, dir, "before.yaml", head+fmt.Sprintf(`probes: {httpGet: [%d]}
proxy:
- port: %d
  clusterUpstream: [%q]
  bridges:
    dev:
      endpoint: %q
      rules:
      - match: [{matchHeader: {name: x-gefyra, value: dev}}]
- port: %d
  clusterUpstream: [%q]
`, probe, kept, hostPort(shadow), hostPort(dev), removed, hostPort(shadow)))
	after := writeFile(t, dir, "after.yaml", head+fmt.Sprintf(`proxy:
- port: %d
  clusterUpstream: [%q]
- port: %d
  clusterUpstream: [%q]
`, kept, hostPort(shadow), added, hostPort(dev)))
	sock := filepath.Join(dir, "carrier2.sock")
	srv := startServer(t, sock, "-c", before)

	wantBody(t, proxyURL(kept, "/"), "shadow")
	wantBody(t, proxyURL(kept, "/"), "dev", "x-gefyra", "dev")
	wantBody(t, proxyURL(kept, "/"), "shadow", "x-gefyra", "other")
	wantBody(t, proxyURL(removed, "/"), "shadow")
	wantBody(t, proxyURL(probe, "/healthz"), "ok")
	if !refused(added) {
		t.Fatalf("port %d listens before the upgrade", added)
	}
	conn := dialKeepAlive(t, kept)
	if got := conn.get(t, "/", "x-gefyra", "dev"); got != "dev" {
		t.Fatalf("before the upgrade: %q", got)
	}

	type result struct {
		code int
		body string
		at   time.Time
	}
	slow := func(port int) chan result {
		done := make(chan result, 1)
		go func() {
			resp, err := http.Get(proxyURL(port, "/slow"))
			if err != nil {
				done <- result{body: err.Error(), at: time.Now()}
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			done <- result{resp.StatusCode, string(body), time.Now()}
		}()
		return done
	}
	// In flight during the upgrade: one on a port that stays, one on a port
	// that goes away (and drains).
	inFlight, draining := slow(kept), slow(removed)
	time.Sleep(100 * time.Millisecond)

	var stdout, stderr bytes.Buffer
	if code := run([]string{"-c", after, "-u"}, &stdout, &stderr); code != 0 {
		t.Fatalf("upgrade: exit %d: %s", code, stderr.String())
	}
	upgraded := time.Now()
	for _, want := range []string{"Bootstrap starting", "upgrading from pid " + strconv.Itoa(os.Getpid()), "Configure 2 proxy", "Bootstrap done"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("upgrade's stdout lacks %q:\n%s", want, stdout.String())
		}
	}

	// Gone at once, while its request in flight drains.
	if !refused(removed) {
		t.Errorf("removed port %d still listens", removed)
	}
	for what, done := range map[string]chan result{"a port that stays": inFlight, "a port that went away": draining} {
		r := <-done
		if r.code != 200 || r.body != "shadow" {
			t.Errorf("request in flight during the upgrade on %s: %d %q", what, r.code, r.body)
		}
		if !r.at.After(upgraded) {
			t.Errorf("the slow request on %s finished before the upgrade did; it proves nothing", what)
		}
	}
	if got := conn.get(t, "/", "x-gefyra", "dev"); got != "shadow" {
		t.Errorf("the keep-alive connection after the upgrade reached %q, want the upstream", got)
	}
	wantBody(t, proxyURL(kept, "/"), "shadow", "x-gefyra", "dev")
	wantBody(t, proxyURL(added, "/"), "dev")
	if !refused(probe) {
		t.Errorf("removed probe port %d still listens", probe)
	}

	log, _ := os.ReadFile(filepath.Join(dir, "carrier.log"))
	for _, want := range []string{"upgrade requested over the upgrade socket", fmt.Sprintf("proxy on 127.0.0.1:%d (http)", added)} {
		if !strings.Contains(string(log), want) {
			t.Errorf("error_log lacks %q:\n%s", want, log)
		}
	}
	if code := srv.stop(); code != 0 {
		t.Errorf("server exit %d: %s", code, srv.stderr.String())
	}
	if !refused(kept) {
		t.Errorf("port %d listens after shutdown", kept)
	}
}

func TestUpgradeWithABadConfigKeepsTheOldOne(t *testing.T) {
	dir := t.TempDir()
	shadow, dev := backend(t, "shadow"), backend(t, "dev")
	port := freePort(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	head := "version: 1\nerror_log: DIR/carrier.log\nupgrade_sock: DIR/carrier2.sock\npid_file: DIR/carrier2.pid\n"
	good := writeFile(t, dir, "good.yaml", head+fmt.Sprintf("proxy: [{port: %d, clusterUpstream: [%q]}]\n", port, hostPort(shadow)))
	srv := startServer(t, filepath.Join(dir, "carrier2.sock"), "-c", good)
	wantBody(t, proxyURL(port, "/"), "shadow")

	notPEM := writeFile(t, dir, "not.pem", "cert\n")
	for _, tc := range []struct{ name, config, want string }{
		{"fails to parse", head + fmt.Sprintf("proxy: [{port: %d, clusterUpstream: [\"web:http\"]}]\n", port),
			`proxy[0].clusterUpstream[0]: port "http" of "web:http" is not a number`},
		{"a new port is taken", head + fmt.Sprintf("proxy: [{port: %d, clusterUpstream: [%q]}, {port: %d, clusterUpstream: [%q]}]\n",
			port, hostPort(dev), taken.Addr().(*net.TCPAddr).Port, hostPort(dev)),
			fmt.Sprintf("refused configuration DIR/bad.yaml: cannot listen on port %d", taken.Addr().(*net.TCPAddr).Port)},
		{"certificate not loadable", head + fmt.Sprintf("proxy: [{port: %d, tls: {certificate: %s, key: %s}, clusterUpstream: [%q]}]\n",
			port, notPEM, notPEM, hostPort(dev)),
			"proxy[0].tls: cannot load certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := writeFile(t, dir, "bad.yaml", tc.config)
			var stdout, stderr bytes.Buffer
			if code := run([]string{"-c", bad, "-u", "-d"}, &stdout, &stderr); code != 1 {
				t.Fatalf("exit %d: %s%s", code, stdout.String(), stderr.String())
			}
			want := strings.ReplaceAll(tc.want, "DIR", dir)
			if !strings.HasPrefix(stderr.String(), "thread 'main' panicked at src/main.rs: ") || !strings.Contains(stderr.String(), want) {
				t.Errorf("stderr %q lacks %q", stderr.String(), want)
			}
			if strings.Contains(stdout.String(), "Bootstrap starting") {
				t.Errorf("stdout: %s", stdout.String())
			}
			log, _ := os.ReadFile(filepath.Join(dir, "carrier.log"))
			if !strings.Contains(string(log), want) {
				t.Errorf("error_log lacks %q:\n%s", want, log)
			}
			wantBody(t, proxyURL(port, "/"), "shadow")
		})
	}
	if code := srv.stop(); code != 0 {
		t.Errorf("server exit %d", code)
	}
}

func TestUpgradeWithNothingListening(t *testing.T) {
	dir := t.TempDir()
	// A socket file its server left behind when it died: nothing answers.
	stale, err := net.Listen("unix", filepath.Join(dir, "stale.sock"))
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	for _, sock := range []string{"absent.sock", "stale.sock"} {
		t.Run(sock, func(t *testing.T) {
			os.Remove(filepath.Join(dir, "carrier2.pid"))
			conf := writeConfig(t, dir, "version: 1\nerror_log: DIR/carrier.log\npid_file: DIR/carrier2.pid\nupgrade_sock: DIR/"+sock+
				"\nproxy: [{port: 8080, clusterUpstream: [\"web:80\"]}]\n")
			var stdout, stderr bytes.Buffer
			if code := run([]string{"-c", conf, "-u"}, &stdout, &stderr); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			for _, want := range []string{"Bootstrap starting", "nothing is listening on " + filepath.Join(dir, sock), "starting afresh", "Bootstrap done"} {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
				}
			}
			// With -d the pid file is left as before, and the next upgrade
			// names it.
			if code := run([]string{"-c", conf, "-u", "-d"}, &stdout, &stderr); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			stdout.Reset()
			if code := run([]string{"-c", conf, "-u"}, &stdout, &stderr); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			if !strings.Contains(stdout.String(), "upgrading from pid "+strconv.Itoa(os.Getpid())) {
				t.Errorf("stdout:\n%s", stdout.String())
			}
		})
	}
}

func TestIdleServerTakesAConfiguration(t *testing.T) {
	dir := t.TempDir()
	shadow := backend(t, "shadow")
	// The default socket of a server that died.
	stale, err := net.Listen("unix", defaultUpgradeSock)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()

	srv := startServer(t, defaultUpgradeSock)
	if !strings.Contains(srv.stdout.String(), "No configuration provided. Idle mode ...") {
		t.Errorf("stdout: %s", srv.stdout.String())
	}
	if pid, _ := os.ReadFile(idlePIDFile); strings.TrimSpace(string(pid)) != strconv.Itoa(os.Getpid()) {
		t.Errorf("idle pid file holds %q", pid)
	}
	port := freePort(t)
	if !refused(port) {
		t.Fatal("the port listens before any configuration")
	}

	// A second server must not take the socket from the live one. Bounded:
	// one that wrongly starts would serve forever.
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	second := writeConfig(t, dir, fmt.Sprintf("version: 1\nproxy: [{port: %d}]\n", freePort(t)))
	if code := runContext(ctx, []string{"-c", second}, &stdout, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "another carrier2 is already listening on the upgrade socket "+defaultUpgradeSock) {
		t.Fatalf("second server: exit %d: %s%s", code, stdout.String(), stderr.String())
	}

	// Gefyra's reload script starts an upgrade with SIGQUIT to the serving
	// process: it must keep serving and take the configuration after it.
	if err := syscall.Kill(os.Getpid(), syscall.SIGQUIT); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(srv.stdout.String(), "SIGQUIT: an upgrade is coming"); {
		if time.Now().After(deadline) {
			t.Fatalf("SIGQUIT not taken as an upgrade's start: %s", srv.stdout.String())
		}
		time.Sleep(10 * time.Millisecond)
	}

	conf := writeConfig(t, dir, fmt.Sprintf("version: 1\nerror_log: DIR/carrier.log\npid_file: DIR/carrier2.pid\n"+
		"proxy: [{port: %d, clusterUpstream: [%q]}]\n", port, hostPort(shadow)))
	stdout.Reset()
	if code := run([]string{"-c", conf, "-u"}, &stdout, &stderr); code != 0 {
		t.Fatalf("upgrade: exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "upgrading from pid "+strconv.Itoa(os.Getpid())) {
		t.Errorf("stdout: %s", stdout.String())
	}
	wantBody(t, proxyURL(port, "/"), "shadow")
	if _, err := os.Stat(idlePIDFile); err == nil {
		t.Errorf("the idle pid file stays beside the configuration's")
	}
	if code := srv.stop(); code != 0 {
		t.Errorf("server exit %d", code)
	}
	if _, err := os.Stat(defaultUpgradeSock); err == nil {
		t.Errorf("socket left behind")
	}
}

// writeCert writes a self-signed certificate and its key as PEM files.
func writeCert(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	cfg, err := newServer(io.Discard, false).probeCert()
	if err != nil {
		t.Fatal(err)
	}
	cert := cfg.Certificates[0]
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	certFile = writeFile(t, dir, "tls.crt", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]})))
	keyFile = writeFile(t, dir, "tls.key", string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key})))
	return certFile, keyFile
}

func TestTLSProbesAndWhatBackendsSee(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := writeCert(t, dir)
	plain := backend(t, "plain")
	secure := httptest.NewTLSServer(backendHandler("secure"))
	defer secure.Close()
	gone := freePort(t)
	proxyPort, tlsPort, unreachable, httpProbe, httpsProbe := freePort(t), freePort(t), freePort(t), freePort(t), freePort(t)
	conf := writeFile(t, dir, "config.yaml", fmt.Sprintf(`version: 1
upgrade_sock: DIR/carrier2.sock
pid_file: DIR/carrier2.pid
probes: {httpGet: [%d, %d], httpsGet: [%d]}
proxy:
- port: %d
  clusterUpstream: [%q]
- port: %d
  tls: {certificate: %s, key: %s, sni: app.example}
  clusterUpstream: [%q]
- port: %d
  clusterUpstream: ["127.0.0.1:%d"]
`, httpProbe, proxyPort, httpsProbe, proxyPort, hostPort(plain), tlsPort, certFile, keyFile, hostPort(secure), unreachable, gone))
	srv := startServer(t, filepath.Join(dir, "carrier2.sock"), "-c", conf)

	wantBody(t, proxyURL(proxyPort, "/echo"), `plain host=app.test xff=127.0.0.1 ae="" ua="" sni=`, "Host", "app.test", "User-Agent", "")
	wantBody(t, proxyURL(proxyPort, "/echo"), `plain host=app.test xff=10.0.0.9, 127.0.0.1 ae="br" ua="curl/8" sni=`,
		"Host", "app.test", "X-Forwarded-For", "10.0.0.9", "Accept-Encoding", "br", "User-Agent", "curl/8")
	wantBody(t, fmt.Sprintf("https://127.0.0.1:%d/echo", tlsPort), `secure host=app.test xff=127.0.0.1 ae="" ua="" sni=app.example`,
		"Host", "app.test", "User-Agent", "")
	wantBody(t, proxyURL(httpProbe, "/healthz"), "ok")
	wantBody(t, fmt.Sprintf("https://127.0.0.1:%d/healthz", httpsProbe), "ok")
	// A probe port that is a proxy port is proxied.
	wantBody(t, proxyURL(proxyPort, "/healthz"), "plain")
	if code, _ := get(t, proxyURL(httpsProbe, "/healthz")); code != 400 {
		t.Errorf("plain HTTP to the httpsGet probe port: %d", code)
	}

	code, body := get(t, proxyURL(unreachable, "/"))
	if want := fmt.Sprintf("127.0.0.1:%d", gone); code != 502 || !strings.Contains(body, want) || strings.Count(body, "\n") != 1 {
		t.Errorf("unreachable upstream: %d %q, want 502 naming %s on one line", code, body, want)
	}
	if code := srv.stop(); code != 0 {
		t.Errorf("server exit %d", code)
	}
}
