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
	"pontoon.dev/testbed/internal/podlogs"
)

// podRun is one running process pod.
type podRun struct {
	agent     *agent
	uid       types.UID
	namespace string
	name      string
	ip        string
	netns     string
	veth      string
	dir       string
	ctx       context.Context // lives as long as the pod runs
	cancel    context.CancelFunc
	// gracePeriod is the pod's terminationGracePeriodSeconds (default 30).
	gracePeriod time.Duration
	// restartPolicy is the pod's: Always (the default), OnFailure or Never.
	restartPolicy corev1.RestartPolicy
	// Closed (once) to end its preStop sleep early.
	drainCut     chan struct{}
	drainCutOnce sync.Once
	wg           sync.WaitGroup
	containers   []*containerRun

	statusMu sync.Mutex // one status write at a time
}

// containerRun is one container: its process (if mapped) and readiness.
type containerRun struct {
	spec   corev1.Container
	mapped bool
	mu     sync.Mutex
	cmd    *exec.Cmd
	// finished: it exited and its pod's restartPolicy keeps it so
	// (Never, or OnFailure after a success).
	finished bool
	// Why the test bed killed the running process (OOMKilled for its
	// memory limit, Error for its liveness probe); reported when it exits.
	killedFor string
	running   bool
	ready     bool
	restarts  int32
	started   metav1.Time
	exited    *corev1.ContainerStateTerminated
	// The pod's exec sandbox bound at /tmp, if any (see launchOf).
	tmp string
	// Stops this process's supervisor and probe; done closes when both ended.
	stop context.CancelFunc
	done chan struct{}
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
		// The API server defaults it; 30 s should it be absent.
		gracePeriod: 30 * time.Second,
		drainCut:    make(chan struct{}),
	}
	// A deleted pod still draining on this IP gives it up now.
	a.mu.Lock()
	if old := a.draining[r.ip]; old != nil {
		old.drainCutOnce.Do(func() { close(old.drainCut) })
	}
	a.mu.Unlock()
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		r.gracePeriod = time.Duration(*g) * time.Second
	}
	r.restartPolicy = pod.Spec.RestartPolicy
	if err := materialise(ctx, a.client, pod, r.volumes()); err != nil {
		return nil, err
	}
	if err := r.writeResolvConf(); err != nil {
		return nil, err
	}
	launches := map[string]*Launch{}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		r.containers = append(r.containers, &containerRun{spec: *c, mapped: a.images.For(c.Image) != nil})
		spec, err := r.launchOf(ctx, pod, c)
		if err != nil {
			return nil, err
		}
		launches[c.Name] = spec
	}
	r.veth = "pt" + short[:11]
	if err := wirePod(a.netns, r.netns, r.veth, r.ip); err != nil {
		unwirePod(a.netns, r.netns, r.veth, r.ip)
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	r.ctx, r.cancel = runCtx, cancel
	r.refreshTokens(runCtx, pod.DeepCopy())
	for _, c := range r.containers {
		if err := r.run(c, launches[c.spec.Name]); err != nil {
			cancel()
			unwirePod(a.netns, r.netns, r.veth, r.ip)
			return nil, err
		}
	}
	r.writeStatus(ctx)
	return r, nil
}

func (r *podRun) volumes() string { return filepath.Join(r.dir, "volumes") }

// launchOf is how to run container c of the pod, or nil when its image is
// not mapped (kwok fakes it).
func (r *podRun) launchOf(ctx context.Context, pod *corev1.Pod, c *corev1.Container) (*Launch, error) {
	a := r.agent
	image := a.images.For(c.Image)
	if image == nil {
		return nil, nil
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
	spec := &Launch{
		Dir:        filepath.Join(r.dir, "containers", c.Name),
		Binary:     binary,
		Argv:       argv,
		Env:        env,
		WorkingDir: c.WorkingDir,
	}
	spec.UID, spec.GID = identity(pod, c)
	files, err := image.ResolveFiles(a.binDirs)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		spec.Mounts = append(spec.Mounts, Mount{Source: f.Source, Target: f.Target, ReadOnly: true})
	}
	// As in a cluster: `kubectl exec` runs in the container's file system,
	// so what an exec'd command writes to /tmp (a Carrier2 config, its
	// upgrade socket) is what the container's process sees. The test bed's
	// exec sandbox of the pod is that /tmp (see podexec and exec-shim.sh).
	if a.execRoot != "" {
		tmp := filepath.Join(a.execRoot, pod.Namespace, pod.Name, "tmp")
		if err := os.MkdirAll(tmp, 0o1777); err != nil {
			return nil, err
		}
		if err := os.Chmod(tmp, 0o1777); err != nil {
			return nil, err
		}
		spec.Mounts = append(spec.Mounts, Mount{Source: tmp, Target: "/tmp"})
	}
	if a.dns != "" {
		spec.Mounts = append(spec.Mounts, Mount{Source: r.resolvConf(), Target: "/etc/resolv.conf", ReadOnly: true})
	}
	for _, m := range c.VolumeMounts {
		source := filepath.Join(r.volumes(), m.Name)
		if m.SubPath != "" {
			source = filepath.Join(source, filepath.Clean("/"+m.SubPath))
		}
		spec.Mounts = append(spec.Mounts, Mount{Source: source, Target: m.MountPath, ReadOnly: m.ReadOnly})
	}
	return spec, nil
}

