// Command etcd is a thin wrapper around go.etcd.io/etcd/server/v3/etcdmain,
// identical to etcd's own server/main.go. It exists only so that the test
// harness can build a pinned etcd 3.6.x from Go modules (`go install
// go.etcd.io/etcd/server/v3@v3.6.x` refuses because of the in-repo replace
// directives). Built by tools/testbin/build.sh; never committed as a binary.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
