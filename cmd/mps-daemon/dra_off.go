//go:build !kubernetes

package main

import (
	"github.com/spf13/cobra"

	"yunion.io/x/mps-daemon/pkg/agent"
)

// buildModes are the modes this build runs: the Cloudpods mode alone.
var buildModes = []agent.Mode{agent.ModeCloudpods}

// draCommand is nil in the plain build: the Kubernetes mode comes with
// -tags kubernetes (dra.go).
func draCommand(*flags) *cobra.Command { return nil }
