//go:build tools

// Package tools pins the kaniko executor that the real single-node cluster of
// tools/cluster runs as its image builder (the backend's builder image). The
// executor is a main package, so it is only blank-imported under the `tools`
// build tag; tools/testbin/build-node.sh then builds
// github.com/GoogleContainerTools/kaniko/cmd/executor inside this module, whose
// go.mod/go.sum pin every dependency (`go install ...@v1.24.0` does not work
// here: the module proxy refuses the version list).
package tools

import _ "github.com/GoogleContainerTools/kaniko/cmd/executor"
