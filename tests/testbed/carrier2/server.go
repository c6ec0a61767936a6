package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Where things go when nothing says otherwise. Variables so that tests keep
// off the machine's /tmp.
var (
	// listenHost is where proxy and probe ports listen; tests use loopback.
	listenHost = "0.0.0.0"
	// defaultUpgradeSock is Gefyra's upgrade_sock.
	defaultUpgradeSock = "/tmp/carrier2.sock"
	// idlePIDFile is where an idle server (no configuration) puts its pid,
	// Gefyra's pid_file.
	idlePIDFile = "/tmp/carrier2.pid"
	// pingoraPIDFile is Pingora's default for a configuration without pid_file.
	pingoraPIDFile = "/tmp/pingora.pid"
	// mainProcessMark is put in a pod's /tmp by the test bed's pod-runner
	// when it runs the pod's containers as processes (see daemonStart).
	mainProcessMark = "/tmp/.testbed-main-process"
)

// startingWait is how long a daemon start in a process pod waits for the
// pod's own Carrier2 to listen (a container restarted on the new image
// is reported running a moment before its process takes the socket).
const startingWait = 3 * time.Second

const (
	// upgradeTimeout bounds one exchange on the upgrade socket, both ends,
	// so that an operator's exec never hangs on it.
	upgradeTimeout = 5 * time.Second
	// maxConfigBytes: far beyond any configuration an operator writes.
	maxConfigBytes = 4 << 20
	// drainTimeout is how long a port that went away keeps serving its
	// requests in flight.
	drainTimeout = 3 * time.Second
)

var discardLog = log.New(io.Discard, "", 0)

// logger writes env_logger-style lines to stdout and appends them to the
// current configuration's error_log.
type logger struct {
	mu       sync.Mutex
	stdout   io.Writer
	errorLog string
	debug    bool
}

func (l *logger) log(level string, lines ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	logTo(l.stdout, "", level, lines...)
	if l.errorLog != "" {
		if err := logTo(nil, l.errorLog, level, lines...); err != nil {
			logTo(l.stdout, "", "WARN ", fmt.Sprintf("cannot write error_log: %v", err))
		}
	}
}

func (l *logger) debugf(format string, args ...any) {
	if l.debug {
		l.log("DEBUG", fmt.Sprintf(format, args...))
	}
}

func (l *logger) setErrorLog(path string) {
	l.mu.Lock()
	l.errorLog = path
	l.mu.Unlock()
}

// debugWriter turns net/http's own error log into debug lines.
type debugWriter struct{ l *logger }

