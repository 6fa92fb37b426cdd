// Command mpsctl is the command line client of the GPU inventory, with
// Cloudpods' climc command names, flags and table layout. See pkg/mpsctl.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"yunion.io/x/mps-daemon/pkg/mpsctl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := mpsctl.Run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
