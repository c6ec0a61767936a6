package main

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"pontoon.dev/testbed/internal/images"
)

// A process pod's Logs lists the containers of process images, each with
// its CRI log (where pod-runner writes it), and leaves out those only faked.
func TestLogsOf(t *testing.T) {
	mapping := &images.File{Images: []images.Image{{Match: "testbed.pontoon.dev/busybox:*", Program: "busybox"}}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "0123-abcd"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "main", Image: "testbed.pontoon.dev/busybox:1"},
			{Name: "sidecar", Image: "example.com/faked:1"},
			{Name: "second", Image: "testbed.pontoon.dev/busybox:2"},
		}},
	}
	want := []any{
		map[string]any{"containers": []any{"main"}, "logsFile": "/logs/cri/shop_web_0123-abcd/main.log", "follow": true},
		map[string]any{"containers": []any{"second"}, "logsFile": "/logs/cri/shop_web_0123-abcd/second.log", "follow": true},
	}
	if got := logsOf("/logs", mapping, pod); !reflect.DeepEqual(got, want) {
		t.Errorf("logsOf: %#v", got)
	}
}
