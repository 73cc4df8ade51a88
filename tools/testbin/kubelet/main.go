// Command kubelet is a thin wrapper around k8s.io/kubernetes/cmd/kubelet/app,
// mirroring upstream's cmd/kubelet/kubelet.go, so that the real single-node
// cluster of tools/cluster can run a pinned kubelet built from Go modules. The
// go.mod next to this file is the kube-apiserver wrapper's (same staging
// replace set), so both share one module graph and one build cache.
// Built by tools/testbin/build-node.sh; never committed as a binary.
package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // for JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // for client metric registration
	_ "k8s.io/component-base/metrics/prometheus/version"  // for version metric registration
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	command := app.NewKubeletCommand(context.Background())
	code := cli.Run(command)
	os.Exit(code)
}
