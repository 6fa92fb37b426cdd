package mps

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// WedgedHint says what a server that does not answer its status may be:
// one a client wedged by dying while it connected (serverlog.go).
const WedgedHint = "a server that never answers again was likely wedged by a client that died while connecting to it: its running clients go on, new ones cannot connect until that GPU's MPS is restarted (docs/containers.md, \"An MPS server wedged by a dying client\")"

// ServerStatus is what get_server_status prints for a live server.
type ServerStatus string

// Statuses seen on an H200 (docs/gpu-runs/mps-probe-fault.txt): a server
// turns FAULT when a client hits a fatal GPU exception, kills its other
// clients, and is ACTIVE again once the faulting client has exited.
const (
	ServerActive ServerStatus = "ACTIVE"
	ServerFault  ServerStatus = "FAULT"
)

// ServerStatus asks for one server's status.
func (c *Controller) ServerStatus(ctx context.Context, pid int) (ServerStatus, error) {
	out, err := c.command(ctx, "get_server_status "+strconv.Itoa(pid))
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		// The command's own timeout, not the caller's deadline: what a
		// server wedged by a client that died while connecting looks
		// like (serverlog.go), said for the operator.
		return "", fmt.Errorf("status of MPS server %d: %w (%s)", pid, err, WedgedHint)
	}
	if err != nil {
		return "", fmt.Errorf("status of MPS server %d: %w", pid, err)
	}
	s := strings.TrimSpace(out)
	if s == "" || strings.ContainsAny(s, " \n") {
		return "", fmt.Errorf("status of MPS server %d: unexpected answer %q", pid, s)
	}
	return ServerStatus(s), nil
}

// Clients lists the client PIDs of one server.
func (c *Controller) Clients(ctx context.Context, pid int) ([]int, error) {
	out, err := c.command(ctx, "get_client_list "+strconv.Itoa(pid))
	if err != nil {
		return nil, fmt.Errorf("clients of MPS server %d: %w", pid, err)
	}
	return ParsePIDList(out)
}

// ServerLimits reads what a running server enforces for clients that
// connect from now on; MemoryLimit is rounded like the defaults.
func (c *Controller) ServerLimits(ctx context.Context, pid int) (Limits, error) {
	p := strconv.Itoa(pid)
	l, err := c.readLimits(ctx, "get_active_thread_percentage "+p, "get_device_pinned_mem_limit "+p+" "+c.ordinal)
	if err != nil {
		return Limits{}, fmt.Errorf("MPS server %d: %w", pid, err)
	}
	return l, nil
}

// SetServerLimits changes the limits of a RUNNING server (the defaults only
// reach servers started later) and reads them back; l.ClientPriority is not
// among them (the control has no per-server priority, priority.go). A server changed this way
// gives the new caps to clients that connect afterwards; measured on an H200:
// after `set_device_pinned_mem_limit <pid> 0 4G` a new client stopped at 4G.
func (c *Controller) SetServerLimits(ctx context.Context, pid int, l Limits) error {
	p := strconv.Itoa(pid)
	pctText := strconv.FormatFloat(l.ThreadPercentage, 'f', -1, 64)
	if !(l.ThreadPercentage > 0 && l.ThreadPercentage <= 100) {
		return fmt.Errorf("active thread percentage %s out of range (0, 100]", pctText)
	}
	if _, err := c.command(ctx, "set_active_thread_percentage "+p+" "+pctText); err != nil {
		return fmt.Errorf("setting thread percentage of MPS server %d: %w", pid, err)
	}
	if _, err := c.command(ctx, "set_device_pinned_mem_limit "+p+" "+c.ordinal+" "+FormatMemLimit(l.MemoryLimit)); err != nil {
		return fmt.Errorf("setting pinned memory limit of MPS server %d: %w", pid, err)
	}
	got, err := c.ServerLimits(ctx, pid)
	if err != nil {
		return err
	}
	if err := checkReadBack(got, l); err != nil {
		return fmt.Errorf("MPS server %d: %w", pid, err)
	}
	return nil
}

// ShutdownServer asks a server to exit once its clients are gone.
func (c *Controller) ShutdownServer(ctx context.Context, pid int) error {
	if _, err := c.command(ctx, "shutdown_server "+strconv.Itoa(pid)); err != nil {
		return fmt.Errorf("shutting down MPS server %d: %w", pid, err)
	}
	return nil
}
