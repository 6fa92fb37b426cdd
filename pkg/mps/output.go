package mps

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"yunion.io/x/mps-daemon/pkg/units"
)

// The control client reports most failures on stdout and still exits 0
// (docs/gpu-runs/mps-probe.txt), so every answer goes through checkOutput,
// which turns the known failure texts into these sentinels.
var (
	// ErrNoDaemon: no control daemon listens in the pipe directory (the
	// client exits 1 with "Cannot find MPS control daemon process").
	ErrNoDaemon = errors.New("no MPS control daemon is running")
	// ErrUnknownCommand: `Unknown command "X"`.
	ErrUnknownCommand = errors.New("unknown MPS control command")
	// ErrServerNotFound: `Server N not found`, or `Server not found` from ps.
	ErrServerNotFound = errors.New("MPS server not found")
	// ErrInvalidCommand: `Invalid command format.` (the probed control writes
	// this to control.log only, but it is classified should a version print it).
	ErrInvalidCommand = errors.New("invalid MPS control command format")
	// ErrPIDRequired: `A server PID is required`.
	ErrPIDRequired = errors.New("MPS control command needs a server PID")
	// ErrNotPrivileged: a command the control daemon takes only through
	// its privileged socket (quit, set_default_*) sent through `control`:
	// `Not enough privilege to execute quit command`, `Insufficient
	// privileges for UID 0. ...` (privileged.go).
	ErrNotPrivileged = errors.New("MPS control command refused: not sent through the privileged socket")
)

// What the control client prints for its failures (docs/gpu-runs/
// mps-probe*.txt): checkOutput reads them, the simulated control
// (pkg/mps/mpssim) prints them.
const (
	MsgNoDaemon       = "Cannot find MPS control daemon process"
	MsgUnknownCommand = "Unknown command \""
	MsgInvalidCommand = "Invalid command format."
	MsgPIDRequired    = "A server PID is required"
	// MsgQuitRefused and MsgSettingsRefused are the refusals of quit and
	// set_default_* sent through `control`, as the probed control prints
	// them (UID 0; the typo is the control's).
	MsgQuitRefused     = "Not enough privilege to execute quit command"
	MsgSettingsRefused = "Insufficient privileges for UID %d. Control deamon settings can only be modified by the user who started it or by the root user."
)

// checkOutput classifies one answer of the control client. A nil result means
// the answer is not a known failure; its stdout still has to be parsed.
func checkOutput(command string, o Output) error {
	if o.ExitCode != 0 {
		stderr := strings.TrimSpace(o.Stderr)
		if strings.Contains(stderr, MsgNoDaemon) {
			return fmt.Errorf("mps control %q: %w", command, ErrNoDaemon)
		}
		if stderr == "" {
			stderr = strings.TrimSpace(o.Stdout)
		}
		return fmt.Errorf("mps control %q exited with status %d: %s", command, o.ExitCode, stderr)
	}
	first, _, _ := strings.Cut(strings.TrimSpace(o.Stdout), "\n")
	var sentinel error
	switch {
	case strings.HasPrefix(first, MsgUnknownCommand):
		sentinel = ErrUnknownCommand
	case first == MsgInvalidCommand:
		sentinel = ErrInvalidCommand
	case first == MsgPIDRequired:
		sentinel = ErrPIDRequired
	case first == MsgInvalidPriority:
		sentinel = ErrInvalidPriority
	case first == MsgQuitRefused, strings.HasPrefix(first, "Insufficient privileges for UID "):
		sentinel = ErrNotPrivileged
	case isServerNotFound(first):
		sentinel = ErrServerNotFound
	default:
		return nil
	}
	return fmt.Errorf("mps control %q: %q: %w", command, first, sentinel)
}

// isServerNotFound matches `Server not found` and `Server <pid> not found`.
func isServerNotFound(line string) bool {
	if line == "Server not found" {
		return true
	}
	pid, ok := strings.CutPrefix(line, "Server ")
	if !ok {
		return false
	}
	pid, ok = strings.CutSuffix(pid, " not found")
	if !ok {
		return false
	}
	_, err := strconv.Atoi(pid)
	return err == nil
}

// ParseThreadPercentage reads the `%.1f` answer of the thread percentage
// commands (`25.0`).
func ParseThreadPercentage(out string) (float64, error) {
	s := strings.TrimSpace(out)
	p, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(p) || math.IsInf(p, 0) {
		return 0, fmt.Errorf("parsing active thread percentage from %q: not a number", out)
	}
	return p, nil
}

// FormatThreadPercentage is the control's own spelling of a percentage; two
// percentages are the same to the control when they print the same.
func FormatThreadPercentage(p float64) string {
	return strconv.FormatFloat(p, 'f', 1, 64)
}

// ParseMemLimit reads the answer of the pinned memory limit getters: nothing
// when no limit is set, otherwise the display form (`512M`, `19G`). The value
// returned is the display value in MiB, so `19G` gives 19456 even when 20389M
// was set and is enforced: the control rounds down what it prints.
func ParseMemLimit(out string) (limit units.MiB, set bool, err error) {
	s := strings.TrimSpace(out)
	if s == "" {
		return 0, false, nil
	}
	unit := 1
	switch {
	case strings.HasSuffix(s, "G"):
		unit = 1024
	case strings.HasSuffix(s, "M"):
	default:
		return 0, false, fmt.Errorf("parsing pinned memory limit from %q: want <n>M or <n>G", out)
	}
	n, err := strconv.Atoi(s[:len(s)-1])
	if err != nil || n < 0 {
		return 0, false, fmt.Errorf("parsing pinned memory limit from %q: want <n>M or <n>G", out)
	}
	return units.MiB(n * unit), true, nil
}

// DisplayMemLimit is how the control prints a limit: whole GiB,
// rounded down, from 1024 MiB on (`20389M` -> `19G`, `1536M` -> `1G`), MiB
// below (`1023M`). No limit (0 or less) prints nothing. Measured in
// docs/gpu-runs/mps-probe2.txt.
func DisplayMemLimit(limit units.MiB) string {
	switch {
	case limit <= 0:
		return ""
	case limit >= 1024:
		return strconv.Itoa(int(limit/1024)) + "G"
	default:
		return strconv.Itoa(int(limit)) + "M"
	}
}

// FormatMemLimit is the value we send: exact MiB, since the limit enforced is
// the value set, whatever the getter prints.
func FormatMemLimit(limit units.MiB) string {
	return strconv.Itoa(int(limit)) + "M"
}

// ParsePIDList reads one PID a line (get_server_list, get_client_list);
// nothing printed is an empty list.
func ParsePIDList(out string) ([]int, error) {
	var pids []int
	for line := range strings.Lines(out) {
		s := strings.TrimSpace(line)
		if s == "" {
			continue
		}
		pid, err := strconv.Atoi(s)
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("parsing PID list: line %q is not a PID", s)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}
