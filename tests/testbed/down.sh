#!/usr/bin/env bash
# Stops exactly the processes up.sh started (by their pid files); keeps data.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

stopped=0
for c in "${components[@]}"; do
  if pid=$(running "$c"); then
    # Each component leads its own session (setsid): signal the whole group.
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
    stopped=$((stopped + 1))
  fi
  rm -f "$run/$c.pid"
done
# The network namespaces (the pods', then the test bed's), and whatever
# still runs in them.
for ns in /run/netns/"$netns"-* /run/netns/"$netns"; do
  [[ -e "$ns" ]] || continue
  ns=${ns##*/}
  pids=$(ip netns pids "$ns" 2>/dev/null || true)
  [[ -z "$pids" ]] || kill -KILL $pids 2>/dev/null || true
  for _ in $(seq 50); do ip netns del "$ns" 2>/dev/null && break; sleep 0.1; done
done
echo "testbed: stopped $stopped processes"
