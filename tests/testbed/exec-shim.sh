#!/bin/sh
# Exec shim of the test bed. kwok runs a pod's `kubectl exec` command as a
# local process in that pod's own working directory (see podexec/main.go);
# this shim, found first on kwok's PATH under the command's name, runs the
# real command in a private mount namespace where that directory's tmp/ is
# bound over /tmp. Pods exec'd in parallel thus never share /tmp.
name=${0##*/}
# The command and everything it starts see the ordinary PATH, not the shims,
# followed by the test bed's pod-bin (stand-ins such as carrier2; see up.sh).
PATH=$TESTBED_REAL_PATH
export PATH
real=$(command -v -- "$name") || { echo "$name: command not found" >&2; exit 127; }
mkdir -p "$PWD/tmp" || exit 126
exec unshare --mount --propagation private -- /bin/sh -c \
  'mount --bind "$1" /tmp && shift && exec "$@"' exec-shim "$PWD/tmp" "$real" "$@"
