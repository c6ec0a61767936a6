package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"pontoon.dev/testbed/internal/images"
)

// podRun is one running process pod.
type podRun struct {
	agent      *agent
	uid        types.UID
	namespace  string
	name       string
	ip         string
	netns      string
	veth       string
	dir        string
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	containers []*containerRun

	statusMu sync.Mutex // one status write at a time
}

// containerRun is one container: its process (if mapped) and readiness.
type containerRun struct {
	spec     corev1.Container
	mapped   bool
	mu       sync.Mutex
	cmd      *exec.Cmd
	running  bool
	ready    bool
	restarts int32
	started  metav1.Time
	exited   *corev1.ContainerStateTerminated
}

func (a *agent) start(ctx context.Context, pod *corev1.Pod) (*podRun, error) {
	short := strings.ReplaceAll(string(pod.UID), "-", "")[:12]
	r := &podRun{
		agent:     a,
		uid:       pod.UID,
		namespace: pod.Namespace,
		name:      pod.Name,
		ip:        pod.Status.PodIP,
		netns:     a.netns + "-" + short,
		dir:       filepath.Join(a.state, string(pod.UID)),
	}
	volumes := filepath.Join(r.dir, "volumes")
	if err := materialise(ctx, a.client, pod, volumes); err != nil {
		return nil, err
	}
	type prepared struct {
		binary string
		argv   []string
		env    []string
	}
	ready := map[string]prepared{}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		image := a.images.For(c.Image)
		r.containers = append(r.containers, &containerRun{spec: *c, mapped: image != nil})
		if image == nil {
			continue
		}
		binary, err := image.Resolve(a.binDirs)
		if err != nil {
			return nil, err
		}
		argv, err := image.Argv(c, binary)
		if err != nil {
			return nil, err
		}
		env, err := environment(ctx, a.client, pod, c)
		if err != nil {
			return nil, err
		}
		ready[c.Name] = prepared{binary, argv, env}
	}
	r.veth = "pt" + short[:11]
	if err := wirePod(a.netns, r.netns, r.veth, r.ip); err != nil {
		unwirePod(a.netns, r.netns, r.veth)
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	for i, c := range r.containers {
		if !c.mapped {
			c.ready = true
			continue
		}
		p := ready[c.spec.Name]
		spec := Launch{
			Dir:        filepath.Join(r.dir, "containers", c.spec.Name),
			Binary:     p.binary,
			Argv:       p.argv,
			Env:        p.env,
			WorkingDir: c.spec.WorkingDir,
		}
		spec.UID, spec.GID = identity(pod, &c.spec)
		for _, m := range c.spec.VolumeMounts {
			source := filepath.Join(volumes, m.Name)
			if m.SubPath != "" {
				source = filepath.Join(source, filepath.Clean("/"+m.SubPath))
			}
			spec.Mounts = append(spec.Mounts, Mount{Source: source, Target: m.MountPath, ReadOnly: m.ReadOnly})
		}
		specFile := filepath.Join(r.dir, c.spec.Name+".json")
		data, _ := json.Marshal(spec)
		if err := os.WriteFile(specFile, data, 0o600); err != nil {
			cancel()
			unwirePod(a.netns, r.netns, r.veth)
			return nil, err
		}
		log := filepath.Join(a.logs, fmt.Sprintf("%s_%s_%s.log", pod.Namespace, pod.Name, c.spec.Name))
		r.wg.Add(2)
		go func() { defer r.wg.Done(); r.supervise(runCtx, c, specFile, log) }()
		go func() { defer r.wg.Done(); r.probe(runCtx, c, a.images.For(pod.Spec.Containers[i].Image)) }()
	}
	r.writeStatus(ctx)
	return r, nil
}

