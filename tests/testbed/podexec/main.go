// Command pod-exec-sync gives every pod of the test bed its own exec sandbox.
//
// kwok runs `kubectl exec` commands as local processes. A ClusterExec would
// send every pod to one shared working directory, so this program watches
// pods and creates, per pod, a kwok `Exec` whose working directory is
// <root>/<namespace>/<pod>, with the pod's name in the environment. The exec
// shim (exec-shim.sh) then binds <workdir>/tmp over /tmp in a private mount
// namespace, so pods exec'd in parallel never see each other's files.
//
// For a process pod it also writes a kwok `PortForward` (forward.go), so a
// port-forward through the API server reaches its real process, and a kwok
// `Logs` (logs.go), so `kubectl logs` (the pods/log subresource, with
// sinceTime, tailLines, follow) serves what its processes print: the
// CRI-format logs pod-runner writes under the --logs directory they share.
//
// Once the Exec exists it annotates the pod; the test bed's pod-ready stage
// waits for that annotation, so a Ready pod can always be exec'd into. In the
// same write it marks a pod whose images are in the mapping file
// (process-images.yaml) as a process pod: kwok then leaves its readiness to
// pod-runner, which really runs it.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	kwokcrd "sigs.k8s.io/kwok/kustomize/crd"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"pontoon.dev/testbed/internal/images"
	"pontoon.dev/testbed/internal/podqueue"
)

const (
	readyAnnotation   = "testbed.pontoon.dev/exec-ready"
	processAnnotation = "testbed.pontoon.dev/process"
)

var (
	execGVR        = schema.GroupVersionResource{Group: "kwok.x-k8s.io", Version: "v1alpha1", Resource: "execs"}
	portForwardGVR = schema.GroupVersionResource{Group: "kwok.x-k8s.io", Version: "v1alpha1", Resource: "portforwards"}
	logsGVR        = schema.GroupVersionResource{Group: "kwok.x-k8s.io", Version: "v1alpha1", Resource: "logs"}
)

type syncer struct {
	root    string
	images  *images.File
	pods    kubernetes.Interface
	dynamic dynamic.Interface
	lister  cache.Indexer
	// The test bed's network namespace (pod-runner's pods are named after
	// it); empty where no process pod runs.
	netns string
	// This program's path, which kwok runs for a port-forward.
	self string
	// pod-runner's --logs directory; empty where no process pod runs.
	logs string
}

func main() {
	// `pod-exec-sync crds`: the CRDs of kwok's PortForward and Logs (one
	// YAML stream), for up.sh to apply before kwok starts. `pod-exec-sync
	// forward`: one port-forward.
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "crds":
			for _, crd := range [][]byte{kwokcrd.PortForward, kwokcrd.Logs} {
				if !bytes.HasPrefix(crd, []byte("---")) {
					os.Stdout.WriteString("---\n")
				}
				os.Stdout.Write(crd)
				if !bytes.HasSuffix(crd, []byte("\n")) {
					os.Stdout.WriteString("\n")
				}
			}
			return
		case "forward":
			flags := flag.NewFlagSet("forward", flag.ExitOnError)
			path := flags.String("netns", "", "the pod's network namespace (a path)")
			port := flags.Int("port", 0, "the pod's port")
			_ = flags.Parse(os.Args[2:])
			if err := forward(*path, *port); err != nil {
				fmt.Fprintf(os.Stderr, "pod-exec-sync forward: %v\n", err)
				os.Exit(1)
			}
			return
		}
	}
	kubeconfig := flag.String("kubeconfig", "", "admin kubeconfig of the test bed")
	root := flag.String("root", "", "directory holding one working directory per pod")
	imagesFile := flag.String("images", "", "the mapping file of process images (optional)")
	testbedNetns := flag.String("netns", "", "the test bed's network namespace, when process pods run (ip netns name)")
	logs := flag.String("logs", "", "pod-runner's --logs directory, when process pods run: their Logs objects name its CRI logs")
	flag.Parse()
	if *kubeconfig == "" || *root == "" {
		fmt.Fprintln(os.Stderr, "usage: pod-exec-sync --kubeconfig FILE --root DIR [--images FILE] [--netns NAME] [--logs DIR]")
		os.Exit(2)
	}
	mapping := &images.File{}
	if *imagesFile != "" {
		var err error
		if mapping, err = images.Load(*imagesFile); err != nil {
			klog.ErrorS(err, "pod-exec-sync cannot start")
			os.Exit(1)
		}
	}
	if err := run(*kubeconfig, *root, mapping, *testbedNetns, *logs); err != nil {
		klog.ErrorS(err, "pod-exec-sync stopped")
		os.Exit(1)
	}
}

