package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// materialise writes each of the pod's volumes into dir/<volume name>, as a
// kubelet would fill it; unsupported volume types are an error, not an
// empty directory.
func materialise(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, dir string) error {
	for _, v := range pod.Spec.Volumes {
		target := filepath.Join(dir, v.Name)
		if err := os.MkdirAll(target, 0o755); err != nil {
			return err
		}
		var err error
		switch {
		case v.EmptyDir != nil:
			err = os.Chmod(target, 0o777)
		case v.ConfigMap != nil:
			err = configMapFiles(ctx, client, pod.Namespace, target, v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.Optional)
		case v.Secret != nil:
			err = secretFiles(ctx, client, pod.Namespace, target, v.Secret.SecretName, v.Secret.Items, v.Secret.Optional)
		case v.DownwardAPI != nil:
			err = downwardFiles(pod, target, v.DownwardAPI.Items)
		case v.Projected != nil:
			for _, source := range v.Projected.Sources {
				switch {
				case source.ConfigMap != nil:
					err = configMapFiles(ctx, client, pod.Namespace, target, source.ConfigMap.Name, source.ConfigMap.Items, source.ConfigMap.Optional)
				case source.Secret != nil:
					err = secretFiles(ctx, client, pod.Namespace, target, source.Secret.Name, source.Secret.Items, source.Secret.Optional)
				case source.DownwardAPI != nil:
					err = downwardFiles(pod, target, source.DownwardAPI.Items)
				case source.ServiceAccountToken != nil:
					_, err = tokenFile(ctx, client, pod, target, source.ServiceAccountToken)
				default:
					err = fmt.Errorf("projected volume %s: unsupported source", v.Name)
				}
				if err != nil {
					break
				}
			}
		default:
			err = fmt.Errorf("volume %s: only configMap, secret, emptyDir, downwardAPI and projected volumes are supported", v.Name)
		}
		if err != nil {
			return fmt.Errorf("volume %s: %w", v.Name, err)
		}
	}
	return nil
}

func configMapFiles(ctx context.Context, client kubernetes.Interface, namespace, dir, name string, items []corev1.KeyToPath, optional *bool) error {
	cm, err := client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if optional != nil && *optional {
			return nil
		}
		return err
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return writeKeys(dir, data, items, "ConfigMap "+name)
}

func secretFiles(ctx context.Context, client kubernetes.Interface, namespace, dir, name string, items []corev1.KeyToPath, optional *bool) error {
	secret, err := client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if optional != nil && *optional {
			return nil
		}
		return err
	}
	return writeKeys(dir, secret.Data, items, "Secret "+name)
}

// writeKeys writes every key as a file, or only items (key -> path).
func writeKeys(dir string, data map[string][]byte, items []corev1.KeyToPath, what string) error {
	if len(items) == 0 {
		for k, v := range data {
			if err := writeFile(dir, k, v); err != nil {
				return err
			}
		}
		return nil
	}
	for _, item := range items {
		v, ok := data[item.Key]
		if !ok {
			return fmt.Errorf("%s has no key %q", what, item.Key)
		}
		if err := writeFile(dir, item.Path, v); err != nil {
			return err
		}
	}
	return nil
}

// writeFile writes dir/name whole, in one rename: a process of the pod
// reading it while it is replaced (a refreshed token) sees the old content
// or the new, never part of either.
func writeFile(dir, name string, content []byte) error {
	path := filepath.Join(dir, filepath.Clean("/"+name))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".writing-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(content); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func downwardFiles(pod *corev1.Pod, dir string, items []corev1.DownwardAPIVolumeFile) error {
	for _, item := range items {
		if item.FieldRef == nil {
			return fmt.Errorf("downward API file %s: only fieldRef is supported", item.Path)
		}
		value, err := fieldValue(pod, item.FieldRef.FieldPath)
		if err != nil {
			return err
		}
		if err := writeFile(dir, item.Path, []byte(value)); err != nil {
			return err
		}
	}
	return nil
}

// tokenFile writes a token of the pod's ServiceAccount, bound to the pod,
// as the projection asks; it returns when the token expires.
func tokenFile(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, dir string, source *corev1.ServiceAccountTokenProjection) (time.Time, error) {
	account := pod.Spec.ServiceAccountName
	if account == "" {
		account = "default"
	}
	request := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: source.ExpirationSeconds,
		BoundObjectRef: &authenticationv1.BoundObjectReference{
			Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID,
		},
	}}
	if source.Audience != "" {
		request.Spec.Audiences = []string{source.Audience}
	}
	token, err := client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, account, request, metav1.CreateOptions{})
	if err != nil {
		return time.Time{}, err
	}
	return token.Status.ExpirationTimestamp.Time, writeFile(dir, source.Path, []byte(token.Status.Token))
}

