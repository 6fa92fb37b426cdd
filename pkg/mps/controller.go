package mps

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"yunion.io/x/mps-daemon/pkg/units"
)

// maxSocketPath is the longest unix socket path that binds: sun_path holds
// 108 bytes with the terminating NUL. A longer pipe directory makes the
// daemon fail with nothing but "Cannot find MPS control daemon process".
const maxSocketPath = 107

// pollInterval is how often Ensure and Quit ask whether the daemon is up.
const pollInterval = 100 * time.Millisecond

// Limits are the defaults a control daemon gives every server it starts.
type Limits struct {
	MemoryLimit      units.MiB // set_default_device_pinned_mem_limit 0 <n>M; 0 = none
	ThreadPercentage float64   // set_default_active_thread_percentage, (0, 100]
	// ClientPriority is set_default_client_priority, 0 or 1 (priority.go):
	// a default of the control daemon only; a running server's cannot be
	// read or set, so server limits leave it at 0.
	ClientPriority int
}

// Controller manages the control daemon of one GPU: the GPU that is device
// `ordinal` of the daemon in env (0 in the per-GPU layout, where the daemon
// sees one device; its place in CUDA_VISIBLE_DEVICES in the single layout).
type Controller struct {
	r       Runner
	env     Env
	timeout time.Duration
	log     *slog.Logger
	ordinal string
}

// NewController returns a controller for the daemon living in env. Every
// control call runs under its own timeout: a wedged daemon hangs the client.
func NewController(r Runner, env Env, timeout time.Duration, log *slog.Logger) *Controller {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Controller{r: r, env: env, timeout: timeout, log: log, ordinal: "0"}
}

// ForDevice is a controller of the same daemon for its device ordinal i: the
// memory limits it sets and reads are device i's; the thread percentage is
// the daemon's, shared by all its devices.
func (c *Controller) ForDevice(i int) *Controller {
	d := *c
	d.ordinal = strconv.Itoa(i)
	return &d
}

// command runs one control command under the timeout and classifies its
// answer; it returns stdout of answers that are not known failures.
func (c *Controller) command(ctx context.Context, command string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	start := time.Now()
	out, err := c.r.Run(ctx, c.env, command)
	d := time.Since(start).Round(time.Microsecond).String()
	if err != nil {
		c.log.Debug("mps control", "command", command, "exit_code", out.ExitCode, "duration", d, "error", err)
		return "", err
	}
	c.log.Debug("mps control", "command", command, "exit_code", out.ExitCode, "duration", d)
	if err := checkOutput(command, out); err != nil {
		return "", err
	}
	return out.Stdout, nil
}

// Running reports whether a control daemon answers in the pipe directory.
func (c *Controller) Running(ctx context.Context) (bool, error) {
	up, _, err := c.running(ctx)
	return up, err
}

// running is Running with the server list the daemon answered (the
// question is get_server_list), unparsed.
func (c *Controller) running(ctx context.Context) (up bool, list string, err error) {
	out, err := c.command(ctx, "get_server_list")
	switch {
	case err == nil:
		return true, out, nil
	case errors.Is(err, ErrNoDaemon):
		return false, "", nil
	default:
		return false, "", err
	}
}

// Ensure makes sure a control daemon runs: one that already answers is
// adopted (adopted == true; after our own restart the daemon and its clients
// live on), otherwise one is started and waited for.
func (c *Controller) Ensure(ctx context.Context) (adopted bool, err error) {
	adopted, _, _, err = c.EnsureServers(ctx)
	return adopted, err
}

// EnsureServers is Ensure answering, for an adopted daemon, the server list
// it gave when asked whether it runs (listed true): Servers as of that
// moment, one control command fewer for a caller that needs both. listed is
// false for a daemon just started, or a list that did not parse: then the
// caller asks Servers.
func (c *Controller) EnsureServers(ctx context.Context) (adopted bool, servers []int, listed bool, err error) {
	if err := CheckPipeDir(c.env.PipeDir); err != nil {
		return false, nil, false, err
	}
	up, list, err := c.running(ctx)
	if err != nil {
		return false, nil, false, fmt.Errorf("asking for a running MPS control daemon: %w", err)
	}
	if up {
		switched, err := c.switchIfIdle(ctx)
		if err != nil {
			return !switched, nil, false, err
		}
		if !switched {
			servers, perr := ParsePIDList(list)
			return true, servers, perr == nil, nil
		}
	}
	return false, nil, false, c.start(ctx)
}

