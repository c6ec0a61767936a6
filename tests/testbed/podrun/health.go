package main

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// How often a container's memory is measured against its limit.
const memoryPeriod = 100 * time.Millisecond

// live kills a container's process, as a kubelet does, once its liveness
// probe has failed failureThreshold times in a row (counted from the
// probe's initialDelaySeconds after each start); supervise then restarts
// it. Without a liveness probe, nothing.
func (r *podRun) live(ctx context.Context, c *containerRun) {
	probe := c.spec.LivenessProbe
	if probe == nil {
		return
	}
	period, threshold := 10*time.Second, 3
	if probe.PeriodSeconds > 0 {
		period = time.Duration(probe.PeriodSeconds) * time.Second
	}
	if probe.FailureThreshold > 0 {
		threshold = int(probe.FailureThreshold)
	}
	delay := time.Duration(probe.InitialDelaySeconds) * time.Second
	failed := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(period):
		}
		c.mu.Lock()
		running, started, cmd := c.running, c.started.Time, c.cmd
		c.mu.Unlock()
		if !running || time.Since(started) < delay {
			failed = 0
			continue
		}
		if r.check(ctx, c, probe, nil) {
			failed = 0
			continue
		}
		failed++
		if failed < threshold || cmd == nil || cmd.Process == nil {
			continue
		}
		klog.InfoS("liveness probe failed; killing the container", "pod", r.namespace+"/"+r.name, "container", c.spec.Name, "failures", failed)
		failed = 0
		r.kill(c, cmd.Process.Pid, "Error")
	}
}

// limitMemory kills a container's process group, reported as OOMKilled, once
// the memory its processes hold (groupMemory) passes
// resources.limits.memory: the test bed's stand-in for a cgroup's limit
// (measured every memoryPeriod, so a process may pass the limit for that
// long). Without a limit, nothing.
func (r *podRun) limitMemory(ctx context.Context, c *containerRun) {
	limit := c.spec.Resources.Limits.Memory().Value()
	if limit <= 0 {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(memoryPeriod):
		}
		c.mu.Lock()
		running, cmd := c.running, c.cmd
		c.mu.Unlock()
		if !running || cmd == nil || cmd.Process == nil {
			continue
		}
		pgid := cmd.Process.Pid
		if used := groupMemory(pgid); used > limit {
			klog.InfoS("memory limit passed; killing the container", "pod", r.namespace+"/"+r.name, "container", c.spec.Name, "memory", used, "limit", limit)
			r.kill(c, pgid, "OOMKilled")
		}
	}
}

// kill ends a container's process group at once, the reason recorded for
// the termination supervise reports.
func (r *podRun) kill(c *containerRun, pgid int, reason string) {
	c.mu.Lock()
	c.killedFor = reason
	c.mu.Unlock()
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// groupMemory is the memory, in bytes, the processes of process group pgid
// hold that a cgroup could not give back under pressure: their anonymous
// and shared resident pages (/proc/PID/status: RssAnon, RssShmem). Pages of
// the program's own file are left out, as a kernel reclaims those before it
// kills (a debug build's code alone is tens of MiB).
func groupMemory(pgid int) int64 {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	var total int64
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if group, ok := statGroup(string(stat)); !ok || group != pgid {
			continue
		}
		status, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		total += unreclaimable(string(status))
	}
	return total
}

// statGroup reads the process group of a /proc/PID/stat line (field 5,
// counted after the command name, which may hold spaces and parentheses).
func statGroup(stat string) (int, bool) {
	end := strings.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, false
	}
	fields := strings.Fields(stat[end+1:])
	// fields[0] is field 3 (state).
	if len(fields) < 3 {
		return 0, false
	}
	group, err := strconv.Atoi(fields[2])
	return group, err == nil
}

// unreclaimable is RssAnon + RssShmem of a /proc/PID/status, in bytes.
func unreclaimable(status string) int64 {
	var total int64
	for _, line := range strings.Split(status, "\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok || (name != "RssAnon" && name != "RssShmem") {
			continue
		}
		fields := strings.Fields(value)
		if len(fields) == 2 && fields[1] == "kB" {
			if kb, err := strconv.ParseInt(fields[0], 10, 64); err == nil {
				total += kb * 1024
			}
		}
	}
	return total
}
