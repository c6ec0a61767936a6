// Package podlogs names the files in which pod-runner keeps a process pod's
// container logs in the CRI log format, the format a kubelet's runtime
// writes: kwok serves them through the API server (`kubectl logs`, the
// pods/log subresource) from the pod's kwok `Logs` object, which
// pod-exec-sync writes pointing here. Both programs are given the same
// directory (pod-runner's --logs, pod-exec-sync's --logs).
//
// The plain logs next to them (<logs>/<namespace>_<pod>_<container>.log,
// for people and tools to read) are pod-runner's alone.
package podlogs

import (
	"fmt"
	"path/filepath"

	"k8s.io/apimachinery/pkg/types"
)

// Dir is the directory of a pod's CRI logs, one per pod as a kubelet's
// /var/log/pods/<namespace>_<pod>_<uid>: a later pod of the same name
// starts with logs of its own.
func Dir(logs, namespace, pod string, uid types.UID) string {
	return filepath.Join(logs, "cri", fmt.Sprintf("%s_%s_%s", namespace, pod, uid))
}

// File is the CRI log of one container of the pod. Every run of the
// container (a restart too) appends to it.
func File(logs, namespace, pod string, uid types.UID, container string) string {
	return filepath.Join(Dir(logs, namespace, pod, uid), container+".log")
}
