// Command pod-runner makes the test bed's pods of mapped images really run.
//
// kwok only writes pods' statuses. For a pod whose containers' images are in
// the mapping file (process-images.yaml), pod-exec-sync marks the pod as a
// process pod, kwok makes it Running with its IP but not ready, and this
// agent then runs one local process per mapped container:
//
//   - in a network namespace of the pod's own, holding the pod's IP on its
//     eth0, wired by a veth pair to the test bed's network namespace (where
//     kube-proxy programs Services, and where traffic tests run);
//   - in a mount namespace of its own: the host's files as a copy-on-write
//     overlay, the pod's volumes (ConfigMap, Secret, emptyDir, projected,
//     downward API) at their mountPaths, a /tmp shared with the pod's
//     `kubectl exec` commands (as a container's file system is), an
//     /etc/resolv.conf naming the test bed's cluster DNS;
//   - with the container's command, args and env (downward API included).
//
// It reports a container ready once its readiness probe passes (or its port
// answers), restarts a process that exits or whose image the pod's spec
// changes (starting the new image's program, as a kubelet), and stops the processes and
// removes the namespace when the pod goes away. Each process logs to
// <logs>/<namespace>_<pod>_<container>.log, and, for `kubectl logs`, to a
// CRI-format log under <logs>/cri/ (output.go, internal/podlogs) that kwok
// serves through the API server from the pod's kwok `Logs` object (written
// by pod-exec-sync, given the same --logs directory): sinceTime, tailLines,
// timestamps and follow work as against a kubelet (except that kwok ends a
// follow only when its client does, not when the container stops). Both
// logs are kept after the pod is gone.
//
// It also relays the API server into the test bed's network namespace (on
// the same loopback address and port), so kube-proxy and the clients that
// run there use the test bed's own kubeconfig.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"pontoon.dev/testbed/internal/images"
	"pontoon.dev/testbed/internal/podqueue"
)

// ProcessAnnotation marks a pod whose containers the test bed runs (set by
// pod-exec-sync from the same mapping file; kwok's stages read it).
const ProcessAnnotation = "testbed.pontoon.dev/process"

type agent struct {
	images  *images.File
	binDirs []string
	state   string
	logs    string
	netns   string // the test bed's network namespace (a name under /run/netns)
	// pod-exec-sync's root: <execRoot>/<namespace>/<pod>/tmp is the pod's /tmp.
	execRoot string
	// The cluster DNS server the pods' resolv.conf names; none when empty.
	dns    string
	client kubernetes.Interface
	// How often projected tokens are renewed; 0: as a kubelet (80% of
	// their lifetime).
	tokenRefresh time.Duration
	lister       cache.Indexer

	mu   sync.Mutex
	pods map[string]*podRun // by namespace/name
	// Deleted pods in their preStop sleep, by IP: kwok gives a deleted
	// pod's IP to the next pod at once, while a kubelet's network would keep
	// it until the pod's sandbox is gone. A new pod that needs the IP cuts
	// the old one's drain short (see podRun.stop).
	draining map[string]*podRun
	// Pods being stopped (in the background, so that stopping one never
	// delays starting another).
	stopping sync.WaitGroup
}

func main() {
	if len(os.Args) == 3 && os.Args[1] == "launch" {
		if err := launch(os.Args[2]); err != nil {
			fmt.Fprintf(os.Stderr, "pod-runner launch: %v\n", err)
			os.Exit(127)
		}
		return
	}
	kubeconfig := flag.String("kubeconfig", "", "admin kubeconfig of the test bed")
	imagesFile := flag.String("images", "", "the mapping file: image pattern -> local program")
	binDirs := flag.String("bin-dirs", "", "colon-separated directories holding the mapped programs")
	state := flag.String("state", "", "directory for the pods' volumes and overlays")
	logs := flag.String("logs", "", "directory for the processes' logs (the CRI-format ones kwok serves under its cri/; pod-exec-sync's --logs)")
	netns := flag.String("netns", "", "the test bed's network namespace (ip netns name)")
	relay := flag.String("api-relay", "", "HOST:PORT of the API server to relay into the network namespace")
	execRoot := flag.String("exec-root", "", "pod-exec-sync's --root: each pod's exec sandbox, whose tmp/ becomes the containers' /tmp")
	dns := flag.String("dns", "", "IP of the cluster DNS server for the pods' /etc/resolv.conf")
	tokenRefresh := flag.Duration("token-refresh", 0, "how often projected ServiceAccount tokens are requested again; 0: at 80% of their lifetime, as a kubelet")
	flag.Parse()
	if *kubeconfig == "" || *imagesFile == "" || *state == "" || *logs == "" || *netns == "" {
		fmt.Fprintln(os.Stderr, "usage: pod-runner --kubeconfig FILE --images FILE --bin-dirs DIRS --state DIR --logs DIR --netns NAME [--api-relay HOST:PORT] [--exec-root DIR] [--dns IP]")
		os.Exit(2)
	}
	if err := run(*kubeconfig, *imagesFile, *binDirs, *state, *logs, *netns, *relay, *execRoot, *dns, *tokenRefresh); err != nil {
		klog.ErrorS(err, "pod-runner stopped")
		os.Exit(1)
	}
}

