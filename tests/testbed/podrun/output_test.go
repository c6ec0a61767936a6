package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	crilogs "k8s.io/cri-client/pkg/logs"
)

// fakeClock returns 2024-05-06T07:08:09.000000001Z, then one millisecond
// later at each call.
func fakeClock() func() time.Time {
	at := time.Date(2024, 5, 6, 7, 8, 9, 1, time.FixedZone("CEST", 2*3600))
	return func() time.Time {
		now := at
		at = at.Add(time.Millisecond)
		return now
	}
}

func TestCRILogLines(t *testing.T) {
	var plain, cri bytes.Buffer
	l := newCRILog(&plain, &cri)
	l.now = fakeClock()
	l.chunk = 5

	// One stream's data, as reads return it: a line split across reads,
	// several lines in one read, a line longer than a chunk (its last part
	// exactly a chunk), an empty line, and a last line without its newline
	// (written at the end); the other stream's meanwhile.
	var pending []byte
	for _, data := range []string{"he", "llo\nab\n", "0123456789\n", "wxyz", "\n\n", "tail"} {
		pending = l.write("stdout", pending, []byte(data))
	}
	l.copy("stderr", strings.NewReader("oops\nno newline"))
	if len(pending) > 0 {
		l.writeLine("stdout", 'F', pending)
	}

	want := strings.Join([]string{
		"2024-05-06T05:08:09.000000001Z stdout F hello",
		"2024-05-06T05:08:09.001000001Z stdout F ab",
		"2024-05-06T05:08:09.002000001Z stdout P 01234",
		"2024-05-06T05:08:09.003000001Z stdout F 56789",
		"2024-05-06T05:08:09.004000001Z stdout F wxyz",
		"2024-05-06T05:08:09.005000001Z stdout F ",
		"2024-05-06T05:08:09.006000001Z stderr F oops",
		"2024-05-06T05:08:09.007000001Z stderr P no ne",
		"2024-05-06T05:08:09.008000001Z stderr F wline",
		"2024-05-06T05:08:09.009000001Z stdout F tail",
		"",
	}, "\n")
	if cri.String() != want {
		t.Errorf("CRI log:\n%s\nwant:\n%s", cri.String(), want)
	}
	// The plain log has the bytes as they came.
	if want := "hello\nab\n0123456789\nwxyz\n\ntailoops\nno newline"; plain.String() != want {
		t.Errorf("plain log: %q, want %q", plain.String(), want)
	}
}

// A line of exactly a chunk whose newline comes in a later read is one full
// line, not a partial one and an empty full one.
func TestCRILogChunkThenNewline(t *testing.T) {
	var plain, cri bytes.Buffer
	l := newCRILog(&plain, &cri)
	l.now = fakeClock()
	l.chunk = 4
	pending := l.write("stdout", nil, []byte("abcd"))
	pending = l.write("stdout", pending, []byte("\nefghi"))
	pending = l.write("stdout", pending, []byte("j\n"))
	if len(pending) != 0 {
		t.Errorf("pending: %q", pending)
	}
	want := "2024-05-06T05:08:09.000000001Z stdout F abcd\n" +
		"2024-05-06T05:08:09.001000001Z stdout P efgh\n" +
		"2024-05-06T05:08:09.002000001Z stdout F ij\n"
	if cri.String() != want {
		t.Errorf("CRI log:\n%s\nwant:\n%s", cri.String(), want)
	}
}