func (d debugWriter) Write(p []byte) (int, error) {
	d.l.debugf("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// server is a running Carrier2: its ports, which survive upgrades, and the
// upgrade socket through which the next configuration arrives.
type server struct {
	pid int
	out *logger

	mu      sync.Mutex // serializes applies; guards what follows
	ports   map[int]*port
	sock    string
	sockLn  net.Listener
	pidFile string
	closed  bool

	probeOnce sync.Once
	probeTLS  *tls.Config
	probeErr  error

	wg sync.WaitGroup // port drains and socket loops, for shutdown
}

// port is one listening TCP port. Its state (plain or TLS, which handler) is
// swapped by upgrades; the listener itself stays, so nothing is refused and
// open keep-alive connections carry on with the new state.
type port struct {
	num   int
	ln    net.Listener
	srv   *http.Server
	state atomic.Pointer[portState]
}

type portState struct {
	tls     *tls.Config // nil: plain HTTP
	handler http.Handler
	route   *route // nil for probes
}

func (st *portState) release() {
	if st != nil && st.route != nil {
		st.route.transport.CloseIdleConnections()
	}
}

// switchingListener hands out TLS or plain connections by the port's state
// at accept time; net/http does the handshake when it sees a *tls.Conn.
type switchingListener struct {
	net.Listener
	p *port
}

func (l switchingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if t := l.p.state.Load().tls; t != nil {
		return tls.Server(c, t), nil
	}
	return c, nil
}

func newServer(stdout io.Writer, debug bool) *server {
	return &server{
		pid:   os.Getpid(),
		out:   &logger{stdout: stdout, debug: debug},
		ports: map[int]*port{},
	}
}

// listen opens the upgrade socket. A socket file nobody answers on is left
// from a process that died and is replaced; one that answers belongs to a
// live server, which this one must not steal from.
func (s *server) listen(path string) error {
	ln, err := listenUpgradeSock(path)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.sock, s.sockLn = path, ln
	s.mu.Unlock()
	s.wg.Add(1)
	go s.serveUpgrades(ln)
	return nil
}

func listenUpgradeSock(path string) (net.Listener, error) {
	if info, err := os.Lstat(path); err == nil {
		if info.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("upgrade socket %s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("another carrier2 is already listening on the upgrade socket %s", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("cannot remove the stale upgrade socket %s: %v", path, unwrapPathError(err))
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("cannot listen on the upgrade socket %s: %v", path, err)
	}
	return ln, nil
}

// serveUpgrades answers the upgrade socket's protocol: the client sends a
// configuration's YAML and closes its writing side; the server answers one
// line, "ok <pid>" once the configuration serves or "error <message>" when it
// was refused and the previous one still serves. An empty request is a ping,
// answered "ok <pid>" and otherwise ignored.
func (s *server) serveUpgrades(ln net.Listener) {
	defer s.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			c.SetDeadline(time.Now().Add(upgradeTimeout))
			data, err := io.ReadAll(io.LimitReader(c, maxConfigBytes+1))
			reply := "ok " + strconv.Itoa(s.pid)
			switch {
			case err != nil:
				reply = "error cannot read the configuration: " + err.Error()
			case len(data) > maxConfigBytes:
				reply = fmt.Sprintf("error the configuration is larger than %d bytes", maxConfigBytes)
			case len(data) == 0:
			default:
				if err := s.upgrade(data); err != nil {
					reply = "error " + err.Error()
				}
			}
			io.WriteString(c, oneLine(reply)+"\n")
		}()
	}
}

func (s *server) upgrade(data []byte) error {
	cfg, err := Parse(data)
	if err == nil {
		s.out.log("INFO ", "upgrade requested over the upgrade socket")
		err = s.apply(cfg)
	} else {
		err = fmt.Errorf("invalid configuration: %v", err)
	}
	if err != nil {
		s.out.log("ERROR", "upgrade refused, the running configuration stays: "+oneLine(err.Error()))
	}
	return err
}

// apply makes cfg the served configuration, or changes nothing and says why.
// Ports in both configurations keep their listeners and get the new routes;
// new ports are bound before anything changes; ports that went away stop
// accepting at once and drain their requests in flight.
func (s *server) apply(cfg *Config) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("shutting down")
	}
	states := map[int]*portState{}
	release := func() {
		for _, st := range states {
			st.release()
		}
	}
	for i, p := range cfg.Proxy {
		rt, err := newRoute(p, cfg.UpstreamKeepalivePoolSize, s.out.debugf)
		if err != nil {
			release()
			return err
		}
		st := &portState{handler: rt, route: rt}
		if p.TLS != nil {
			cert, err := tls.LoadX509KeyPair(p.TLS.Certificate, p.TLS.Key)
			if err != nil {
				release()
				return fmt.Errorf("proxy[%d].tls: cannot load certificate %s and key %s: %v", i, p.TLS.Certificate, p.TLS.Key, err)
			}
			st.tls = serverTLS(cert)
		}
		states[p.Port] = st
	}
	if cfg.Probes != nil {
		for _, n := range cfg.Probes.HTTPGet {
			if states[n] == nil {
				states[n] = &portState{handler: probeHandler}
			}
		}
		for _, n := range cfg.Probes.HTTPSGet {
			if st := states[n]; st != nil {
				if st.route == nil {
					release()
					return fmt.Errorf("port %d is both an httpGet and an httpsGet probe port", n)
				}
				continue
			}
			t, err := s.probeCert()
			if err != nil {
				release()
				return err
			}
			states[n] = &portState{tls: t, handler: probeHandler}
		}
	}

	opened := map[int]net.Listener{}
	undo := func() {
		for _, ln := range opened {
			ln.Close()
		}
		release()
	}
	for _, n := range sortedPorts(states) {
		if s.ports[n] != nil {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(listenHost, strconv.Itoa(n)))
		if err != nil {
			undo()
			return fmt.Errorf("cannot listen on port %d: %v", n, err)
		}
		opened[n] = ln
	}
	sock := cfg.UpgradeSock
	if sock == "" {
		sock = defaultUpgradeSock
	}
	var newSock net.Listener
	if sock != s.sock && s.sockLn != nil {
		ln, err := listenUpgradeSock(sock)
		if err != nil {
			undo()
			return err
		}
		newSock = ln
	}
	pidFile := cfg.PIDFile
	if pidFile == "" {
		pidFile = pingoraPIDFile
	}
	if err := writePID(pidFile, s.pid); err != nil {
		if newSock != nil {
			newSock.Close()
		}
		undo()
		return err
	}

	// Nothing can fail from here on.
	for n, st := range states {
		if p := s.ports[n]; p != nil {
			p.state.Swap(st).release()
			continue
		}
		s.ports[n] = s.startPort(n, opened[n], st)
	}
	for n, p := range s.ports {
		if states[n] == nil {
			delete(s.ports, n)
			s.stopPort(p)
		}
	}
	if newSock != nil {
		s.sockLn.Close() // unlinks its file
		s.sock, s.sockLn = sock, newSock
		s.wg.Add(1)
		go s.serveUpgrades(newSock)
	}
	if pidFile != s.pidFile && s.pidFile != "" {
		removePIDIfOurs(s.pidFile, s.pid)
	}
	s.pidFile = pidFile
	s.out.setErrorLog(cfg.ErrorLog)
	s.out.log("INFO ", configLines(cfg)...)
	return nil
}

