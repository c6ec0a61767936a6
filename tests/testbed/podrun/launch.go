package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	securejoin "github.com/cyphar/filepath-securejoin"
)

// Launch is what a container's process needs, handed from the agent to
// `pod-runner launch` (which runs already inside the pod's network namespace
// and in a mount namespace of its own).
type Launch struct {
	// Dir holds the container's overlay (upper, work) and its root.
	Dir    string   `json:"dir"`
	Binary string   `json:"binary"`
	Argv   []string `json:"argv"`
	Env    []string `json:"env"`
	// WorkingDir inside the container; "/" when empty.
	WorkingDir string  `json:"workingDir"`
	Mounts     []Mount `json:"mounts"`
	// UID and GID from the pod's securityContext; root when absent.
	UID *int64 `json:"uid,omitempty"`
	GID *int64 `json:"gid,omitempty"`
}

// Mount binds Source (a file or directory of the agent's) at Target.
type Mount struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"readOnly"`
}

// launch builds the container's view of the file system and execs its
// program: the host's root as a copy-on-write overlay (so mount points can
// be made without touching the host), the host's other mounts bound into
// it, the pod's volumes at their mountPaths, a /tmp of its own
// (the pod's exec sandbox when pod-runner has --exec-root, so that what
// `kubectl exec` writes there the process sees), an /etc/resolv.conf naming
// the cluster DNS (with --dns).
func launch(specFile string) error {
	data, err := os.ReadFile(specFile)
	if err != nil {
		return err
	}
	var spec Launch
	if err := json.Unmarshal(data, &spec); err != nil {
		return err
	}
	// Opened before /tmp is covered: a checkout under /tmp keeps working.
	binary, err := os.Open(spec.Binary)
	if err != nil {
		return err
	}
	if _, _, errno := syscall.Syscall(syscall.SYS_FCNTL, binary.Fd(), syscall.F_SETFD, 0); errno != 0 {
		return fmt.Errorf("keeping %s open across exec: %w", spec.Binary, errno)
	}
	upper, work, root := filepath.Join(spec.Dir, "upper"), filepath.Join(spec.Dir, "work"), filepath.Join(spec.Dir, "root")
	for _, dir := range []string{upper, work, root} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	// Listed before the overlay is mounted, which is not one of them.
	tops, err := topMounts()
	if err != nil {
		return err
	}
	options := fmt.Sprintf("lowerdir=/,upperdir=%s,workdir=%s", upper, work)
	if err := syscall.Mount("overlay", root, "overlay", 0, options); err != nil {
		return fmt.Errorf("overlay root: %w", err)
	}
	for _, top := range tops {
		target := filepath.Join(root, top)
		if err := os.MkdirAll(target, 0o755); err != nil {
			return err
		}
		if err := syscall.Mount(top, target, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			return fmt.Errorf("binding %s: %w", top, err)
		}
	}
	if err := syscall.Mount("tmpfs", filepath.Join(root, "tmp"), "tmpfs", 0, "mode=1777"); err != nil {
		return fmt.Errorf("own /tmp: %w", err)
	}
	for _, m := range spec.Mounts {
		if err := bind(root, m); err != nil {
			return err
		}
	}
	if err := syscall.Chroot(root); err != nil {
		return err
	}
	dir := spec.WorkingDir
	if dir == "" {
		dir = "/"
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.Chdir(dir); err != nil {
		return err
	}
	// The program itself runs as the securityContext says (the binary is
	// exec'd through its open descriptor, so its directories need not be
	// searchable by that user).
	if spec.GID != nil {
		if err := syscall.Setgroups(nil); err != nil {
			return err
		}
		if err := syscall.Setgid(int(*spec.GID)); err != nil {
			return fmt.Errorf("runAsGroup %d: %w", *spec.GID, err)
		}
	}
	if spec.UID != nil {
		if err := syscall.Setuid(int(*spec.UID)); err != nil {
			return fmt.Errorf("runAsUser %d: %w", *spec.UID, err)
		}
	}
	return syscall.Exec(fmt.Sprintf("/proc/self/fd/%d", binary.Fd()), spec.Argv, spec.Env)
}

// bind puts one volume (or one file of it) at its mount path.
func bind(root string, m Mount) error {
	// The mount path as the container sees it: a symlink on the way
	// (/var/run -> /run) is followed inside the container's root, never
	// out of it onto the host's.
	target, err := securejoin.SecureJoin(root, m.Target)
	if err != nil {
		return fmt.Errorf("mount point %s: %w", m.Target, err)
	}
	info, err := os.Stat(m.Source)
	if err != nil {
		return err
	}
	if info.IsDir() {
		err = os.MkdirAll(target, 0o755)
	} else {
		if err = os.MkdirAll(filepath.Dir(target), 0o755); err == nil {
			var f *os.File
			if f, err = os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
				err = f.Close()
			}
		}
	}
	if err != nil {
		return fmt.Errorf("mount point %s: %w", m.Target, err)
	}
	if err := syscall.Mount(m.Source, target, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("binding %s at %s: %w", m.Source, m.Target, err)
	}
	if m.ReadOnly {
		flags := uintptr(syscall.MS_BIND | syscall.MS_REMOUNT | syscall.MS_RDONLY)
		if err := syscall.Mount("", target, "", flags, ""); err != nil {
			return fmt.Errorf("read-only %s: %w", m.Target, err)
		}
	}
	return nil
}

// topMounts lists the mount points right under the host's root (/proc,
// /dev, /sys, ...): the overlay shows only the root file system itself.
func topMounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var points []string
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		fields := strings.Fields(scanner.Text())
		if len(fields) < 5 {
			continue
		}
		points = append(points, unescape(fields[4]))
	}
	if err := scanner.Err(); err != nil {
		return nil, err
	}
	var tops []string
	for _, p := range points {
		if p == "/" {
			continue
		}
		covered := false
		for _, q := range points {
			if q != "/" && q != p && strings.HasPrefix(p, q+"/") {
				covered = true
				break
			}
		}
		if !covered && !contains(tops, p) {
			tops = append(tops, p)
		}
	}
	return tops, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