// What kwok serves from the CRI log (k8s.io/cri-client's ReadLogs, as
// kwok calls it): the lines as the process wrote them, a long line whole,
// each stream to its own writer, and sinceTime and tailLines applied to
// the lines' times.
func TestCRILogReadBack(t *testing.T) {
	var plain bytes.Buffer
	path := filepath.Join(t.TempDir(), "c.log")
	file, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	l := newCRILog(&plain, file)
	clock := fakeClock()
	l.now = clock
	long := strings.Repeat("x", 3*criChunk+5)
	l.copy("stdout", strings.NewReader("first\n"+long+"\nlast\n"))
	l.copy("stderr", strings.NewReader("warning\n"))
	_ = file.Close()

	read := func(opts *crilogs.LogOptions) (string, string) {
		var stdout, stderr bytes.Buffer
		if err := crilogs.ReadLogs(context.Background(), path, "", opts, nil, &stdout, &stderr); err != nil {
			t.Fatal(err)
		}
		return stdout.String(), stderr.String()
	}
	stdout, stderr := read(&crilogs.LogOptions{})
	if stdout != "first\n"+long+"\nlast\n" || stderr != "warning\n" {
		t.Errorf("read back: stdout %d bytes, stderr %q", len(stdout), stderr)
	}
	// Since the fourth line's time: the long line's chunks (the 2nd to
	// 5th lines) from its third chunk on, then last and warning.
	since := time.Date(2024, 5, 6, 5, 8, 9, 3000001, time.UTC)
	stdout, stderr = read(&crilogs.LogOptions{Since: since})
	if want := strings.Repeat("x", criChunk+5) + "\nlast\n"; stdout != want || stderr != "warning\n" {
		t.Errorf("since: stdout %q..., stderr %q", stdout[:min(len(stdout), 20)], stderr)
	}
	tail := int64(2)
	stdout, stderr = read(&crilogs.LogOptions{TailLines: &tail})
	if stdout != "last\n" || stderr != "warning\n" {
		t.Errorf("tail 2: stdout %q, stderr %q", stdout, stderr)
	}
}

// A process's two streams reach both logs through the pipes; a restart
// appends; the copying ends with the process, or, when a child it left
// holds a stream, after the grace period: no goroutine outlives a run.
func TestOutputOfAProcess(t *testing.T) {
	goroutines := runtime.NumGoroutine()
	dir := t.TempDir()
	plainPath, criPath := filepath.Join(dir, "plain.log"), filepath.Join(dir, "cri", "pod", "c.log")
	run := func(script string, grace time.Duration) time.Duration {
		out, err := openOutput(plainPath, criPath)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("sh", "-c", script)
		cmd.Stdout, cmd.Stderr = out.Stdout, out.Stderr
		if err := cmd.Start(); err != nil {
			out.finish(0)
			t.Fatal(err)
		}
		out.started()
		_ = cmd.Wait()
		begin := time.Now()
		out.finish(grace)
		return time.Since(begin)
	}
	run("echo one; echo two >&2", time.Minute)
	run("echo three", time.Minute)
	// A child holding stdout after the shell exits is cut off after grace.
	if took := run("echo four; sleep 3 &", 200*time.Millisecond); took > 2*time.Second {
		t.Errorf("finish took %v", took)
	}

	// (A goroutine that has just closed a channel may not have ended yet.)
	for deadline := time.Now().Add(2 * time.Second); runtime.NumGoroutine() > goroutines; {
		if time.Now().After(deadline) {
			t.Errorf("%d goroutines after the runs, %d before", runtime.NumGoroutine(), goroutines)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}

	plain, _ := os.ReadFile(plainPath)
	lines := strings.Split(strings.TrimSuffix(string(plain), "\n"), "\n")
	if len(lines) != 4 || lines[2] != "three" || lines[3] != "four" {
		t.Errorf("plain log: %q", plain)
	}
	cri, _ := os.ReadFile(criPath)
	var streams []string
	for line := range strings.Lines(string(cri)) {
		fields := strings.SplitN(strings.TrimSuffix(line, "\n"), " ", 4)
		if len(fields) != 4 || fields[2] != "F" {
			t.Fatalf("CRI line %q", line)
		}
		if _, err := time.Parse(time.RFC3339Nano, fields[0]); err != nil {
			t.Errorf("CRI line %q: %v", line, err)
		}
		streams = append(streams, fields[1]+" "+fields[3])
	}
	got := strings.Join(streams, ",")
	if got != "stdout one,stderr two,stdout three,stdout four" && got != "stderr two,stdout one,stdout three,stdout four" {
		t.Errorf("CRI log: %q", cri)
	}
}