// supervise runs the container's process, again after it exits (with a
// growing pause, as a kubelet's restart back-off), until the pod stops.
func (r *podRun) supervise(ctx context.Context, c *containerRun, specFile, log string) {
	backoff := 500 * time.Millisecond
	for ctx.Err() == nil {
		out, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			klog.ErrorS(err, "cannot open the log", "pod", r.name)
			return
		}
		self, _ := os.Executable()
		cmd := exec.Command("nsenter", "--net="+netnsPath(r.netns), "--", self, "launch", specFile)
		cmd.Stdout, cmd.Stderr = out, out
		// A mount namespace of its own (Go makes its mounts private), and a
		// process group of its own, so that stopping reaches its children.
		cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Setpgid: true}
		err = cmd.Start()
		c.mu.Lock()
		c.cmd = cmd
		c.running = err == nil
		c.started = metav1.Now()
		c.mu.Unlock()
		if err != nil {
			_ = out.Close()
			klog.ErrorS(err, "cannot start", "pod", r.name, "container", c.spec.Name)
		} else {
			err = cmd.Wait()
			_ = out.Close()
		}
		c.mu.Lock()
		c.running = false
		c.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		code := int32(0)
		if exit, ok := err.(*exec.ExitError); ok {
			code = int32(exit.ExitCode())
		}
		klog.InfoS("container exited; restarting", "pod", r.namespace+"/"+r.name, "container", c.spec.Name, "code", code)
		c.mu.Lock()
		c.ready = false
		c.restarts++
		c.exited = &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Error", StartedAt: c.started, FinishedAt: metav1.Now()}
		c.mu.Unlock()
		r.writeStatus(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		if backoff < 10*time.Second {
			backoff *= 2
		}
	}
}

// probe reports the container ready while its readiness probe passes: the
// pod's own probe (HTTP GET or TCP), else the mapping's port, else as soon
// as the process runs. Checked every 20 ms in a process's first two seconds
// and every 100 ms after until ready, then at the probe's period.
func (r *podRun) probe(ctx context.Context, c *containerRun, image *images.Image) {
	probe := c.spec.ReadinessProbe
	period, failures := time.Second, 3
	if probe != nil {
		if probe.PeriodSeconds > 0 {
			period = time.Duration(probe.PeriodSeconds) * time.Second
		}
		if probe.FailureThreshold > 0 {
			failures = int(probe.FailureThreshold)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(probe.InitialDelaySeconds) * time.Second):
		}
	}
	failed := 0
	for ctx.Err() == nil {
		ok := r.check(ctx, c, probe, image)
		c.mu.Lock()
		running := c.running
		was := c.ready
		switch {
		case ok && running:
			failed = 0
			c.ready = true
		case was:
			failed++
			if failed >= failures || !running {
				c.ready = false
			}
		}
		changed, ready, started := was != c.ready, c.ready, c.started.Time
		c.mu.Unlock()
		if changed {
			klog.InfoS("readiness", "pod", r.namespace+"/"+r.name, "container", c.spec.Name, "ready", !was)
			r.writeStatus(ctx)
		}
		// Until ready: often in the first seconds of a process, when most
		// start serving, so that readiness shows within tens of milliseconds.
		wait := period
		if !ready {
			wait = 100 * time.Millisecond
			if time.Since(started) < 2*time.Second {
				wait = 20 * time.Millisecond
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

func (r *podRun) check(ctx context.Context, c *containerRun, probe *corev1.Probe, image *images.Image) bool {
	path := netnsPath(r.netns)
	timeout := time.Second
	if probe != nil && probe.TimeoutSeconds > 0 {
		timeout = time.Duration(probe.TimeoutSeconds) * time.Second
	}
	switch {
	case probe != nil && probe.HTTPGet != nil:
		get := probe.HTTPGet
		port, err := r.port(c, get.Port)
		if err != nil {
			return false
		}
		host := r.ip
		if get.Host != "" {
			host = get.Host
		}
		scheme := strings.ToLower(string(get.Scheme))
		if scheme == "" {
			scheme = "http"
		}
		client := http.Client{Timeout: timeout, Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, address string) (net.Conn, error) {
				return dialIn(ctx, path, address, timeout)
			},
			DisableKeepAlives: true,
		}}
		request, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(host, strconv.Itoa(port)), get.Path), nil)
		if err != nil {
			return false
		}
		for _, h := range get.HTTPHeaders {
			request.Header.Set(h.Name, h.Value)
		}
		response, err := client.Do(request)
		if err != nil {
			return false
		}
		_ = response.Body.Close()
		return response.StatusCode >= 200 && response.StatusCode < 400
	case probe != nil && probe.TCPSocket != nil:
		port, err := r.port(c, probe.TCPSocket.Port)
		if err != nil {
			return false
		}
		return r.connects(ctx, port, timeout)
	case probe != nil:
		// exec and gRPC probes: not run here; the process running counts.
		return true
	case image != nil && image.ReadyPort > 0:
		return r.connects(ctx, image.ReadyPort, timeout)
	}
	return true
}