func run(kubeconfig, imagesFile, binDirs, state, logs, netns, relay, execRoot, dns string, tokenRefresh time.Duration) error {
	mapping, err := images.Load(imagesFile)
	if err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 200, 400
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	for _, dir := range []string{state, logs} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	// What a previous agent left (it was killed): its pods start afresh.
	removeStale(netns, state)
	if relay != "" {
		if err := relayInto(ctx, netnsPath(netns), relay); err != nil {
			return fmt.Errorf("relaying the API server: %w", err)
		}
	}

	// Retries soon: what fails here (a pod's ConfigMap not there yet) is fixed soon.
	pq, err := podqueue.New(client, workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 5*time.Second))
	if err != nil {
		return err
	}
	a := &agent{
		images:       mapping,
		binDirs:      filepath.SplitList(binDirs),
		state:        state,
		logs:         logs,
		netns:        netns,
		execRoot:     execRoot,
		dns:          dns,
		client:       client,
		tokenRefresh: tokenRefresh,
		lister:       pq.Lister,
		pods:         map[string]*podRun{},
		draining:     map[string]*podRun{},
	}
	ready := func() { klog.InfoS("pod-runner ready", "images", len(mapping.Images), "netns", netns) }
	if err := pq.Run(ctx, 4, ready, a.sync); err != nil {
		return err
	}
	a.stopping.Wait()
	a.stopAll()
	return nil
}

func (a *agent) sync(ctx context.Context, key string) error {
	obj, exists, err := a.lister.GetByKey(key)
	if err != nil {
		return err
	}
	a.mu.Lock()
	current := a.pods[key]
	a.mu.Unlock()
	var pod *corev1.Pod
	if exists {
		pod = obj.(*corev1.Pod)
	}
	gone := pod == nil || pod.DeletionTimestamp != nil ||
		(current != nil && current.uid != pod.UID)
	if current != nil && gone {
		a.mu.Lock()
		delete(a.pods, key)
		a.mu.Unlock()
		a.stopping.Add(1)
		go func(run *podRun) {
			defer a.stopping.Done()
			run.stop(true)
			klog.InfoS("pod stopped", "pod", key)
		}(current)
		current = nil
	}
	if current != nil && !gone {
		current.changed(ctx, pod)
		return nil
	}
	if pod == nil || pod.DeletionTimestamp != nil || current != nil {
		return nil
	}
	if pod.Annotations[ProcessAnnotation] != "true" || pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" {
		return nil
	}
	klog.V(1).InfoS("starting pod", "pod", key)
	// Bounded: a start that hangs (an API call, a command) is retried.
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	run, err := a.start(startCtx, pod)
	if err != nil {
		return fmt.Errorf("starting %s: %w", key, err)
	}
	a.mu.Lock()
	a.pods[key] = run
	a.mu.Unlock()
	klog.InfoS("pod started", "pod", key, "ip", pod.Status.PodIP)
	return nil
}

func (a *agent) stopAll() {
	a.mu.Lock()
	runs := a.pods
	a.pods = map[string]*podRun{}
	a.mu.Unlock()
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Add(1)
		go func() { defer wg.Done(); r.stop(false) }()
	}
	wg.Wait()
}

// removeStale deletes the pods' network namespaces (and their processes)
// and state that a previous agent left behind.
func removeStale(netns, state string) {
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), netns+"-") {
			deleteNetns(e.Name())
		}
	}
	old, _ := os.ReadDir(state)
	for _, e := range old {
		_ = os.RemoveAll(filepath.Join(state, e.Name()))
	}
}
