package mpssim

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/units"
)

// A CUDA client as the driver connects it, from its environment alone: what
// a container's process does with the variables its CDI entry gave it.
// Measured with a driver-API client on two H200s, driver 580.159.04
// (docs/gpu-runs/mps-probe-multi.txt and mps-probe-limits.txt):
//
//   - the GPUs a client sees are its server's, whatever device nodes its
//     container holds: CUDA_VISIBLE_DEVICES unset shows every GPU the
//     server serves; set, it picks among them, by UUID (GPU- then the hex
//     in either case) or by the server's ordinal, in its own order, and the
//     first entry that names none of them ends the list (`B,A` on B's
//     server is B; `A,B` is nothing). A client left with no GPU fails in
//     cuInit with CUDA_ERROR_NO_DEVICE;
//   - the server's pinned memory limit of ordinal k holds the CLIENT's
//     ordinal k, not the GPU the server numbers k: a client of the single
//     daemon that sees only its GPU B gets ordinal 0's limit, whichever GPU
//     that is;
//   - the client's own CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, a list of
//     <ordinal or UUID>=<n>M|G, lowers the limits it names and never
//     raises them; empty changes nothing; but a list MPS cannot take (an
//     ordinal or UUID the client does not see, 0, no unit, garbage) leaves
//     the client with NO limit at all, the server's included.
//
// Not measured, so modelled the strict way: UUID prefixes (the CUDA
// documentation allows them) name nothing; a device listed twice ends the
// list; a limit in K is a list MPS cannot take.

// The variables the CUDA driver reads, as a program given them knows them
// (the daemon's names for them are pkg/vdev's; the simulator stands for
// the driver and does not import them).
const (
	envPipeDirectory  = "CUDA_MPS_PIPE_DIRECTORY"
	envVisibleDevices = "CUDA_VISIBLE_DEVICES"
	envMemoryLimit    = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
)

// ErrNoDevice is a client that sees no GPU: cuInit's CUDA_ERROR_NO_DEVICE.
var ErrNoDevice = errors.New("cuInit: CUDA_ERROR_NO_DEVICE")

// ClientView is what a connected simulated client sees.
type ClientView struct {
	// ServerPID is the server it connected to.
	ServerPID int
	// Devices are the GPUs (UUIDs) it sees, by its own device ordinal.
	Devices []string
	// MemoryLimits are the pinned memory limits MPS holds it to, by its
	// device ordinal; 0 is none.
	MemoryLimits []units.MiB
}

// Connect connects a simulated client process with this environment
// (NAME=value entries, the first of a name counting, as getenv reads
// them): its control daemon is CUDA_MPS_PIPE_DIRECTORY's, its GPUs and
// limits as the driver makes them (above). The first client starts the
// lazy server, as AddClient does. A client without a pipe directory or
// without a daemon there is mps.ErrNoDaemon (a real one would run outside
// MPS, uncapped); one that sees no GPU of the server, ErrNoDevice.
func (s *Runner) Connect(pid int, environ []string) (ClientView, error) {
	pipeDir, ok := getenv(environ, envPipeDirectory)
	if !ok || pipeDir == "" {
		return ClientView{}, fmt.Errorf("simulated MPS client %d: no CUDA_MPS_PIPE_DIRECTORY: %w", pid, mps.ErrNoDaemon)
	}
	visible, visibleSet := getenv(environ, envVisibleDevices)
	limit, limitSet := getenv(environ, envMemoryLimit)
	comm, ns := s.proc(pid)
	ctx, cancel := context.WithTimeout(context.Background(), lockWait)
	defer cancel()
	var view ClientView
	err := s.withState(ctx, pipeDir, func(st **simState) (bool, error) {
		d := *st
		if d == nil {
			return false, fmt.Errorf("simulated MPS client %d in %s: %w", pid, pipeDir, mps.ErrNoDaemon)
		}
		devs := ClientDevices(visible, visibleSet, d.Devices)
		if len(devs) == 0 {
			return false, fmt.Errorf("simulated MPS client %d in %s (%s=%q, the server's GPUs %v): %w",
				pid, pipeDir, envVisibleDevices, visible, d.Devices, ErrNoDevice)
		}
		srv := s.connect(d, pid, comm, ns)
		base := make([]units.MiB, len(devs))
		for k := range devs {
			base[k] = srv.MemoryLimits[k]
		}
		view = ClientView{ServerPID: srv.PID, Devices: devs, MemoryLimits: ClientMemoryLimits(limit, limitSet, devs, base)}
		return true, nil
	})
	return view, err
}

// ClientDevices are the GPUs a client whose CUDA_VISIBLE_DEVICES is
// visible (set or not) sees of a server serving server (UUIDs by the
// server's ordinal), in the client's ordinal order.
func ClientDevices(visible string, set bool, server []string) []string {
	if !set {
		return append([]string(nil), server...)
	}
	var out []string
	for _, e := range strings.Split(visible, ",") {
		e = strings.TrimSpace(e)
		i := deviceIndex(e, server)
		if i < 0 || containsFold(out, server[i]) {
			break
		}
		out = append(out, server[i])
	}
	return out
}

// deviceIndex is the server ordinal an entry of CUDA_VISIBLE_DEVICES
// names: a decimal ordinal, or a UUID ("GPU-" exactly, the hex in any
// case); -1 when it names none.
func deviceIndex(e string, server []string) int {
	if n, err := strconv.Atoi(e); err == nil && e != "" && e[0] != '+' && e[0] != '-' {
		if n < len(server) {
			return n
		}
		return -1
	}
	hex, ok := strings.CutPrefix(e, "GPU-")
	if !ok {
		return -1
	}
	for i, u := range server {
		if h, ok := strings.CutPrefix(u, "GPU-"); ok && strings.EqualFold(h, hex) {
			return i
		}
	}
	return -1
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

// ClientMemoryLimits are the limits MPS holds a client seeing devs to,
// base being its server's limits for the client's ordinals, given its
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (value, set or not).
func ClientMemoryLimits(value string, set bool, devs []string, base []units.MiB) []units.MiB {
	out := append([]units.MiB(nil), base...)
	if !set || value == "" {
		return out
	}
	for _, entry := range strings.Split(value, ",") {
		key, size, ok := strings.Cut(entry, "=")
		k := deviceIndex(key, devs)
		limit := clientLimit(size)
		if !ok || k < 0 || limit == 0 {
			return make([]units.MiB, len(base)) // a list MPS cannot take: no limit at all
		}
		if out[k] == 0 || limit < out[k] {
			out[k] = limit
		}
	}
	return out
}

// clientLimit reads one limit of a client's list: a positive integer and M
// or G; 0 for anything else.
func clientLimit(s string) units.MiB {
	num, unit := s[:max(len(s)-1, 0)], s[max(len(s)-1, 0):]
	n, err := strconv.Atoi(num)
	if err != nil || n <= 0 || num[0] == '+' {
		return 0
	}
	switch unit {
	case "M":
		return units.MiB(n)
	case "G":
		return units.MiB(n) * 1024
	}
	return 0
}

// getenv is the first value of name in environ, as glibc's getenv finds it.
func getenv(environ []string, name string) (string, bool) {
	for _, e := range environ {
		if v, ok := strings.CutPrefix(e, name+"="); ok {
			return v, true
		}
	}
	return "", false
}
