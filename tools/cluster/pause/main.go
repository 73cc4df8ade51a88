// Command pause is the sandbox ("pause") container of the real single-node
// cluster of tools/cluster: it holds a Pod's namespaces and waits until it is
// told to stop. A static Go program, so the image is this one file.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		// reap children, as a pid-namespace init must
		chld := make(chan os.Signal, 8)
		signal.Notify(chld, syscall.SIGCHLD)
		for range chld {
			for {
				var ws syscall.WaitStatus
				pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		}
	}()
	<-sig
}
