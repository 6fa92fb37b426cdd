//go:build !kubernetes

package main

import "github.com/spf13/cobra"

// draCommand is nil in the plain build: the Kubernetes mode comes with
// -tags kubernetes (dra.go).
func draCommand(*flags) *cobra.Command { return nil }