func (r *podRun) connects(ctx context.Context, port int, timeout time.Duration) bool {
	conn, err := dialIn(ctx, netnsPath(r.netns), net.JoinHostPort(r.ip, strconv.Itoa(port)), timeout)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// port resolves a probe's port, by number or by the container's port name.
func (r *podRun) port(c *containerRun, port intstr.IntOrString) (int, error) {
	if port.Type == intstr.Int {
		return port.IntValue(), nil
	}
	for _, p := range c.spec.Ports {
		if p.Name == port.StrVal {
			return int(p.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("no port named %q", port.StrVal)
}

// writeStatus reports the containers' readiness on the pod, as a kubelet.
func (r *podRun) writeStatus(ctx context.Context) {
	r.statusMu.Lock()
	defer r.statusMu.Unlock()
	pods := r.agent.client.CoreV1().Pods(r.namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod, err := pods.Get(ctx, r.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pod.UID != r.uid || pod.DeletionTimestamp != nil {
			return nil
		}
		now := metav1.Now()
		all := true
		statuses := make([]corev1.ContainerStatus, 0, len(r.containers))
		for _, c := range r.containers {
			var previous *corev1.ContainerStatus
			for i := range pod.Status.ContainerStatuses {
				if pod.Status.ContainerStatuses[i].Name == c.spec.Name {
					previous = &pod.Status.ContainerStatuses[i]
				}
			}
			status := corev1.ContainerStatus{
				Name:        c.spec.Name,
				Image:       c.spec.Image,
				ImageID:     "testbed://" + c.spec.Image,
				ContainerID: "testbed://" + string(r.uid) + "/" + c.spec.Name,
			}
			if previous != nil {
				status = *previous
			}
			c.mu.Lock()
			status.Ready = c.ready
			started := !c.mapped || c.running
			status.Started = &started
			if c.mapped {
				status.RestartCount = c.restarts
				if c.running {
					status.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: c.started}}
				} else if c.exited != nil {
					status.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
				}
				if c.exited != nil {
					status.LastTerminationState = corev1.ContainerState{Terminated: c.exited}
				}
			}
			all = all && c.ready
			c.mu.Unlock()
			statuses = append(statuses, status)
		}
		pod.Status.ContainerStatuses = statuses
		for _, t := range []corev1.PodConditionType{corev1.ContainersReady, corev1.PodReady} {
			setCondition(&pod.Status, t, all, now)
		}
		_, err = pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		klog.ErrorS(err, "cannot write the pod's status", "pod", r.namespace+"/"+r.name)
	}
}

func setCondition(status *corev1.PodStatus, t corev1.PodConditionType, ok bool, now metav1.Time) {
	value := corev1.ConditionFalse
	if ok {
		value = corev1.ConditionTrue
	}
	for i := range status.Conditions {
		if status.Conditions[i].Type == t {
			if status.Conditions[i].Status != value {
				status.Conditions[i].Status = value
				status.Conditions[i].LastTransitionTime = now
			}
			return
		}
	}
	status.Conditions = append(status.Conditions, corev1.PodCondition{Type: t, Status: value, LastTransitionTime: now})
}

// stop ends the processes (TERM, then KILL after two seconds), then removes
// the pod's network namespace and files.
func (r *podRun) stop() {
	r.cancel()
	for _, c := range r.containers {
		c.mu.Lock()
		cmd := c.cmd
		c.mu.Unlock()
		if cmd != nil && cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		}
	}
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		for _, c := range r.containers {
			c.mu.Lock()
			if c.cmd != nil && c.cmd.Process != nil {
				_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			}
			c.mu.Unlock()
		}
		<-done
	}
	unwirePod(r.agent.netns, r.netns, r.veth)
	_ = os.RemoveAll(r.dir)
}

// identity is the user and group a container runs as: its securityContext,
// else the pod's; a user without a group gets group 0, as runtimes give.
func identity(pod *corev1.Pod, c *corev1.Container) (uid, gid *int64) {
	if p := pod.Spec.SecurityContext; p != nil {
		uid, gid = p.RunAsUser, p.RunAsGroup
	}
	if s := c.SecurityContext; s != nil {
		if s.RunAsUser != nil {
			uid = s.RunAsUser
		}
		if s.RunAsGroup != nil {
			gid = s.RunAsGroup
		}
	}
	if uid != nil && gid == nil {
		root := int64(0)
		gid = &root
	}
	return uid, gid
}
