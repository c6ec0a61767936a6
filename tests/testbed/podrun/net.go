package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netns"
	"k8s.io/klog/v2"
)

// nodeAddress is the test bed network namespace's own address, on its
// dummy device and on the host side of every pod's veth: the pods' gateway.
const nodeAddress = "169.254.1.1"

func netnsPath(name string) string { return "/run/netns/" + name }

// ip runs `ip [-n NAMESPACE] -batch -` with the given lines.
func ip(namespace string, lines ...string) error {
	args := []string{"-batch", "-"}
	if namespace != "" {
		args = append([]string{"-n", namespace}, args...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// wirePod gives the pod a network namespace with its IP on eth0, routed
// through a veth pair to the test bed's namespace.
func wirePod(node, pod, veth, podIP string) error {
	unwirePod(node, pod, veth, podIP)
	if err := ip("", "netns add "+pod); err != nil {
		return err
	}
	if err := ip(node,
		fmt.Sprintf("link add %s type veth peer name eth0 netns %s", veth, pod),
		fmt.Sprintf("addr add %s/32 dev %s", nodeAddress, veth),
		fmt.Sprintf("link set %s up", veth),
		fmt.Sprintf("route add %s/32 dev %s src %s", podIP, veth, nodeAddress),
	); err != nil {
		return err
	}
	// As container runtimes do: any user may bind low ports in a pod (praxis
	// runs as UID 100 and listens on 80).
	if err := inNetns(netnsPath(pod), func() error {
		return os.WriteFile("/proc/sys/net/ipv4/ip_unprivileged_port_start", []byte("0"), 0o644)
	}); err != nil {
		return err
	}
	if err := ip(pod,
		"link set lo up",
		fmt.Sprintf("addr add %s/32 dev eth0", podIP),
		"link set eth0 up",
		fmt.Sprintf("route add %s dev eth0 scope link", nodeAddress),
		fmt.Sprintf("route add default via %s dev eth0 src %s", nodeAddress, podIP),
	); err != nil {
		return err
	}
	return hairpin(node, "add", podIP)
}

// unwirePod removes the pod's veth pair (at once: a namespace's devices go
// only some time after the namespace), its namespace and its hairpin entry.
func unwirePod(node, pod, veth, podIP string) {
	_ = hairpin(node, "delete", podIP)
	_ = ip(node, "link del "+veth)
	deleteNetns(pod)
}

// hairpin adds ("add") or removes ("delete") the pod in the test bed's
// hairpin set (tests/testbed/up.sh): its connections to itself through a
// Service are masqueraded, as its own node's kube-proxy would do it.
func hairpin(node, verb, podIP string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	element := fmt.Sprintf("%s element inet pontoon-testbed hairpin { %s . %s }", verb, podIP, podIP)
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", node, "nft", element).CombinedOutput()
	if err != nil {
		return fmt.Errorf("nft %s: %v: %s", element, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// deleteNetns kills what still runs in a pod's namespace and deletes it
// (its veth pair goes with it).
func deleteNetns(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "ip", "netns", "pids", name).Output(); err == nil {
		for _, field := range strings.Fields(string(out)) {
			// Never this process, whatever namespace a thread of it is in.
			if pid, err := strconv.Atoi(field); err == nil && pid != os.Getpid() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	// The kernel frees the namespace once its last process is reaped.
	for i := 0; i < 50; i++ {
		if err := ip("", "netns del "+name); err == nil || !exists(netnsPath(name)) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// inNetns runs fn on a thread inside the network namespace at path; sockets
// fn creates stay in it.
func inNetns(path string, fn func() error) error {
	errs := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// The thread goes back to its own namespace before it is unlocked. A
		// thread left locked in the other one would end with this goroutine,
		// except the process's main thread, which Go keeps (wedged) instead:
		// the process would then count as in that namespace, and deleting
		// the pod's namespace would kill it (deleteNetns).
		home, err := netns.Get()
		if err != nil {
			errs <- err
			return
		}
		defer home.Close()
		handle, err := netns.GetFromPath(path)
		if err != nil {
			errs <- err
			runtime.UnlockOSThread()
			return
		}
		defer handle.Close()
		if err := netns.Set(handle); err != nil {
			errs <- err
			return
		}
		errs <- fn()
		if netns.Set(home) == nil {
			runtime.UnlockOSThread()
		}
	}()
	return <-errs
}

// dialIn opens a TCP connection from inside the network namespace at path.
func dialIn(ctx context.Context, path, address string, timeout time.Duration) (net.Conn, error) {
	var conn net.Conn
	err := inNetns(path, func() error {
		var err error
		dialer := net.Dialer{Timeout: timeout}
		conn, err = dialer.DialContext(ctx, "tcp", address)
		return err
	})
	return conn, err
}

// relayInto listens on address inside the namespace at path and forwards
// every connection to the same address outside it.
func relayInto(ctx context.Context, path, address string) error {
	var listener net.Listener
	if err := inNetns(path, func() error {
		var err error
		listener, err = net.Listen("tcp", address)
		return err
	}); err != nil {
		return err
	}
	go func() {
		<-ctx.Done()
		_ = listener.Close()
	}()
	go func() {
		for {
			in, err := listener.Accept()
			if err != nil {
				if ctx.Err() == nil {
					klog.ErrorS(err, "relay stopped accepting")
				}
				return
			}
			go func() {
				defer in.Close()
				out, err := net.DialTimeout("tcp", address, 5*time.Second)
				if err != nil {
					klog.ErrorS(err, "relay cannot reach the API server")
					return
				}
				defer out.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(out, in); closeWrite(out); done <- struct{}{} }()
				go func() { _, _ = io.Copy(in, out); closeWrite(in); done <- struct{}{} }()
				<-done
				<-done
			}()
		}
	}()
	return nil
}

func closeWrite(c net.Conn) {
	if tcp, ok := c.(*net.TCPConn); ok {
		_ = tcp.CloseWrite()
	}
}
