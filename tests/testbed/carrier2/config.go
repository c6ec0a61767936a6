package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// Config is a Carrier2 configuration: Pingora's server settings at the top,
// Gefyra's proxies (one listener each) and probe ports beside them. The shape
// is that of Gefyra's operator (gefyra/bridge/carrier2/config.py), which
// writes it, and of carrier2's src/main.rs and src/lib.rs, which read it.
type Config struct {
	Version                   int
	Threads                   *int
	ErrorLog                  string
	PIDFile                   string
	UpgradeSock               string
	UpstreamKeepalivePoolSize *int
	Probes                    *Probes
	Proxy                     []Proxy
}

// Probes are ports answered with 200 for the pod's httpGet/httpsGet probes.
type Probes struct {
	HTTPGet  []int
	HTTPSGet []int
}

// Proxy is one listener: its cluster upstream and the bridges that take
// matching requests elsewhere.
type Proxy struct {
	Port            int
	TLS             *TLS
	ClusterUpstream []string
	Bridges         map[string]Bridge
}

// TLS makes a proxy listen with TLS (and talk TLS to its upstreams).
type TLS struct {
	Certificate string
	Key         string
	SNI         string
}

// Bridge sends requests matching any of its rules to its endpoint.
type Bridge struct {
	Endpoint string
	Rules    []Rule
}

// Rule matches when all of its matches do.
type Rule struct {
	Match []Match
}

// Match is exactly one of a header match and a path match.
type Match struct {
	Header *MatchHeader
	Path   *MatchPath
}

type MatchHeader struct {
	Name, Value, Type string
}

type MatchPath struct {
	Path, Type string
}