// start starts a control daemon in the pipe directory and waits until it
// answers.
func (c *Controller) start(ctx context.Context) error {
	for _, dir := range []string{c.env.PipeDir, c.env.LogDir} {
		if dir == "" {
			continue
		}
		if err := prepareDir(dir); err != nil {
			return err
		}
	}
	startCtx, cancel := context.WithTimeout(ctx, c.timeout)
	err := c.r.Start(startCtx, c.env)
	cancel()
	if err != nil {
		return err
	}
	if err := c.waitRunning(ctx, true); err != nil {
		return fmt.Errorf("MPS control daemon for %s did not come up (see %s): %w",
			c.env.PipeDir, filepath.Join(c.env.LogDir, "control.log"), err)
	}
	if err := recordMode(c.env.PipeDir, c.env.MultiUser); err != nil {
		return err
	}
	if err := recordDevices(c.env.PipeDir, c.env.VisibleDevices); err != nil {
		return err
	}
	c.log.Debug("mps control daemon up", "pipe_directory", c.env.PipeDir)
	return nil
}

// switchIfIdle deals with an adopted daemon whose server mode, or whose
// devices (the single layout's CUDA_VISIBLE_DEVICES), differ from the
// configured ones. Switching means restarting it, which kills its clients:
// so it happens only while no MPS server runs (switched = true, the daemon
// is gone and the caller starts a new one); otherwise the daemon keeps
// running as it is and the switch waits for an idle moment. A single-layout
// daemon started elsewhere (Cloudpods' own mps-daemon: no device list, so
// CUDA's own device order, which is not knowable) is restarted when idle.
func (c *Controller) switchIfIdle(ctx context.Context) (switched bool, err error) {
	multi, known := recordedMode(c.env.PipeDir)
	devices, knownDevices := RecordedDevices(c.env.PipeDir)
	modeDiffers := known && multi != c.env.MultiUser
	devicesDiffer := (knownDevices && devices != c.env.VisibleDevices) || (!knownDevices && c.env.Single)
	if !known && !devicesDiffer {
		c.log.Debug("adopted an MPS control daemon started elsewhere; its server mode is unknown and left as is", "pipe_directory", c.env.PipeDir)
		return false, nil
	}
	if !modeDiffers && !devicesDiffer {
		return false, nil
	}
	if devicesDiffer {
		clients, err := c.ClientServers(ctx)
		if err != nil {
			return false, err
		}
		if len(clients) > 0 {
			c.log.Warn("the MPS control daemon serves another set of GPUs; it is restarted with the configured ones once no client is connected",
				"pipe_directory", c.env.PipeDir, "running", orUnknown(devices, knownDevices), "configured", c.env.VisibleDevices, "clients", len(clients))
			return false, nil
		}
		c.log.Info("restarting the idle MPS control daemon to serve the configured GPUs",
			"pipe_directory", c.env.PipeDir, "from", orUnknown(devices, knownDevices), "to", c.env.VisibleDevices)
		if err := c.Quit(ctx); err != nil {
			return false, err
		}
		return true, nil
	}
	servers, err := c.Servers(ctx)
	if err != nil {
		return false, err
	}
	if len(servers) > 0 {
		c.log.Warn("MPS control daemon runs in the other server mode; it switches once its servers are gone",
			"pipe_directory", c.env.PipeDir, "running", modeName(multi), "configured", modeName(c.env.MultiUser), "servers", servers)
		return false, nil
	}
	c.log.Info("restarting the idle MPS control daemon to switch its server mode",
		"pipe_directory", c.env.PipeDir, "from", modeName(multi), "to", modeName(c.env.MultiUser))
	if err := c.Quit(ctx); err != nil {
		return false, err
	}
	return true, nil
}

// waitRunning polls Running until it reports want or the timeout passes.
func (c *Controller) waitRunning(ctx context.Context, want bool) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var last error
	for {
		up, err := c.Running(ctx)
		if err == nil && up == want {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("waited %s: %w", c.timeout, last)
			}
			return fmt.Errorf("waited %s", c.timeout)
		case <-tick.C:
		}
	}
}

// CheckPipeDir refuses a pipe directory whose sockets could not bind.
func CheckPipeDir(dir string) error {
	if dir == "" {
		return errors.New("MPS pipe directory is empty")
	}
	sock := filepath.Join(dir, PrivilegedSocket)
	if len(sock) > maxSocketPath {
		return fmt.Errorf("MPS pipe directory %s is too long: %s is %d bytes, unix sockets allow %d",
			dir, sock, len(sock), maxSocketPath)
	}
	return nil
}

