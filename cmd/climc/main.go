// Command climc is the command line client of the GPU inventory, with
// Cloudpods' command names and table layout. See pkg/climc.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"yunion.io/x/mps-daemon/pkg/climc"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := climc.Run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
