// Command kube-apiserver is a thin wrapper around
// k8s.io/kubernetes/cmd/kube-apiserver/app, mirroring upstream's
// cmd/kube-apiserver/apiserver.go. It exists only so that the test harness
// can build a pinned kube-apiserver from Go modules: k8s.io/kubernetes
// requires its staging modules at v0.0.0, so the go.mod next to this file
// replaces each of them with the published v0.<minor>.<patch> that matches.
// Built by tools/testbin/build.sh (which sets the version ldflags); never
// committed as a binary.
package main

import (
	"os"
	_ "time/tzdata" // for timeZone support in CronJob

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // for JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // load all the prometheus client-go plugins
	_ "k8s.io/component-base/metrics/prometheus/version"  // for version metric registration
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	command := app.NewAPIServerCommand()
	code := cli.Run(command)
	os.Exit(code)
}