// SetDefaults applies l as the daemon's defaults and reads them back. The
// control exits 0 whatever happens and echoes the OLD percentage when it
// refuses one, so only the echo and the read-back tell whether it worked.
// Servers already running keep their values (NVIDIA's documentation).
func (c *Controller) SetDefaults(ctx context.Context, l Limits) error {
	p := strconv.FormatFloat(l.ThreadPercentage, 'f', -1, 64)
	out, err := c.command(ctx, "set_default_active_thread_percentage "+p)
	if err != nil {
		return fmt.Errorf("setting active thread percentage: %w", err)
	}
	echo, err := ParseThreadPercentage(out)
	if err != nil {
		return fmt.Errorf("setting active thread percentage: %w", err)
	}
	// The range check also catches what the echo cannot: 100.04 is refused
	// but echoes an unchanged 100.0 as "100.0".
	inRange := l.ThreadPercentage > 0 && l.ThreadPercentage <= 100
	if !inRange || FormatThreadPercentage(echo) != FormatThreadPercentage(l.ThreadPercentage) {
		return fmt.Errorf("mps refused active thread percentage %s (valid: above 0, at most 100): it still reads %s",
			p, FormatThreadPercentage(echo))
	}
	cmd := "set_default_device_pinned_mem_limit " + c.ordinal + " " + FormatMemLimit(l.MemoryLimit)
	out, err = c.command(ctx, cmd)
	if err != nil {
		return fmt.Errorf("setting pinned memory limit: %w", err)
	}
	if s := strings.TrimSpace(out); s != "" {
		c.log.Warn("unexpected answer from mps control", "command", cmd, "stdout", s)
	}
	if err := c.setDefaultClientPriority(ctx, l.ClientPriority); err != nil {
		return err
	}
	got, err := c.Defaults(ctx)
	if err != nil {
		return fmt.Errorf("reading back mps limits: %w", err)
	}
	if err := checkReadBack(got, l); err != nil {
		return fmt.Errorf("mps limits not applied: %w", err)
	}
	if got.ClientPriority != l.ClientPriority {
		return fmt.Errorf("mps limits not applied: client priority reads back %d, want %d", got.ClientPriority, l.ClientPriority)
	}
	return nil
}

// checkReadBack compares limits as the getters print them (rounded, see
// DisplayMemLimit) with what was set; nil when they match.
func checkReadBack(got, want Limits) error {
	if g, w := FormatThreadPercentage(got.ThreadPercentage), FormatThreadPercentage(want.ThreadPercentage); g != w {
		return fmt.Errorf("active thread percentage reads back %s, want %s", g, w)
	}
	if g, w := DisplayMemLimit(got.MemoryLimit), DisplayMemLimit(want.MemoryLimit); g != w {
		return fmt.Errorf("pinned memory reads back %s, want %s", orNone(g), orNone(w))
	}
	return nil
}

// LimitsMatch reports whether got (as read back, rounded) is what want sets.
// The client priority is left out: a running server's cannot be read.
func LimitsMatch(got, want Limits) bool { return checkReadBack(got, want) == nil }

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// Defaults reads the daemon's defaults. MemoryLimit is what the control
// prints, rounded down to whole GiB from 1 GiB on (see DisplayMemLimit); 0
// means no limit.
func (c *Controller) Defaults(ctx context.Context) (Limits, error) {
	l, err := c.readLimits(ctx, "get_default_active_thread_percentage", "get_default_device_pinned_mem_limit "+c.ordinal)
	if err != nil {
		return Limits{}, err
	}
	if l.ClientPriority, err = c.defaultClientPriority(ctx); err != nil {
		return Limits{}, err
	}
	return l, nil
}

// readLimits runs a thread percentage getter and a pinned memory getter.
func (c *Controller) readLimits(ctx context.Context, pctCommand, memCommand string) (Limits, error) {
	out, err := c.command(ctx, pctCommand)
	if err != nil {
		return Limits{}, fmt.Errorf("thread percentage: %w", err)
	}
	p, err := ParseThreadPercentage(out)
	if err != nil {
		return Limits{}, fmt.Errorf("thread percentage: %w", err)
	}
	out, err = c.command(ctx, memCommand)
	if err != nil {
		return Limits{}, fmt.Errorf("pinned memory limit: %w", err)
	}
	limit, _, err := ParseMemLimit(out)
	if err != nil {
		return Limits{}, fmt.Errorf("pinned memory limit: %w", err)
	}
	return Limits{MemoryLimit: limit, ThreadPercentage: p}, nil
}

// Servers lists the daemon's MPS server PIDs; servers start lazily with the
// first client, so the list is empty until then.
func (c *Controller) Servers(ctx context.Context) ([]int, error) {
	out, err := c.command(ctx, "get_server_list")
	if err != nil {
		return nil, err
	}
	return ParsePIDList(out)
}

// Quit stops the daemon, its servers and their clients, and waits until it
// no longer answers. A daemon that is not running is already stopped.
func (c *Controller) Quit(ctx context.Context) error {
	if _, err := c.command(ctx, "quit"); err != nil && !errors.Is(err, ErrNoDaemon) {
		return fmt.Errorf("stopping MPS control daemon: %w", err)
	}
	if err := c.waitRunning(ctx, false); err != nil {
		return fmt.Errorf("MPS control daemon for %s did not stop: %w", c.env.PipeDir, err)
	}
	return nil
}