func (r *podRun) resolvConf() string { return filepath.Join(r.dir, "resolv.conf") }

// writeResolvConf points the pod's resolver at the test bed's cluster DNS,
// with the search path and ndots a kubelet gives a pod of ClusterFirst DNS
// policy, so that `web`, `web.shop` and `web.shop.svc.cluster.local` resolve.
func (r *podRun) writeResolvConf() error {
	if r.agent.dns == "" {
		return nil
	}
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return err
	}
	content := fmt.Sprintf("nameserver %s\nsearch %s.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n",
		r.agent.dns, r.namespace)
	return os.WriteFile(r.resolvConf(), []byte(content), 0o644)
}

// run starts the container's process and its readiness probe (a container
// of an unmapped image is only faked: ready at once).
func (r *podRun) run(c *containerRun, spec *Launch) error {
	if spec == nil {
		c.mu.Lock()
		c.mapped, c.ready, c.started = false, true, metav1.Now()
		c.mu.Unlock()
		return nil
	}
	specFile := filepath.Join(r.dir, c.spec.Name+".json")
	data, _ := json.Marshal(spec)
	if err := os.WriteFile(specFile, data, 0o600); err != nil {
		return err
	}
	logs := containerLogs{
		plain: filepath.Join(r.agent.logs, fmt.Sprintf("%s_%s_%s.log", r.namespace, r.name, c.spec.Name)),
		cri:   podlogs.File(r.agent.logs, r.namespace, r.name, r.uid, c.spec.Name),
	}
	ctx, cancel := context.WithCancel(r.ctx)
	image := r.agent.images.For(c.spec.Image)
	c.mu.Lock()
	c.tmp = ""
	for _, m := range spec.Mounts {
		if m.Target == "/tmp" {
			c.tmp = m.Source
		}
	}
	c.mapped, c.ready, c.stop = true, false, cancel
	c.done = make(chan struct{})
	done := c.done
	tmp := c.tmp
	c.mu.Unlock()
	if tmp != "" {
		// Tells the test bed's Carrier2, exec'd into this pod, that the
		// pod's own process serves here (or is about to): see its
		// daemonStart. Kept across restarts (freshTmp).
		if err := os.WriteFile(filepath.Join(tmp, mainProcessMark), nil, 0o644); err != nil {
			return err
		}
	}
	var wg sync.WaitGroup
	wg.Add(4)
	r.wg.Add(4)
	go func() { defer r.wg.Done(); defer wg.Done(); r.supervise(ctx, c, specFile, logs) }()
	go func() { defer r.wg.Done(); defer wg.Done(); r.probe(ctx, c, image) }()
	go func() { defer r.wg.Done(); defer wg.Done(); r.live(ctx, c) }()
	go func() { defer r.wg.Done(); defer wg.Done(); r.limitMemory(ctx, c) }()
	go func() { wg.Wait(); close(done) }()
	return nil
}

