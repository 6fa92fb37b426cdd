package mps

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrClientNotFound: terminate_client answered 1 for a live server, which
// has no such client. The real control was only measured answering 1 for an
// unknown server (after two "Server N not found" lines); the bare 1 for an
// unknown client on a live server is the simulator's guess.
var ErrClientNotFound = errors.New("MPS client not found")

// TerminateClient asks server serverPID to tear down the CUDA context of its
// client clientPID (`terminate_client <server> <client>`). Success (`0`) does
// not mean the process is gone. Measured on an H200 (driver 580.159.04): a
// client busy in CUDA failed its next call with "the MPS client has been
// terminated by the server" and exited, NVML dropping it within a second; a
// client sleeping outside CUDA stayed alive, still listed by get_client_list
// and by NVML with all its memory, until it was sent SIGTERM (also
// docs/gpu-runs/mps-probe2.txt). A caller that wants the memory back must
// check and signal afterwards, as pkg/accounting's Enforcer does.
// An unknown server gives ErrServerNotFound, an unknown client
// ErrClientNotFound.
func (c *Controller) TerminateClient(ctx context.Context, serverPID, clientPID int) error {
	out, err := c.command(ctx, "terminate_client "+strconv.Itoa(serverPID)+" "+strconv.Itoa(clientPID))
	if err != nil {
		return fmt.Errorf("terminating MPS client %d of server %d: %w", clientPID, serverPID, err)
	}
	if err := ParseTerminateStatus(out); err != nil {
		return fmt.Errorf("terminating MPS client %d of server %d: %w", clientPID, serverPID, err)
	}
	return nil
}

// ParseTerminateStatus reads terminate_client's answer, whose last line is
// a status: `0` done; `1` failed, after `Server N not found` lines when the
// server is unknown (measured: "Server 999999 not found\nServer 999999 not
// found!\n1"), alone when the client is (not measured).
func ParseTerminateStatus(out string) error {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	status := strings.TrimSpace(lines[len(lines)-1])
	switch {
	case status == "0" && len(lines) == 1:
		return nil
	case status == "1" && len(lines) == 1:
		return ErrClientNotFound
	case status == "1" && isServerNotFound(strings.TrimSpace(lines[0])):
		return fmt.Errorf("%q: %w", strings.TrimSpace(lines[0]), ErrServerNotFound)
	}
	return fmt.Errorf("unexpected answer %q from terminate_client", out)
}

// ClientServers maps every client PID of the daemon's servers to its server
// PID: terminate_client needs both, NVML knows only the client. A server
// that exits between get_server_list and get_client_list is skipped, as its
// clients are gone with it.
func (c *Controller) ClientServers(ctx context.Context) (map[int]int, error) {
	servers, err := c.Servers(ctx)
	if err != nil {
		return nil, fmt.Errorf("mapping MPS clients to servers: %w", err)
	}
	out := make(map[int]int)
	for _, srv := range servers {
		clients, err := c.Clients(ctx, srv)
		if errors.Is(err, ErrServerNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("mapping MPS clients to servers: %w", err)
		}
		for _, cl := range clients {
			out[cl] = srv
		}
	}
	return out, nil
}
