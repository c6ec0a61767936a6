// Command echo-backend is the test bed's HTTP backend for traffic tests: it
// listens on every --listen address (a pod's IP:port inside a test's network
// namespace, say) and answers every request with JSON saying who answered and
// what arrived:
//
//	{"name": "...", "listen": "10.244.0.5:8080", "method": "GET", "path": "/a",
//	 "query": "x=1", "host": "example.com", "headers": {"Accept": ["*/*"]}}
//
// The request body is read and its length reported ("bodyLength"). --status
// sets the response status, --header NAME:VALUE adds a response header (both
// repeatable where it makes sense). It prints "listening on ADDR" to stdout
// once per address, when that address accepts connections.
//
// build.sh builds it into the test bed's bin directory (.testbed/bin), as
// tests start it themselves, on the host or in a network namespace.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
)

// Reply is the JSON body of every answer.
type Reply struct {
	Name       string              `json:"name"`
	Listen     string              `json:"listen"`
	Method     string              `json:"method"`
	Path       string              `json:"path"`
	Query      string              `json:"query"`
	Host       string              `json:"host"`
	Proto      string              `json:"proto"`
	RemoteAddr string              `json:"remoteAddr"`
	Headers    map[string][]string `json:"headers"`
	BodyLength int64               `json:"bodyLength"`
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

type options struct {
	name    string
	listen  []string
	status  int
	headers http.Header
	// Print each request's reply as a line `request {json}` on stdout, so
	// that a test can count what reached a backend whose answers nobody
	// reads (a mirror's).
	logRequests bool
}

func parseArgs(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("echo-backend", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var listen, headers listFlag
	opts := options{headers: http.Header{}}
	fs.StringVar(&opts.name, "name", "echo", "name reported in every answer")
	fs.Var(&listen, "listen", "address to listen on, HOST:PORT (repeatable)")
	fs.IntVar(&opts.status, "status", http.StatusOK, "status of every answer")
	fs.Var(&headers, "header", "response header NAME:VALUE (repeatable)")
	fs.BoolVar(&opts.logRequests, "log-requests", false, "print every request as `request {json}` on stdout")
	if err := fs.Parse(args); err != nil {
		return opts, err
	}
	if fs.NArg() > 0 {
		return opts, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if len(listen) == 0 {
		return opts, errors.New("at least one --listen HOST:PORT is required")
	}
	if opts.status < 100 || opts.status > 999 {
		return opts, fmt.Errorf("--status %d is not an HTTP status", opts.status)
	}
	for _, h := range headers {
		name, value, ok := strings.Cut(h, ":")
		if !ok || strings.TrimSpace(name) == "" {
			return opts, fmt.Errorf("--header %q is not NAME:VALUE", h)
		}
		opts.headers.Add(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	opts.listen = listen
	return opts, nil
}

// handler answers for one listen address.
func handler(opts options, listen string, stdout io.Writer) http.Handler {
	var mu sync.Mutex
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		reply := Reply{
			Name:       opts.name,
			Listen:     listen,
			Method:     r.Method,
			Path:       r.URL.Path,
			Query:      r.URL.RawQuery,
			Host:       r.Host,
			Proto:      r.Proto,
			RemoteAddr: r.RemoteAddr,
			Headers:    r.Header,
			BodyLength: n,
		}
		body, err := json.Marshal(reply)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		for name, values := range opts.headers {
			for _, v := range values {
				w.Header().Add(name, v)
			}
		}
		if opts.logRequests {
			mu.Lock()
			fmt.Fprintf(stdout, "request %s\n", body)
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Echo-Name", opts.name)
		w.WriteHeader(opts.status)
		_, _ = w.Write(append(body, '\n'))
	})
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	opts, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "echo-backend: %v\n", err)
		return 2
	}
	var servers []*http.Server
	errs := make(chan error, len(opts.listen))
	for _, addr := range opts.listen {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Fprintf(stderr, "echo-backend: %v\n", err)
			for _, s := range servers {
				_ = s.Close()
			}
			return 1
		}
		srv := &http.Server{Handler: handler(opts, ln.Addr().String(), stdout)}
		servers = append(servers, srv)
		go func() { errs <- srv.Serve(ln) }()
		fmt.Fprintf(stdout, "listening on %s\n", ln.Addr())
	}
	select {
	case <-ctx.Done():
		for _, s := range servers {
			_ = s.Close()
		}
		return 0
	case err := <-errs:
		fmt.Fprintf(stderr, "echo-backend: %v\n", err)
		return 1
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