// changed restarts, as a kubelet does, every container whose image the pod's
// spec now names differently (the only container field a running pod may
// change): the old process is stopped, the new image's program started, the
// restart counted. An image the test bed does not run is faked from then on.
func (r *podRun) changed(ctx context.Context, pod *corev1.Pod) {
	restarted := false
	for i := range pod.Spec.Containers {
		want := &pod.Spec.Containers[i]
		for _, c := range r.containers {
			if c.spec.Name != want.Name || c.spec.Image == want.Image {
				continue
			}
			klog.InfoS("image changed; restarting the container", "pod", r.namespace+"/"+r.name,
				"container", c.spec.Name, "from", c.spec.Image, "to", want.Image)
			r.halt(c)
			c.mu.Lock()
			from := c.spec.Image
			finished := metav1.Now()
			c.exited = &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed",
				Message: "image changed from " + from, StartedAt: c.started, FinishedAt: finished}
			c.restarts++
			c.spec = *want
			c.ready, c.running = false, false
			c.mu.Unlock()
			c.freshTmp()
			spec, err := r.launchOf(ctx, pod, want)
			if err == nil {
				err = r.run(c, spec)
			}
			if err != nil {
				// What a runtime reports for a command the image lacks.
				klog.ErrorS(err, "cannot start the new image", "pod", r.namespace+"/"+r.name, "container", c.spec.Name)
				c.mu.Lock()
				c.mapped = true
				c.exited = &corev1.ContainerStateTerminated{ExitCode: 128, Reason: "StartError",
					Message: err.Error(), StartedAt: finished, FinishedAt: metav1.Now()}
				c.mu.Unlock()
			}
			restarted = true
		}
	}
	if restarted {
		r.writeStatus(ctx)
	}
}

// mainProcessMark, in a pod's /tmp, says that the test bed runs the pod's
// containers as processes (the test bed's Carrier2 reads it).
const mainProcessMark = ".testbed-main-process"

// freshTmp empties the container's /tmp before it starts again: a
// restarted container gets a fresh writable layer, so nothing an earlier
// process (or exec) left there survives, e.g. a Carrier2 config that the
// new, idle Carrier2 never loaded. (The test bed's pods share one /tmp
// among their containers; this empties it for all of them.)
func (c *containerRun) freshTmp() {
	c.mu.Lock()
	tmp := c.tmp
	c.mu.Unlock()
	if tmp == "" {
		return
	}
	entries, _ := os.ReadDir(tmp)
	for _, e := range entries {
		if e.Name() == mainProcessMark {
			continue
		}
		_ = os.RemoveAll(filepath.Join(tmp, e.Name()))
	}
}

// halt stops a container's process (TERM, then KILL after two seconds) and
// its probe, and waits for both.
func (r *podRun) halt(c *containerRun) {
	c.mu.Lock()
	stop, done, cmd := c.stop, c.done, c.cmd
	c.mu.Unlock()
	if stop == nil {
		return
	}
	stop()
	if cmd != nil && cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	}
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		if cmd != nil && cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		<-done
	}
	c.mu.Lock()
	c.cmd, c.stop, c.done = nil, nil, nil
	c.mu.Unlock()
}

// containerLogs are a container's two logs (see output.go).
type containerLogs struct{ plain, cri string }