func (s *server) startPort(n int, ln net.Listener, st *portState) *port {
	p := &port{num: n, ln: ln}
	p.state.Store(st)
	var errorLog = discardLog
	if s.out.debug {
		errorLog = log.New(debugWriter{s.out}, fmt.Sprintf("port %d: ", n), 0)
	}
	p.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p.state.Load().handler.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          errorLog,
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		p.srv.Serve(switchingListener{Listener: ln, p: p})
	}()
	return p
}

// stopPort closes the listener now, so that the port is gone when the
// upgrade's answer arrives, and drains in the background.
func (s *server) stopPort(p *port) {
	p.ln.Close()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
		defer cancel()
		if err := p.srv.Shutdown(ctx); err != nil {
			p.srv.Close()
		}
		p.state.Load().release()
	}()
}

// shutdown stops taking upgrades and connections and drains what is in flight.
func (s *server) shutdown() {
	s.mu.Lock()
	s.closed = true
	if s.sockLn != nil {
		s.sockLn.Close()
	}
	for n, p := range s.ports {
		delete(s.ports, n)
		s.stopPort(p)
	}
	if s.pidFile != "" {
		removePIDIfOurs(s.pidFile, s.pid)
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// probeCert is the self-signed certificate of httpsGet probe ports, made
// once: kubelet does not verify probe certificates.
func (s *server) probeCert() (*tls.Config, error) {
	s.probeOnce.Do(func() {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			s.probeErr = fmt.Errorf("cannot make the probe certificate: %v", err)
			return
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(time.Now().UnixNano()),
			Subject:      pkix.Name{CommonName: "carrier2 probe"},
			DNSNames:     []string{"localhost"},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(10 * 365 * 24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			s.probeErr = fmt.Errorf("cannot make the probe certificate: %v", err)
			return
		}
		s.probeTLS = serverTLS(tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key})
	})
	return s.probeTLS, s.probeErr
}

func serverTLS(cert tls.Certificate) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		// HTTP/1.1 only, as the proxy speaks to its upstreams.
		NextProtos: []string{"http/1.1"},
	}
}

func sortedPorts(m map[int]*portState) []int {
	ports := make([]int, 0, len(m))
	for n := range m {
		ports = append(ports, n)
	}
	sort.Ints(ports)
	return ports
}

func writePID(path string, pid int) error {
	if err := os.WriteFile(path, []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		return fmt.Errorf("cannot write pid file: %v", err)
	}
	return nil
}

// removePIDIfOurs leaves a pid file alone that another process has since
// written.
func removePIDIfOurs(path string, pid int) {
	if data, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(data)) == strconv.Itoa(pid) {
		os.Remove(path)
	}
}

// askServer sends a configuration (or nothing: a ping) over the upgrade
// socket and reads the answer. reachable is false when nothing listens there.
func askServer(sock string, data []byte) (reply string, reachable bool, err error) {
	c, err := net.DialTimeout("unix", sock, upgradeTimeout)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || isRefused(err) {
			return "", false, nil
		}
		return "", false, fmt.Errorf("cannot reach the upgrade socket %s: %v", sock, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(upgradeTimeout))
	if _, err := c.Write(data); err != nil {
		return "", true, fmt.Errorf("cannot send the configuration over %s: %v", sock, err)
	}
	if err := c.(*net.UnixConn).CloseWrite(); err != nil {
		return "", true, fmt.Errorf("cannot send the configuration over %s: %v", sock, err)
	}
	line, err := bufio.NewReader(io.LimitReader(c, 64<<10)).ReadString('\n')
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return "", true, fmt.Errorf("no answer on the upgrade socket %s within %v", sock, upgradeTimeout)
		}
		return "", true, fmt.Errorf("no answer on the upgrade socket %s: %v", sock, err)
	}
	return strings.TrimRight(line, "\n"), true, nil
}

func isRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// writeIdlePID is the pid file of a server that has no configuration yet.
func (s *server) writeIdlePID(path string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := writePID(path, s.pid); err != nil {
		return err
	}
	s.pidFile = path
	return nil
}

// serving says whether a Carrier2 takes upgrades on sock (it is dialled and
// left at once; the server reads an empty configuration and drops it).
func serving(sock string) bool {
	c, err := net.DialTimeout("unix", sock, upgradeTimeout)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}
