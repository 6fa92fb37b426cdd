package accounting

import (
	"fmt"
	"strconv"
	"strings"

	"yunion.io/x/mps-daemon/pkg/clientreport"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// Memory limit escapes (issue 33). Every device's CDI edits give its
// containers CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=<cap>M, and MPS holds a
// client to the lower of that and its control daemon's default. But a list
// MPS cannot take (an ordinal or a UUID the client does not see, a limit of
// 0, a limit without M or G, garbage) does not fall back to the default: it
// leaves the client no pinned memory limit at all. Measured on an H200,
// driver 580.159.04: under a 6 GiB default, `1=2048M`, `x`, `0=0` and
// `0=2048M,1=1M` each let one client take the whole card, 142336 MiB
// (docs/gpu-runs/mps-probe-limits.txt). Such a client is an escape like a
// QoS escape: reported and, under enforce, terminated. The check is an
// allowlist of what our edits give and what a client may lower them to:
// unset, empty, or one entry of ordinal 0 or the client's GPU's UUID, a
// positive whole number of M or G (its GPU named twice is not taken, see
// CheckMemoryLimit). And, where its control daemon's default
// is above the device's cap (a GPU shared by Kubernetes claims of any
// size, whose daemon holds the whole GPU; the single layout's ordinal 0,
// which holds the largest cap of any GPU), the limit it ends up with, the
// lower of that default and its own, must be within the device's cap: a
// client that drops the variable there, or raises it, takes more than its
// device before it has allocated anything. As with the QoS variables, what a
// process sets in its own memory after it started (setenv before CUDA
// initialises) is not seen; the device's memory sum still is
// (docs/containers.md).

// DeviceLimit is what a device's clients' memory limit is checked against.
type DeviceLimit struct {
	// GPU is the device's GPU, Cap its memory cap (0: not checked
	// against the server's limit).
	GPU gpu.UUID
	Cap units.MiB
	// Server is the limit a client of the GPU gets without its own list
	// (0: none), when ServerKnown (SetServerMemoryLimits).
	Server      units.MiB
	ServerKnown bool
}

// CheckMemoryLimit says how a client of a device d with environment env
// escapes its memory limit, or "" when it does not.
func CheckMemoryLimit(env clientreport.QoSEnv, d DeviceLimit) string {
	if env.Unreadable != "" {
		return "its environment cannot be read (" + env.Unreadable + ")"
	}
	m, name := env.MemoryLimit, vdev.EnvMemoryLimit
	if m.Twice {
		return name + " is set twice"
	}
	own := units.MiB(0) // the lowest limit its own list sets; 0: none
	if m.Set && m.Value != "" {
		entries := strings.Split(m.Value, ",")
		for _, entry := range entries {
			key, size, ok := strings.Cut(entry, "=")
			mib, valid := sizeMiB(size)
			if !ok || !ownDevice(key, d.GPU) || !valid {
				return fmt.Sprintf("%s=%q is not a limit of its own GPU (0 or %s) in M or G: MPS then holds it to no limit at all", name, m.Value, d.GPU)
			}
			if own == 0 || mib < own {
				own = mib
			}
		}
		if len(entries) > 1 {
			// Its one GPU named twice (0=1M,0=999999M): what MPS makes of
			// that is not measured here; issue 39 reports such a client
			// terminated on an H200 by an accounting that could only have
			// found it over its cap. Our CDI edits name the GPU once, so
			// it counts as a list MPS cannot take.
			return fmt.Sprintf("%s=%q names its GPU more than once: MPS does not hold such a list to its lowest entry", name, m.Value)
		}
	}
	if !d.ServerKnown || d.Cap == 0 {
		return ""
	}
	got := d.Server
	if own != 0 && (got == 0 || own < got) {
		got = own
	}
	switch {
	case got == 0:
		return fmt.Sprintf("no %s: its control daemon sets no limit, its device's cap is %d MiB", name, d.Cap)
	case got <= d.Cap:
		return ""
	case own == 0:
		return fmt.Sprintf("no %s: it gets its control daemon's %d MiB, its device's cap is %d MiB", name, d.Server, d.Cap)
	}
	return fmt.Sprintf("%s=%q leaves it %d MiB, above its device's cap of %d MiB", name, m.Value, got, d.Cap)
}

// ownDevice reports whether key names the client's one GPU g as MPS reads
// a key: ordinal 0, or its UUID ("GPU-" exactly, the hex in any case).
func ownDevice(key string, g gpu.UUID) bool {
	if key == "0" {
		return true
	}
	hex, ok := strings.CutPrefix(key, "GPU-")
	own, _ := strings.CutPrefix(g.String(), "GPU-")
	return ok && strings.EqualFold(hex, own)
}

// sizeMiB reads a positive whole number of M or G.
func sizeMiB(s string) (units.MiB, bool) {
	num, unit := s[:max(len(s)-1, 0)], s[max(len(s)-1, 0):]
	n, err := strconv.Atoi(num)
	if err != nil || n <= 0 || num[0] == '+' {
		return 0, false
	}
	switch unit {
	case "M":
		return units.MiB(n), true
	case "G":
		return units.MiB(n) * 1024, true
	}
	return 0, false
}