func run(kubeconfig, root string, mapping *images.File, testbedNetns, logs string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	// client-go's default (5 per second, bursts of 10) is a kubelet's of
	// long ago: a few pods a second made every later pod wait its turn
	// before it could start. The test bed's controllers get the same.
	cfg.QPS, cfg.Burst = 500, 1000
	pods, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	pq, err := podqueue.New(pods, workqueue.DefaultTypedControllerRateLimiter[string]())
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	s := &syncer{
		root:    root,
		images:  mapping,
		pods:    pods,
		dynamic: dyn,
		lister:  pq.Lister,
		netns:   testbedNetns,
		self:    self,
		logs:    logs,
	}
	// Several workers: a few writes per pod, and pods come in bursts.
	return pq.Run(ctx, 4, nil, s.sync)
}

func (s *syncer) sync(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return err
	}
	workDir := filepath.Join(s.root, namespace, name)
	obj, exists, err := s.lister.GetByKey(key)
	if err != nil {
		return err
	}
	if !exists {
		// The Exec goes with the pod through its owner reference.
		return os.RemoveAll(workDir)
	}
	pod := obj.(*corev1.Pod)
	if pod.Annotations[readyAnnotation] == string(pod.UID) {
		return nil
	}
	if err := os.MkdirAll(filepath.Join(workDir, "tmp"), 0o1777); err != nil {
		return err
	}
	if err := s.ensureExec(ctx, pod, workDir); err != nil {
		return err
	}
	if s.netns != "" && s.images.Mapped(pod) {
		if err := s.ensurePortForward(ctx, pod); err != nil {
			return err
		}
	}
	if s.logs != "" && s.images.Mapped(pod) {
		if err := s.ensureLogs(ctx, pod); err != nil {
			return err
		}
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, readyAnnotation, pod.UID)
	if s.images.Mapped(pod) {
		patch = fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:"true"}}}`, readyAnnotation, pod.UID, processAnnotation)
	}
	_, err = s.pods.CoreV1().Pods(namespace).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// ensurePortForward writes the process pod's PortForward (once per pod).
// kwok runs a forward's command without telling it the port, so only the
// TCP ports a container declares can be forwarded; a pod declaring none
// gets no PortForward (kwok refuses an empty list) and refuses forwards.
func (s *syncer) ensurePortForward(ctx context.Context, pod *corev1.Pod) error {
	list := forwards(s.self, s.netns, pod)
	if len(list) == 0 {
		return nil
	}
	return s.ensureOwned(ctx, pod, portForwardGVR, "PortForward", map[string]any{"forwards": list})
}

func (s *syncer) ensureExec(ctx context.Context, pod *corev1.Pod, workDir string) error {
	return s.ensureOwned(ctx, pod, execGVR, "Exec", map[string]any{
		"execs": []any{map[string]any{
			"local": map[string]any{
				"workDir": workDir,
				"envs": []any{
					map[string]any{"name": "HOSTNAME", "value": pod.Name},
					map[string]any{"name": "POD_NAME", "value": pod.Name},
					map[string]any{"name": "POD_NAMESPACE", "value": pod.Namespace},
					map[string]any{"name": "HOME", "value": workDir},
				},
			},
		}},
	})
}

// ensureOwned creates the pod's kwok object of the kind (named as the pod,
// which owns it, so that it goes with the pod) with the spec, unless the
// pod's is there already. One a pod of the same name left (owned by
// another UID) is deleted, and an error returned: the pod's key is retried
// and then creates its own.
func (s *syncer) ensureOwned(ctx context.Context, pod *corev1.Pod, gvr schema.GroupVersionResource, kind string, spec map[string]any) error {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kwok.x-k8s.io/v1alpha1",
		"kind":       kind,
		"metadata": map[string]any{
			"name":      pod.Name,
			"namespace": pod.Namespace,
			"ownerReferences": []any{map[string]any{
				"apiVersion": "v1",
				"kind":       "Pod",
				"name":       pod.Name,
				"uid":        string(pod.UID),
			}},
		},
		"spec": spec,
	}}
	api := s.dynamic.Resource(gvr).Namespace(pod.Namespace)
	_, err := api.Create(ctx, obj, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		old, getErr := api.Get(ctx, pod.Name, metav1.GetOptions{})
		if getErr != nil {
			return getErr
		}
		owners := old.GetOwnerReferences()
		if len(owners) == 1 && owners[0].UID == pod.UID {
			return nil
		}
		if err := api.Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		return fmt.Errorf("replaced stale %s for %s/%s", kind, pod.Namespace, pod.Name)
	}
	return err
}