// BridgeNames are the names of a proxy's bridges, sorted.
func (p Proxy) BridgeNames() []string {
	names := make([]string, 0, len(p.Bridges))
	for name := range p.Bridges {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Parse reads a configuration strictly: YAML with no duplicate keys, no
// unknown fields, every value of its type, every address host:port. Errors
// name the field, e.g. `proxy[0].clusterUpstream[1]: port "http" of
// "web:http" is not a number`.
func Parse(data []byte) (*Config, error) {
	doc, err := decode(data, true)
	if err != nil {
		return nil, err
	}
	if doc == nil {
		return nil, fmt.Errorf("the configuration is empty")
	}
	return parseConfig(node{v: doc})
}

// ErrorLogOf is the error_log a configuration names, read leniently, so that
// a failure can be logged where the caller looks even when the rest of the
// configuration is wrong. Empty when it cannot be told.
func ErrorLogOf(data []byte) string {
	doc, err := decode(data, false)
	if err != nil {
		return ""
	}
	if top, ok := doc.(map[string]any); ok {
		if path, ok := top["error_log"].(string); ok {
			return path
		}
	}
	return ""
}

func decode(data []byte, strict bool) (any, error) {
	var (
		js  []byte
		err error
	)
	if strict {
		js, err = yaml.YAMLToJSONStrict(data)
	} else {
		js, err = yaml.YAMLToJSON(data)
	}
	if err != nil {
		return nil, fmt.Errorf("not valid YAML: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("not valid YAML: %v", err)
	}
	return doc, nil
}

func parseConfig(top node) (*Config, error) {
	fields, err := top.object("version", "threads", "error_log", "pid_file", "upgrade_sock",
		"upstream_keepalive_pool_size", "probes", "proxy")
	if err != nil {
		return nil, err
	}
	c := &Config{}
	if c.Version, err = fields.required("version").integer(0, -1); err != nil {
		return nil, err
	}
	if c.Threads, err = fields.optional("threads").optionalInteger(0, -1); err != nil {
		return nil, err
	}
	if c.UpstreamKeepalivePoolSize, err = fields.optional("upstream_keepalive_pool_size").optionalInteger(0, -1); err != nil {
		return nil, err
	}
	for _, s := range []struct {
		key  string
		dest *string
	}{{"error_log", &c.ErrorLog}, {"pid_file", &c.PIDFile}, {"upgrade_sock", &c.UpgradeSock}} {
		if n := fields.optional(s.key); n.present() {
			if *s.dest, err = n.str(); err != nil {
				return nil, err
			}
		}
	}
	if n := fields.optional("probes"); n.present() {
		if c.Probes, err = parseProbes(n); err != nil {
			return nil, err
		}
	}
	proxies, err := fields.required("proxy").list()
	if err != nil {
		return nil, err
	}
	if len(proxies) == 0 {
		return nil, fields.required("proxy").errorf("needs at least one proxy")
	}
	ports := map[int]string{}
	for _, n := range proxies {
		p, err := parseProxy(n)
		if err != nil {
			return nil, err
		}
		if other, taken := ports[p.Port]; taken {
			return nil, n.at("port").errorf("%d is already the port of %s", p.Port, other)
		}
		ports[p.Port] = n.path
		c.Proxy = append(c.Proxy, *p)
	}
	return c, nil
}

func parseProbes(n node) (*Probes, error) {
	fields, err := n.object("httpGet", "httpsGet")
	if err != nil {
		return nil, err
	}
	probes := &Probes{}
	for _, p := range []struct {
		key  string
		dest *[]int
	}{{"httpGet", &probes.HTTPGet}, {"httpsGet", &probes.HTTPSGet}} {
		list := fields.optional(p.key)
		if !list.present() {
			continue
		}
		items, err := list.list()
		if err != nil {
			return nil, err
		}
		for _, item := range items {
			port, err := item.integer(1, 65535)
			if err != nil {
				return nil, err
			}
			*p.dest = append(*p.dest, port)
		}
	}
	return probes, nil
}

func parseProxy(n node) (*Proxy, error) {
	fields, err := n.object("port", "tls", "clusterUpstream", "bridges")
	if err != nil {
		return nil, err
	}
	p := &Proxy{}
	if p.Port, err = fields.required("port").integer(1, 65535); err != nil {
		return nil, err
	}
	if t := fields.optional("tls"); t.present() {
		if p.TLS, err = parseTLS(t); err != nil {
			return nil, err
		}
	}
	if u := fields.optional("clusterUpstream"); u.present() {
		items, err := u.list()
		if err != nil {
			return nil, err
		}
		for _, item := range items {
			address, err := item.hostPort()
			if err != nil {
				return nil, err
			}
			p.ClusterUpstream = append(p.ClusterUpstream, address)
		}
	}
	if b := fields.optional("bridges"); b.present() {
		entries, err := b.mapping()
		if err != nil {
			return nil, err
		}
		p.Bridges = map[string]Bridge{}
		for _, name := range sortedKeys(entries) {
			entry := b.at(name)
			entry.v = entries[name]
			bridge, err := parseBridge(entry)
			if err != nil {
				return nil, err
			}
			p.Bridges[name] = *bridge
		}
	}
	return p, nil
}

func parseTLS(n node) (*TLS, error) {
	fields, err := n.object("certificate", "key", "sni")
	if err != nil {
		return nil, err
	}
	t := &TLS{}
	for _, f := range []struct {
		key  string
		dest *string
	}{{"certificate", &t.Certificate}, {"key", &t.Key}} {
		file := fields.required(f.key)
		if *f.dest, err = file.str(); err != nil {
			return nil, err
		}
		if err := readable(*f.dest); err != nil {
			return nil, file.errorf("%v", err)
		}
	}
	if sni := fields.optional("sni"); sni.present() {
		if t.SNI, err = sni.str(); err != nil {
			return nil, err
		}
	}
	return t, nil
}

func parseBridge(n node) (*Bridge, error) {
	fields, err := n.object("endpoint", "rules")
	if err != nil {
		return nil, err
	}
	b := &Bridge{}
	if b.Endpoint, err = fields.required("endpoint").hostPort(); err != nil {
		return nil, err
	}
	rules, err := fields.required("rules").list()
	if err != nil {
		return nil, err
	}
	for _, r := range rules {
		rule, err := parseRule(r)
		if err != nil {
			return nil, err
		}
		b.Rules = append(b.Rules, *rule)
	}
	return b, nil
}

func parseRule(n node) (*Rule, error) {
	fields, err := n.object("match")
	if err != nil {
		return nil, err
	}
	matches, err := fields.required("match").list()
	if err != nil {
		return nil, err
	}
	rule := &Rule{}
	for _, m := range matches {
		match, err := parseMatch(m)
		if err != nil {
			return nil, err
		}
		rule.Match = append(rule.Match, *match)
	}
	return rule, nil
}

func parseMatch(n node) (*Match, error) {
	fields, err := n.object("matchHeader", "matchPath")
	if err != nil {
		return nil, err
	}
	header, path := fields.optional("matchHeader"), fields.optional("matchPath")
	switch {
	case header.present() && path.present():
		return nil, n.errorf("has both matchHeader and matchPath; a match holds exactly one")
	case header.present():
		hf, err := header.object("name", "value", "type")
		if err != nil {
			return nil, err
		}
		h := &MatchHeader{}
		if h.Name, err = hf.required("name").str(); err != nil {
			return nil, err
		}
		if h.Value, err = hf.required("value").str(); err != nil {
			return nil, err
		}
		if h.Type, err = hf.optional("type").matchType(h.Name, h.Value); err != nil {
			return nil, err
		}
		return &Match{Header: h}, nil
	case path.present():
		pf, err := path.object("path", "type")
		if err != nil {
			return nil, err
		}
		p := &MatchPath{}
		if p.Path, err = pf.required("path").str(); err != nil {
			return nil, err
		}
		if p.Type, err = pf.optional("type").matchType(p.Path); err != nil {
			return nil, err
		}
		return &Match{Path: p}, nil
	default:
		return nil, n.errorf("needs one of matchHeader, matchPath")
	}
}

// readable: the file exists, is a regular file and can be opened for reading.
func readable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("cannot read %q: %v", path, unwrapPathError(err))
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return fmt.Errorf("cannot read %q: %v", path, err)
	}
	if info.IsDir() {
		return fmt.Errorf("%q is a directory, not a file", path)
	}
	return nil
}

func unwrapPathError(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// node is a value of the decoded document and the path that leads to it.
type node struct {
	path string
	v    any
	// absent: the key is not there (or null), for optional fields.
	absent bool
}

func (n node) at(key string) node {
	if n.path == "" {
		return node{path: key}
	}
	return node{path: n.path + "." + key}
}

func (n node) index(i int) node {
	return node{path: fmt.Sprintf("%s[%d]", n.path, i)}
}

func (n node) present() bool { return !n.absent }

func (n node) errorf(format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if n.path == "" {
		return fmt.Errorf("%s", msg)
	}
	return fmt.Errorf("%s: %s", n.path, msg)
}

func (n node) typeError(want string) error {
	return n.errorf("must be %s, not %s", want, describe(n.v))
}

// fields are the entries of a mapping whose keys were checked.
type fields struct {
	parent node
	m      map[string]any
}

func (f fields) optional(key string) node {
	child := f.parent.at(key)
	v, ok := f.m[key]
	child.v = v
	child.absent = !ok || v == nil
	return child
}

func (f fields) required(key string) node {
	child := f.optional(key)
	if child.absent {
		child.absent = false
		child.v = missing{}
	}
	return child
}

// missing stands for a required field that is not there.
type missing struct{}

// object checks that the node is a mapping with no keys but the given ones.
func (n node) object(allowed ...string) (fields, error) {
	m, err := n.mapping()
	if err != nil {
		return fields{}, err
	}
	for _, key := range sortedKeys(m) {
		known := false
		for _, a := range allowed {
			known = known || key == a
		}
		if !known {
			return fields{}, n.at(key).errorf("unknown field (known here: %s)", strings.Join(allowed, ", "))
		}
	}
	return fields{parent: n, m: m}, nil
}

func (n node) mapping() (map[string]any, error) {
	if _, ok := n.v.(missing); ok {
		return nil, n.errorf("missing (required)")
	}
	m, ok := n.v.(map[string]any)
	if !ok {
		return nil, n.typeError("a mapping")
	}
	return m, nil
}

func (n node) list() ([]node, error) {
	if _, ok := n.v.(missing); ok {
		return nil, n.errorf("missing (required)")
	}
	items, ok := n.v.([]any)
	if !ok {
		return nil, n.typeError("a list")
	}
	nodes := make([]node, len(items))
	for i, item := range items {
		nodes[i] = n.index(i)
		nodes[i].v = item
	}
	return nodes, nil
}

func (n node) str() (string, error) {
	if _, ok := n.v.(missing); ok {
		return "", n.errorf("missing (required)")
	}
	s, ok := n.v.(string)
	if !ok {
		return "", n.typeError("a string")
	}
	return s, nil
}

// integer checks min <= value and, unless max < 0, value <= max.
func (n node) integer(min, max int64) (int, error) {
	if _, ok := n.v.(missing); ok {
		return 0, n.errorf("missing (required)")
	}
	num, ok := n.v.(json.Number)
	if !ok {
		return 0, n.typeError("an integer")
	}
	i, err := num.Int64()
	if err != nil {
		return 0, n.errorf("must be an integer, not %s", num)
	}
	if i < min || (max >= 0 && i > max) {
		if max == 65535 {
			return 0, n.errorf("%d is not a port (1-65535)", i)
		}
		if max < 0 {
			return 0, n.errorf("must be at least %d, not %d", min, i)
		}
		return 0, n.errorf("must be between %d and %d, not %d", min, max, i)
	}
	return int(i), nil
}

func (n node) optionalInteger(min, max int64) (*int, error) {
	if !n.present() {
		return nil, nil
	}
	i, err := n.integer(min, max)
	if err != nil {
		return nil, err
	}
	return &i, nil
}

// hostPort checks a "host:port" string with a numeric port, as Pingora's
// peers and load balancers take them.
func (n node) hostPort() (string, error) {
	s, err := n.str()
	if err != nil {
		return "", err
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", n.errorf("%q is not host:port", s)
	}
	if host == "" {
		return "", n.errorf("%q has no host", s)
	}
	number, err := strconv.Atoi(port)
	if err != nil {
		return "", n.errorf("port %q of %q is not a number", port, s)
	}
	if number < 1 || number > 65535 {
		return "", n.errorf("port %d of %q is not a port (1-65535)", number, s)
	}
	return s, nil
}

// matchType reads a match's type (exact when absent); for regex, each of
// patterns must compile.
func (n node) matchType(patterns ...string) (string, error) {
	if !n.present() {
		return "exact", nil
	}
	t, err := n.str()
	if err != nil {
		return "", err
	}
	switch t {
	case "exact", "prefix":
	case "regex":
		for _, p := range patterns {
			if _, err := regexp.Compile(p); err != nil {
				return "", n.errorf("%q is not a valid regular expression: %v", p, err)
			}
		}
	default:
		return "", n.errorf("%q is not one of exact, prefix, regex", t)
	}
	return t, nil
}

func describe(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case missing:
		return "missing"
	case string:
		return fmt.Sprintf("the string %q", v)
	case json.Number:
		return "the number " + v.String()
	case bool:
		return fmt.Sprintf("the boolean %v", v)
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	default:
		return fmt.Sprintf("%T", v)
	}
}
