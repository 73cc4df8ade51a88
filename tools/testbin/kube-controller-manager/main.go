// Command kube-controller-manager is a thin wrapper around
// k8s.io/kubernetes/cmd/kube-controller-manager/app, mirroring upstream's
// cmd/kube-controller-manager/controller-manager.go, for the real single-node
// cluster of tools/cluster (the Job controller, garbage collector, service
// account token controller...). Same go.mod as the kube-apiserver wrapper.
// Built by tools/testbin/build-node.sh; never committed as a binary.
package main

import (
	"os"
	_ "time/tzdata" // for CronJob time zone support

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // for JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // load all the prometheus client-go plugin
	_ "k8s.io/component-base/metrics/prometheus/version"  // for version metric registration
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	command := app.NewControllerManagerCommand()
	code := cli.Run(command)
	os.Exit(code)
}
