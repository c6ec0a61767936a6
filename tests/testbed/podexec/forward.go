package main

// Port-forwarding to process pods. kwok answers a pod's port-forward
// request (`kubectl port-forward`, a client's portforward subresource) by
// the pod's kwok `PortForward`: for a process pod, pod-exec-sync writes one
// whose forwards run `pod-exec-sync forward`, which enters the pod's own
// network namespace (pod-runner's, named after the test bed's and the
// pod's uid) and connects to the port there, as a kubelet's port-forward
// does: the API server's stream then reaches the pod's real process.

import (
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
)

// podNetns is the named network namespace pod-runner gives the pod: the
// test bed's name and the first 12 hex digits of the pod's uid.
func podNetns(testbed string, pod *corev1.Pod) string {
	short := strings.ReplaceAll(string(pod.UID), "-", "")
	if len(short) > 12 {
		short = short[:12]
	}
	return "/run/netns/" + testbed + "-" + short
}

// forwards lists, for each port a container of the pod declares, the
// command kwok runs for a port-forward to it.
func forwards(self, testbed string, pod *corev1.Pod) []any {
	var out []any
	seen := map[int32]bool{}
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Protocol != "" && p.Protocol != corev1.ProtocolTCP || seen[p.ContainerPort] {
				continue
			}
			seen[p.ContainerPort] = true
			out = append(out, map[string]any{
				"ports": []any{int64(p.ContainerPort)},
				"command": []any{
					self, "forward",
					"--netns", podNetns(testbed, pod),
					"--port", strconv.Itoa(int(p.ContainerPort)),
				},
			})
		}
	}
	return out
}

// forward connects to 127.0.0.1:port in the network namespace at path and
// copies stdin to it and it to stdout. The client's end of input is passed
// on (the server reads to its end); the server's end of output ends the
// forward, as a kubelet's does: the client then sees the stream close.
func forward(path string, port int) error {
	conn, err := dialIn(path, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return err
	}
	defer conn.Close()
	go func() {
		_, _ = io.Copy(conn, os.Stdin)
		_ = conn.(*net.TCPConn).CloseWrite()
	}()
	_, err = io.Copy(os.Stdout, conn)
	return err
}

// dialIn dials addr from inside the network namespace at path; the socket
// stays in that namespace, the thread goes back to its own.
func dialIn(path, addr string) (net.Conn, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	home, err := netns.Get()
	if err != nil {
		return nil, err
	}
	defer home.Close()
	handle, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("the pod's network namespace %s: %w", path, err)
	}
	defer handle.Close()
	if err := netns.Set(handle); err != nil {
		return nil, err
	}
	conn, dialErr := net.Dial("tcp", addr)
	if err := netns.Set(home); err != nil {
		// Never run on in the pod's namespace.
		panic(err)
	}
	return conn, dialErr
}
