package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"regexp"
	"strings"
	"sync/atomic"
	"time"
)

// route is one proxy entry of an applied configuration. A port's listener
// outlives it: an upgrade swaps in a new route and the old one serves only
// the requests already in flight.
type route struct {
	port      int
	bridges   []bridgeRoute // in name order: the first that matches wins
	upstreams []string
	next      atomic.Uint64 // round robin over upstreams
	transport *http.Transport
	proxy     *httputil.ReverseProxy
}

type bridgeRoute struct {
	name     string
	endpoint string
	rules    [][]matcher // OR of ANDs
}

// matcher is one matchHeader or matchPath; target is the request's path
// with its query.
type matcher func(r *http.Request, target string) bool

type upstreamKey struct{}

// defaultPoolSize is the idle pool per upstream when the configuration sets
// none: the test bed's backends are few and small.
const defaultPoolSize = 16

func newRoute(p Proxy, poolSize *int, debugf func(string, ...any)) (*route, error) {
	rt := &route{port: p.Port, upstreams: p.ClusterUpstream}
	for _, name := range p.BridgeNames() {
		b := p.Bridges[name]
		br := bridgeRoute{name: name, endpoint: b.Endpoint}
		for i, rule := range b.Rules {
			var and []matcher
			for j, m := range rule.Match {
				mt, err := newMatcher(m)
				if err != nil {
					// Parse compiled the same patterns; this only guards
					// against the two drifting apart.
					return nil, fmt.Errorf("proxy on port %d: bridges.%s.rules[%d].match[%d]: %v", p.Port, name, i, j, err)
				}
				and = append(and, mt)
			}
			br.rules = append(br.rules, and)
		}
		rt.bridges = append(rt.bridges, br)
	}
	rt.transport = newTransport(poolSize, p.TLS)
	scheme := "http"
	if p.TLS != nil {
		scheme = "https"
	}
	rt.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = scheme
			pr.Out.URL.Host = pr.In.Context().Value(upstreamKey{}).(string)
			// Out.Host stays the client's Host. Rewrite strips the forwarding
			// headers; put back what the client sent and append it to
			// X-Forwarded-For, so a backend sees what it would behind any
			// ordinary reverse proxy.
			for _, h := range []string{"Forwarded", "X-Forwarded-Host", "X-Forwarded-Proto"} {
				if v, ok := pr.In.Header[h]; ok {
					pr.Out.Header[h] = v
				}
			}
			if ip, _, err := net.SplitHostPort(pr.In.RemoteAddr); err == nil {
				if prior := pr.In.Header["X-Forwarded-For"]; len(prior) > 0 {
					ip = strings.Join(prior, ", ") + ", " + ip
				}
				pr.Out.Header.Set("X-Forwarded-For", ip)
			}
		},
		Transport: rt.transport,
		ErrorLog:  discardLog,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			up, _ := r.Context().Value(upstreamKey{}).(string)
			debugf("proxy on port %d: upstream %s: %v", p.Port, up, err)
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusBadGateway)
			fmt.Fprintf(w, "carrier2: upstream %s unreachable: %s\n", up, oneLine(err.Error()))
		},
	}
	return rt, nil
}

func (rt *route) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	up := rt.pick(r)
	if up == "" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusBadGateway)
		fmt.Fprintf(w, "carrier2: no bridge matches and the proxy on port %d has no clusterUpstream\n", rt.port)
		return
	}
	rt.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), upstreamKey{}, up)))
}

// pick is the upstream for r: the first matching bridge's endpoint, else the
// next cluster upstream; empty when there is none.
func (rt *route) pick(r *http.Request) string {
	target := requestTarget(r)
	for _, b := range rt.bridges {
		if b.matches(r, target) {
			return b.endpoint
		}
	}
	if len(rt.upstreams) == 0 {
		return ""
	}
	n := rt.next.Add(1) - 1
	return rt.upstreams[n%uint64(len(rt.upstreams))]
}

// matches: any rule, and within a rule every match (so an empty rule
// matches everything and a bridge without rules nothing, as in Carrier2).
func (b bridgeRoute) matches(r *http.Request, target string) bool {
	for _, rule := range b.rules {
		all := true
		for _, m := range rule {
			if !m(r, target) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// requestTarget is the path with its query as the client sent it, which is
// what Carrier2 (Pingora's path_and_query) compares against.
func requestTarget(r *http.Request) string {
	if strings.HasPrefix(r.RequestURI, "/") {
		return r.RequestURI
	}
	return r.URL.RequestURI()
}

func newMatcher(m Match) (matcher, error) {
	switch {
	case m.Header != nil:
		h := *m.Header
		cmp, err := comparer(h.Type, h.Value)
		if err != nil {
			return nil, err
		}
		isHost := strings.EqualFold(h.Name, "host")
		return func(r *http.Request, _ string) bool {
			// net/http moves Host out of the header map.
			if isHost {
				return cmp(r.Host)
			}
			for _, v := range r.Header.Values(h.Name) {
				if cmp(v) {
					return true
				}
			}
			return false
		}, nil
	case m.Path != nil:
		cmp, err := comparer(m.Path.Type, m.Path.Path)
		if err != nil {
			return nil, err
		}
		return func(_ *http.Request, target string) bool { return cmp(target) }, nil
	default:
		return nil, fmt.Errorf("needs one of matchHeader, matchPath")
	}
}

func comparer(kind, want string) (func(string) bool, error) {
	switch kind {
	case "", "exact":
		return func(s string) bool { return s == want }, nil
	case "prefix":
		return func(s string) bool { return strings.HasPrefix(s, want) }, nil
	case "regex":
		re, err := regexp.Compile(want)
		if err != nil {
			return nil, fmt.Errorf("%q is not a valid regular expression: %v", want, err)
		}
		// Unanchored, like Rust's Regex::is_match.
		return re.MatchString, nil
	default:
		return nil, fmt.Errorf("%q is not one of exact, prefix, regex", kind)
	}
}

func newTransport(poolSize *int, t *TLS) *http.Transport {
	pool := defaultPoolSize
	if poolSize != nil {
		pool = *poolSize
	}
	dialer := &net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		// Never an environment proxy: upstreams are cluster addresses.
		Proxy:               nil,
		DialContext:         dialer.DialContext,
		MaxIdleConns:        pool,
		MaxIdleConnsPerHost: pool,
		DisableKeepAlives:   pool == 0,
		// A transport replaced by an upgrade may still get connections back
		// from requests that were in flight; this is what reaps them.
		IdleConnTimeout:       30 * time.Second,
		TLSHandshakeTimeout:   5 * time.Second,
		ExpectContinueTimeout: time.Second,
		// The client's Accept-Encoding (or its absence) must reach the
		// backend unchanged.
		DisableCompression: true,
	}
	if t != nil {
		tr.TLSClientConfig = &tls.Config{
			// Upstreams are pods and Stowaway behind cluster names and IPs;
			// Carrier2 does not verify them either.
			InsecureSkipVerify: true,
			ServerName:         t.SNI,
			NextProtos:         []string{"http/1.1"},
		}
	}
	return tr
}

// probeHandler answers the pod's httpGet/httpsGet probes for ports that no
// proxy serves.
var probeHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte("ok"))
})

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