// supervise runs the container's process, again after it exits (with a
// growing pause, as a kubelet's restart back-off), until the pod stops.
func (r *podRun) supervise(ctx context.Context, c *containerRun, specFile string, logs containerLogs) {
	backoff := 500 * time.Millisecond
	for ctx.Err() == nil {
		out, err := openOutput(logs.plain, logs.cri)
		if err != nil {
			klog.ErrorS(err, "cannot open the logs", "pod", r.namespace+"/"+r.name, "container", c.spec.Name)
			return
		}
		self, _ := os.Executable()
		cmd := exec.Command("nsenter", "--net="+netnsPath(r.netns), "--", self, "launch", specFile)
		cmd.Stdout, cmd.Stderr = out.Stdout, out.Stderr
		// A mount namespace of its own (Go makes its mounts private), and a
		// process group of its own, so that stopping reaches its children.
		cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Setpgid: true}
		err = cmd.Start()
		c.mu.Lock()
		c.cmd = cmd
		c.running = err == nil
		c.started = metav1.Now()
		restarted := c.exited != nil
		c.mu.Unlock()
		if err != nil {
			out.finish(0)
			klog.ErrorS(err, "cannot start", "pod", r.name, "container", c.spec.Name)
		} else {
			out.started()
			// A kubelet reports a restarted container running as soon as it
			// is, ready or not: whoever waits for the new process (a
			// Carrier2 that only becomes ready once configured) sees it.
			// (A pod's first start is reported by start.)
			if restarted {
				r.writeStatus(ctx)
			}
			err = cmd.Wait()
			out.finish(time.Second)
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
			// Killed by a signal: 128 + its number, as a container runtime says.
			if status, ok := exit.Sys().(syscall.WaitStatus); ok && status.Signaled() {
				code = 128 + int32(status.Signal())
			}
		}
		c.mu.Lock()
		reason := "Error"
		if c.killedFor != "" {
			reason, c.killedFor = c.killedFor, ""
		} else if code == 0 {
			reason = "Completed"
		}
		klog.InfoS("container exited", "pod", r.namespace+"/"+r.name, "container", c.spec.Name, "code", code, "reason", reason)
		c.ready = false
		c.exited = &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, StartedAt: c.started, FinishedAt: metav1.Now()}
		again := r.restartPolicy == corev1.RestartPolicyAlways || r.restartPolicy == "" ||
			(r.restartPolicy == corev1.RestartPolicyOnFailure && code != 0)
		if again {
			c.restarts++
		} else {
			c.finished = true
		}
		c.mu.Unlock()
		r.writeStatus(ctx)
		if !again {
			klog.InfoS("container finished; not restarted (restartPolicy)", "pod", r.namespace+"/"+r.name, "container", c.spec.Name, "code", code, "restartPolicy", r.restartPolicy)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		c.freshTmp()
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
		// Whether every mapped container finished for good, and one failed.
		finished, failed, mapped := true, false, false
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
				status.Image, status.ImageID = c.spec.Image, "testbed://"+c.spec.Image
			}
			c.mu.Lock()
			mapped = mapped || c.mapped
			status.Ready = c.ready
			started := !c.mapped || c.running
			status.Started = &started
			if c.mapped {
				status.RestartCount = c.restarts
				switch {
				case c.running:
					status.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: c.started}}
				case c.finished:
					status.State = corev1.ContainerState{Terminated: c.exited}
				case c.exited != nil:
					status.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
				}
				if c.exited != nil && !c.finished {
					status.LastTerminationState = corev1.ContainerState{Terminated: c.exited}
				}
				finished = finished && c.finished
				failed = failed || (c.finished && c.exited != nil && c.exited.ExitCode != 0)
			} else if c.restarts > 0 {
				// Restarted onto an image the test bed fakes.
				status.RestartCount = c.restarts
				status.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: c.started}}
				status.LastTerminationState = corev1.ContainerState{Terminated: c.exited}
			}
			all = all && c.ready
			c.mu.Unlock()
			statuses = append(statuses, status)
		}
		pod.Status.ContainerStatuses = statuses
		// A pod whose containers all ran to their end is over, as a
		// kubelet says: Succeeded, or Failed if one exited with an error.
		if mapped && finished {
			pod.Status.Phase = corev1.PodSucceeded
			if failed {
				pod.Status.Phase = corev1.PodFailed
			}
		}
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
// the pod's network namespace and files. For a deleted pod (drain) it first
// runs its containers' preStop sleep, as a kubelet does: the pod keeps
// serving while the endpoint controllers and kube-proxy take it out of its
// Services, so that no connection is sent to an address that is gone.
func (r *podRun) stop(drain bool) {
	if d := r.preStopSleep(); drain && d > 0 {
		r.agent.mu.Lock()
		r.agent.draining[r.ip] = r
		r.agent.mu.Unlock()
		select {
		case <-time.After(d):
		case <-r.drainCut:
			klog.InfoS("preStop sleep cut short: its IP is another pod's now", "pod", r.namespace+"/"+r.name, "ip", r.ip)
		}
		r.agent.mu.Lock()
		if r.agent.draining[r.ip] == r {
			delete(r.agent.draining, r.ip)
		}
		r.agent.mu.Unlock()
	}
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
	unwirePod(r.agent.netns, r.netns, r.veth, r.ip)
	_ = os.RemoveAll(r.dir)
}

// preStopSleep is the longest `lifecycle.preStop.sleep` of the pod's
// containers, bounded by its termination grace period (as the kubelet
// bounds a preStop hook); other preStop handlers are not run.
func (r *podRun) preStopSleep() time.Duration {
	var longest int64
	for _, c := range r.containers {
		if l := c.spec.Lifecycle; l != nil && l.PreStop != nil && l.PreStop.Sleep != nil {
			longest = max(longest, l.PreStop.Sleep.Seconds)
		}
	}
	return min(time.Duration(longest)*time.Second, r.gracePeriod)
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
