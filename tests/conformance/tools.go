//go:build tools

// Package conformance only pins what `make gateway-conformance` and the test bed
// build from this module: the suite (`go test -c` of its package) and the
// suite's echo server, which the test bed runs for its echo images.
package conformance

import (
	_ "sigs.k8s.io/gateway-api/conformance"
	_ "sigs.k8s.io/gateway-api/conformance/echo-basic"
)
