package main

// Pod logs of process pods. kwok answers a pod's logs request (`kubectl
// logs`, the API server's pods/log subresource) from the pod's kwok `Logs`:
// for a process pod, pod-exec-sync writes one naming, for each container
// pod-runner runs (its image is a process image), the CRI-format log
// pod-runner writes (internal/podlogs). kwok reads it as a kubelet reads a
// container runtime's log (k8s.io/cri-client), so sinceTime, sinceSeconds,
// tailLines, limitBytes, timestamps and follow apply. A container of an
// image the test bed only fakes has no log: asked for, kwok says so.

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	"pontoon.dev/testbed/internal/images"
	"pontoon.dev/testbed/internal/podlogs"
)

// ensureLogs writes the process pod's Logs (once per pod).
func (s *syncer) ensureLogs(ctx context.Context, pod *corev1.Pod) error {
	list := logsOf(s.logs, s.images, pod)
	if len(list) == 0 {
		return nil
	}
	return s.ensureOwned(ctx, pod, logsGVR, "Logs", map[string]any{"logs": list})
}

// logsOf lists the Logs entries of the pod: one per container of a process
// image, with its CRI log under pod-runner's logs directory.
func logsOf(logs string, mapping *images.File, pod *corev1.Pod) []any {
	var out []any
	for _, c := range pod.Spec.Containers {
		if mapping.For(c.Image) == nil {
			continue
		}
		out = append(out, map[string]any{
			"containers": []any{c.Name},
			"logsFile":   podlogs.File(logs, pod.Namespace, pod.Name, pod.UID, c.Name),
			"follow":     true,
		})
	}
	return out
}
