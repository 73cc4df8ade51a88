// Command kubectl is a thin wrapper around k8s.io/kubectl's command tree, the
// same entry point as kubernetes' cmd/kubectl. It exists so that the test
// harness can run `kubectl get` / `kubectl describe` against its API server
// without a kubectl on the machine: tools/testbin/build.sh builds it from the
// pinned module below into the same cache as etcd and kube-apiserver.
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		util.CheckErr(err)
	}
}
