package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

// start runs the backend with args and returns the addresses it listens on.
func start(t *testing.T, args ...string) []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, w := io.Pipe()
	done := make(chan int, 1)
	var stderr strings.Builder
	go func() { done <- run(ctx, args, w, &stderr); _ = w.Close() }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("exit status %d; stderr: %s", code, stderr.String())
			}
		case <-time.After(5 * time.Second):
			t.Error("did not stop")
		}
	})
	var addrs []string
	lines := bufio.NewScanner(out)
	for len(addrs) < strings.Count(strings.Join(args, " "), "--listen") && lines.Scan() {
		addr, ok := strings.CutPrefix(lines.Text(), "listening on ")
		if !ok {
			t.Fatalf("unexpected output %q", lines.Text())
		}
		addrs = append(addrs, addr)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return addrs
}

func get(t *testing.T, req *http.Request) (*http.Response, Reply) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var reply Reply
	if err := json.NewDecoder(resp.Body).Decode(&reply); err != nil {
		t.Fatalf("body is not the JSON reply: %v", err)
	}
	return resp, reply
}

func TestEchoesTheRequestAndWhoAnswered(t *testing.T) {
	addrs := start(t, "--name", "web-0", "--listen", "127.0.0.1:0", "--listen", "127.0.0.1:0")
	if len(addrs) != 2 || addrs[0] == addrs[1] {
		t.Fatalf("listening on %v, want two addresses", addrs)
	}
	for _, addr := range addrs {
		req, _ := http.NewRequest("POST", "http://"+addr+"/a/b?x=1&y=%2F", strings.NewReader("hello"))
		req.Host = "shop.example"
		req.Header.Set("X-Test", "one")
		req.Header.Add("X-Test", "two")
		resp, reply := get(t, req)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("X-Echo-Name") != "web-0" {
			t.Errorf("status %d, headers %v", resp.StatusCode, resp.Header)
		}
		want := Reply{Name: "web-0", Listen: addr, Method: "POST", Path: "/a/b", Query: "x=1&y=%2F", Host: "shop.example", Proto: "HTTP/1.1", BodyLength: 5}
		got := reply
		got.Headers, got.RemoteAddr = nil, ""
		if !reflect.DeepEqual(got, want) {
			t.Errorf("reply %+v, want %+v", got, want)
		}
		if h := reply.Headers["X-Test"]; len(h) != 2 || h[0] != "one" || h[1] != "two" {
			t.Errorf("X-Test headers %v", h)
		}
		if !strings.HasPrefix(reply.RemoteAddr, "127.0.0.1:") {
			t.Errorf("remoteAddr %q", reply.RemoteAddr)
		}
	}
}

func TestStatusAndHeaders(t *testing.T) {
	addrs := start(t, "--listen", "127.0.0.1:0", "--status", "503", "--header", "Retry-After: 5", "--header", "X-A:b")
	req, _ := http.NewRequest("GET", "http://"+addrs[0]+"/", nil)
	resp, reply := get(t, req)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "5" || resp.Header.Get("X-A") != "b" {
		t.Errorf("status %d, headers %v", resp.StatusCode, resp.Header)
	}
	if reply.Name != "echo" || reply.Path != "/" {
		t.Errorf("reply %+v", reply)
	}
}

func TestBadArguments(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"--listen", "127.0.0.1:0", "--status", "42"},
		{"--listen", "127.0.0.1:0", "--header", "nocolon"},
		{"--listen", "127.0.0.1:0", "extra"},
		{"--listen", "256.0.0.1:0"},
	} {
		var stderr strings.Builder
		if code := run(context.Background(), args, io.Discard, &stderr); code == 0 || stderr.Len() == 0 {
			t.Errorf("%q: exit status %d, stderr %q", args, code, stderr.String())
		}
	}
}
