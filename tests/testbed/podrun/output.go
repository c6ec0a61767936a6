package main

// A container's output. Its process writes stdout and stderr into two
// pipes of pod-runner's, which copies them, as they come, into the
// container's two logs:
//
//   - the plain log, <logs>/<namespace>_<pod>_<container>.log: the bytes
//     as the process wrote them, both streams in one file (for people and
//     tools; it is what the process's stdout and stderr were before);
//   - the CRI log (internal/podlogs), which kwok serves through the API
//     server (`kubectl logs`, with sinceTime, tailLines, follow): each line
//     as a container runtime writes it for a kubelet,
//     `<RFC3339Nano time> <stdout|stderr> <F|P> <message>`, timed when it
//     arrives, a line longer than criChunk split into P(artial) lines and a
//     last F(ull) one (k8s.io/cri-client's ReadLogs joins them again; as
//     with a container runtime, the other stream's lines may come between
//     a long line's parts).
//
// Both files are opened for appending: a restarted container's process
// adds to what its earlier runs wrote, as to the plain log before.

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// criChunk is the longest message of one CRI log line (containerd's
// default max_container_log_line_size is 16 KiB too).
const criChunk = 16 * 1024

// criLog writes a container's output into its plain and CRI logs; its
// streams (criLog.copy) may write concurrently.
type criLog struct {
	mu    sync.Mutex
	plain io.Writer
	cri   io.Writer
	now   func() time.Time
	chunk int
	line  []byte // the CRI line being written (reused)
}

func newCRILog(plain, cri io.Writer) *criLog {
	return &criLog{plain: plain, cri: cri, now: time.Now, chunk: criChunk}
}

// copy copies one stream of the process ("stdout" or "stderr") into the
// logs until it ends (the writers closed it, or the reader was closed). A
// last line without its newline is written as a full one, as containerd
// does.
func (l *criLog) copy(stream string, r io.Reader) {
	buf := make([]byte, 32*1024)
	var pending []byte // the stream's current line, not yet in the CRI log
	for {
		n, err := r.Read(buf)
		if n > 0 {
			pending = l.write(stream, pending, buf[:n])
		}
		if err != nil {
			if len(pending) > 0 {
				l.mu.Lock()
				l.writeLine(stream, 'F', pending)
				l.mu.Unlock()
			}
			return
		}
	}
}

// write logs data, which a stream whose unfinished line is pending just
// gave: into the plain log as it is, into the CRI log each line it ends
// and each full chunk of a long line. It returns what is pending now.
func (l *criLog) write(stream string, pending, data []byte) []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	// Write errors (a full disk) are not the process's: it goes on, as
	// its output is still read.
	_, _ = l.plain.Write(data)
	for len(data) > 0 {
		end := bytes.IndexByte(data, '\n')
		text := end
		if end < 0 {
			text = len(data)
		}
		if room := l.chunk - len(pending); text > room {
			// The line goes on past a chunk: that chunk is a partial line.
			pending = append(pending, data[:room]...)
			data = data[room:]
			l.writeLine(stream, 'P', pending)
			pending = pending[:0]
			continue
		}
		pending = append(pending, data[:text]...)
		if end < 0 {
			break
		}
		data = data[end+1:]
		l.writeLine(stream, 'F', pending)
		pending = pending[:0]
	}
	return pending
}

// writeLine writes one CRI log line (l.mu held).
func (l *criLog) writeLine(stream string, tag byte, message []byte) {
	line := l.now().UTC().AppendFormat(l.line[:0], time.RFC3339Nano)
	line = append(line, ' ')
	line = append(line, stream...)
	line = append(line, ' ', tag, ' ')
	line = append(line, message...)
	line = append(line, '\n')
	_, _ = l.cri.Write(line)
	l.line = line
}

// output is one run of a container's process: its logs, opened for
// appending, and the pipes its stdout and stderr write into.
type output struct {
	files  []*os.File // the two logs
	reads  []*os.File // the pipes' read ends: stdout's, stderr's
	Stdout *os.File   // the pipes' write ends, for the process
	Stderr *os.File
	done   chan struct{} // closed once both streams are copied
}

// openOutput opens the logs (creating the CRI log's directory) and the
// pipes. The caller starts the process with Stdout and Stderr, then calls
// started, and finish once the process has exited; or, should it not
// start, finish alone.
func openOutput(plainPath, criPath string) (*output, error) {
	o := &output{done: make(chan struct{})}
	fail := func(err error) (*output, error) {
		o.closeAll()
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(criPath), 0o755); err != nil {
		return nil, err
	}
	for _, path := range []string{plainPath, criPath} {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fail(err)
		}
		o.files = append(o.files, f)
	}
	for range 2 {
		r, w, err := os.Pipe()
		if err != nil {
			return fail(err)
		}
		o.reads = append(o.reads, r)
		if o.Stdout == nil {
			o.Stdout = w
		} else {
			o.Stderr = w
		}
	}
	return o, nil
}

// started closes pod-runner's copies of the write ends (the process holds
// its own: a stream ends when the process, and whatever it started, closed
// it) and copies both streams into the logs.
func (o *output) started() {
	_ = o.Stdout.Close()
	_ = o.Stderr.Close()
	o.Stdout, o.Stderr = nil, nil
	log := newCRILog(o.files[0], o.files[1])
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); log.copy("stdout", o.reads[0]) }()
	go func() { defer wg.Done(); log.copy("stderr", o.reads[1]) }()
	go func() { wg.Wait(); close(o.done) }()
}

// finish waits, once the process has exited, for the rest of its output,
// then closes everything. A child of the process that still holds a stream
// (a container's would have gone with it) is cut off after grace: no
// copying outlives the run.
func (o *output) finish(grace time.Duration) {
	if o.Stdout == nil { // started
		select {
		case <-o.done:
		case <-time.After(grace):
			// Closing a pipe's read end ends a Read blocked on it.
			for _, r := range o.reads {
				_ = r.Close()
			}
			<-o.done
		}
	}
	o.closeAll()
}

func (o *output) closeAll() {
	for _, f := range append(append(o.files, o.reads...), o.Stdout, o.Stderr) {
		if f != nil {
			_ = f.Close()
		}
	}
}
