package plan

import (
	"fmt"
	"slices"
)

// Risk says why going from the plan in force, cur, to next needs the
// configuration files to settle first, or "" when it does not: next takes
// every virtual device off the host, or drops the device YAML's entries
// for cuda_mps_replicas. Both are what a file caught empty or half written
// looks like (a truncated host.conf turns sharing off; a truncated device
// YAML has no entry left); the agent holds such a change back until the
// files have stayed as they are (pkg/agent's guard.go). Either plan nil:
// "".
func Risk(cur, next *Plan) string {
	if cur == nil || next == nil {
		return ""
	}
	if n := cur.VirtualDevices(); n > 0 && next.VirtualDevices() == 0 {
		why := "nothing would be shared"
		if !next.Enabled {
			why = "enable_cuda_mps is not true (an empty host.conf turns sharing off)"
		}
		return fmt.Sprintf("it would remove all %d virtual devices of the host: %s", n, why)
	}
	fromYAML := slices.ContainsFunc(cur.GPUs, func(g GPUPlan) bool { return g.Source != SourceReplicas })
	fallback := len(next.GPUs) > 0 && !slices.ContainsFunc(next.GPUs, func(g GPUPlan) bool { return g.Source != SourceReplicas })
	if fromYAML && fallback {
		return fmt.Sprintf("the device YAML names no GPU any more: every GPU would fall back to cuda_mps_replicas (%d each), where the device YAML's entries set N until now", next.GPUs[0].VirtualNumber)
	}
	return ""
}
