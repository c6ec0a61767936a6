// Command coredns is the test bed's cluster DNS: CoreDNS with only the
// plugins a cluster's DNS needs here, so that process pods resolve Service
// names (`web.shop.svc.cluster.local`) as they would in a cluster. up.sh
// runs it in the test bed's network namespace and pod-runner points the
// pods' /etc/resolv.conf at it. It is its own Go module: CoreDNS's
// dependencies must not move the pins of the Kubernetes build beside it.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	// The plugins the Corefile in up.sh uses; the order below is the order
	// in which CoreDNS chains them.
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	dnsserver.Directives = []string{"bind", "ready", "errors", "kubernetes"}
}

func main() {
	coremain.Run()
}
