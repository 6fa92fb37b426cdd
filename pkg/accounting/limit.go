package accounting

import (
	"fmt"
	"strconv"
	"strings"

	"yunion.io/x/mps-daemon/pkg/clientreport"
	"yunion.io/x/mps-daemon/pkg/gpu"
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
// unset, empty, or entries of ordinal 0 or the client's GPU's UUID, each a
// positive whole number of M or G. As with the QoS variables, what a
// process sets in its own memory after it started (setenv before CUDA
// initialises) is not seen; the device's memory sum still is
// (docs/containers.md).

// CheckMemoryLimit says how a client of a device on GPU g with environment
// env escapes its memory limit, or "" when it does not.
func CheckMemoryLimit(env clientreport.QoSEnv, g gpu.UUID) string {
	if env.Unreadable != "" {
		return "its environment cannot be read (" + env.Unreadable + ")"
	}
	m, name := env.MemoryLimit, vdev.EnvMemoryLimit
	switch {
	case m.Twice:
		return name + " is set twice"
	case !m.Set || m.Value == "":
		return ""
	}
	for _, entry := range strings.Split(m.Value, ",") {
		key, size, ok := strings.Cut(entry, "=")
		if !ok || !ownDevice(key, g) || !positiveSize(size) {
			return fmt.Sprintf("%s=%q is not a limit of its own GPU (0 or %s) in M or G: MPS then holds it to no limit at all", name, m.Value, g)
		}
	}
	return ""
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

// positiveSize reports whether s is a positive whole number of M or G.
func positiveSize(s string) bool {
	num, unit := s[:max(len(s)-1, 0)], s[max(len(s)-1, 0):]
	n, err := strconv.Atoi(num)
	return err == nil && n > 0 && num[0] != '+' && (unit == "M" || unit == "G")
}