// refreshTokens keeps the pod's projected ServiceAccount tokens fresh, as a
// kubelet does: each is requested again once 80% of its lifetime has
// passed (or every agent.tokenRefresh, when set: the test bed's tests of
// rotation cannot wait the ten minutes a token lasts at least), and
// replaced in one rename, so a reader sees the old token or the new one.
func (r *podRun) refreshTokens(ctx context.Context, pod *corev1.Pod) {
	type projected struct {
		dir    string
		source *corev1.ServiceAccountTokenProjection
	}
	var tokens []projected
	for _, v := range pod.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, s := range v.Projected.Sources {
			if s.ServiceAccountToken != nil {
				tokens = append(tokens, projected{filepath.Join(r.volumes(), v.Name), s.ServiceAccountToken})
			}
		}
	}
	for _, t := range tokens {
		go func() {
			// The token materialise wrote is as old as this.
			issued := time.Now()
			lifetime := 3600 * time.Second
			if t.source.ExpirationSeconds != nil {
				lifetime = time.Duration(*t.source.ExpirationSeconds) * time.Second
			}
			for {
				wait := time.Duration(float64(lifetime) * 0.8)
				if r.agent.tokenRefresh > 0 {
					wait = r.agent.tokenRefresh
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(issued.Add(wait))):
				}
				expires, err := tokenFile(ctx, r.agent.client, pod, t.dir, t.source)
				if err != nil {
					if ctx.Err() == nil {
						klog.ErrorS(err, "cannot refresh a ServiceAccount token; trying again in 10 s", "pod", r.namespace+"/"+r.name)
					}
					issued = time.Now().Add(10*time.Second - wait)
					continue
				}
				issued = time.Now()
				lifetime = time.Until(expires)
				klog.V(2).InfoS("ServiceAccount token refreshed", "pod", r.namespace+"/"+r.name, "expires", expires)
			}
		}()
	}
}

// fieldValue is a downward API field of the pod.
func fieldValue(pod *corev1.Pod, path string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP":
		return pod.Status.PodIP, nil
	case "status.hostIP":
		return pod.Status.HostIP, nil
	case "metadata.labels":
		return formatMap(pod.Labels), nil
	case "metadata.annotations":
		return formatMap(pod.Annotations), nil
	}
	for _, prefix := range []string{"metadata.labels['", "metadata.annotations['"} {
		if strings.HasPrefix(path, prefix) && strings.HasSuffix(path, "']") {
			key := strings.TrimSuffix(strings.TrimPrefix(path, prefix), "']")
			if prefix == "metadata.labels['" {
				return pod.Labels[key], nil
			}
			return pod.Annotations[key], nil
		}
	}
	return "", fmt.Errorf("downward API field %q is not supported", path)
}

func formatMap(m map[string]string) string {
	lines := make([]string, 0, len(m))
	for k, v := range m {
		lines = append(lines, k+"="+strconv.Quote(v))
	}
	return strings.Join(lines, "\n")
}

// environment is the container's env as a kubelet sets it.
func environment(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, c *corev1.Container) ([]string, error) {
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOSTNAME=" + pod.Name,
		"KUBERNETES_SERVICE_HOST=10.96.0.1",
		"KUBERNETES_SERVICE_PORT=443",
	}
	set := func(name, value string) {
		for i, kv := range env {
			if strings.HasPrefix(kv, name+"=") {
				env[i] = name + "=" + value
				return
			}
		}
		env = append(env, name+"="+value)
	}
	for _, from := range c.EnvFrom {
		var data map[string]string
		switch {
		case from.ConfigMapRef != nil:
			cm, err := client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, from.ConfigMapRef.Name, metav1.GetOptions{})
			if err != nil {
				if from.ConfigMapRef.Optional != nil && *from.ConfigMapRef.Optional {
					continue
				}
				return nil, err
			}
			data = cm.Data
		case from.SecretRef != nil:
			secret, err := client.CoreV1().Secrets(pod.Namespace).Get(ctx, from.SecretRef.Name, metav1.GetOptions{})
			if err != nil {
				if from.SecretRef.Optional != nil && *from.SecretRef.Optional {
					continue
				}
				return nil, err
			}
			data = map[string]string{}
			for k, v := range secret.Data {
				data[k] = string(v)
			}
		}
		for k, v := range data {
			set(from.Prefix+k, v)
		}
	}
	for _, e := range c.Env {
		value := expand(e.Value, env)
		if from := e.ValueFrom; from != nil {
			var err error
			switch {
			case from.FieldRef != nil:
				value, err = fieldValue(pod, from.FieldRef.FieldPath)
			case from.ConfigMapKeyRef != nil:
				var cm *corev1.ConfigMap
				cm, err = client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, from.ConfigMapKeyRef.Name, metav1.GetOptions{})
				if err == nil {
					value = cm.Data[from.ConfigMapKeyRef.Key]
				}
			case from.SecretKeyRef != nil:
				var secret *corev1.Secret
				secret, err = client.CoreV1().Secrets(pod.Namespace).Get(ctx, from.SecretKeyRef.Name, metav1.GetOptions{})
				if err == nil {
					value = string(secret.Data[from.SecretKeyRef.Key])
				}
			case from.ResourceFieldRef != nil:
				value = "0"
			}
			if err != nil {
				return nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
		}
		set(e.Name, value)
	}
	return env, nil
}

// expand replaces $(NAME) with NAME's value set so far, as Kubernetes does.
func expand(value string, env []string) string {
	if !strings.Contains(value, "$(") {
		return value
	}
	for _, kv := range env {
		name, v, _ := strings.Cut(kv, "=")
		value = strings.ReplaceAll(value, "$("+name+")", v)
	}
	return value
}
