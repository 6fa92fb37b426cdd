package mps_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/mps/mpssim"
)

func TestParseClientPriority(t *testing.T) {
	for in, want := range map[string]int{"0": 0, "1\n": 1, " 1 \n": 1} {
		if got, err := mps.ParseClientPriority(in); err != nil || got != want {
			t.Errorf("ParseClientPriority(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "2", "01", "1.0", "Invalid priority value - must be 0 or 1!", "0\n1\n"} {
		if _, err := mps.ParseClientPriority(in); err == nil {
			t.Errorf("ParseClientPriority(%q) accepted", in)
		}
	}
}

// The simulated control answers the priority commands as the real one did
// (docs/gpu-runs/qos-probe.md), and a server that runs when the default
// changes gives its new clients the new default, as the real one did
// (docs/gpu-runs/qos-probe-running.md). The contract test cannot ask this
// of the real control: it takes a CUDA client.
func TestSimClientPriority(t *testing.T) {
	ctx := t.Context()
	env := simEnv(t)
	r := mpssim.New(nil)
	c := mps.NewController(r, env, 5*time.Second, nil)
	if _, err := c.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct{ cmd, want string }{
		{"get_default_client_priority", "0\n"},
		{"set_default_client_priority 1", ""},
		{"get_default_client_priority", "1\n"},
		{"set_default_client_priority 2", mps.MsgInvalidPriority + "\n"},
		{"get_default_client_priority", "1\n"},
	} {
		out, err := r.Run(ctx, env, step.cmd)
		if err != nil || out.Stdout != step.want || out.ExitCode != 0 {
			t.Fatalf("%s: %q, exit %d, %v; want %q", step.cmd, out.Stdout, out.ExitCode, err, step.want)
		}
	}
	srv, err := r.AddClient(env.PipeDir, 101)
	if err != nil {
		t.Fatal(err)
	}
	if l, err := r.EnforcedLimits(env.PipeDir, srv); err != nil || l.ClientPriority != 1 {
		t.Errorf("server started under default 1: %+v, %v; want priority 1", l, err)
	}
	if err := c.SetDefaults(ctx, mps.Limits{MemoryLimit: 4096, ThreadPercentage: 50, ClientPriority: 0}); err != nil {
		t.Fatal(err)
	}
	if l, err := r.EnforcedLimits(env.PipeDir, srv); err != nil || l.ClientPriority != 0 {
		t.Errorf("the same server after the default changed: %+v, %v; want the new default, 0, for its new clients", l, err)
	}
	if servers, err := c.Servers(ctx); err != nil || len(servers) != 1 || servers[0] != srv {
		t.Errorf("servers %v, %v; want %d alone, still running", servers, err, srv)
	}
}

// A control without client priorities (an older driver) takes a default
// of 0 as a no-op and refuses 1 with an error that says why.
func TestClientPriorityOnAControlWithoutIt(t *testing.T) {
	ctx := t.Context()
	env := simEnv(t)
	r := noPriorityRunner{mpssim.New(nil)}
	c := mps.NewController(r, env, 5*time.Second, nil)
	if _, err := c.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.SetDefaults(ctx, mps.Limits{MemoryLimit: 4096, ThreadPercentage: 50}); err != nil {
		t.Errorf("priority 0 on a control without priorities: %v", err)
	}
	err := c.SetDefaults(ctx, mps.Limits{MemoryLimit: 4096, ThreadPercentage: 50, ClientPriority: 1})
	if !errors.Is(err, mps.ErrUnknownCommand) || !strings.Contains(err.Error(), "no client priorities") {
		t.Errorf("priority 1: %v, want an error saying the control has no priorities", err)
	}
}

type noPriorityRunner struct{ *mpssim.Runner }

func (r noPriorityRunner) Run(ctx context.Context, env mps.Env, command string) (mps.Output, error) {
	if strings.Contains(command, "client_priority") {
		name, _, _ := strings.Cut(command, " ")
		return mps.Output{Stdout: mps.MsgUnknownCommand + name + "\"\n"}, nil
	}
	return r.Runner.Run(ctx, env, command)
}

// A control that acknowledges a priority and keeps the old one is caught by
// the read-back.
func TestClientPriorityReadBack(t *testing.T) {
	ctx := t.Context()
	env := simEnv(t)
	c := mps.NewController(droppingPriorityRunner{mpssim.New(nil)}, env, 5*time.Second, nil)
	if _, err := c.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	err := c.SetDefaults(ctx, mps.Limits{MemoryLimit: 4096, ThreadPercentage: 50, ClientPriority: 1})
	if err == nil || !strings.Contains(err.Error(), "client priority reads back 0, want 1") {
		t.Errorf("SetDefaults = %v, want the read-back to catch it", err)
	}
}

type droppingPriorityRunner struct{ *mpssim.Runner }

func (r droppingPriorityRunner) Run(ctx context.Context, env mps.Env, command string) (mps.Output, error) {
	if strings.HasPrefix(command, "set_default_client_priority") {
		return mps.Output{}, nil
	}
	return r.Runner.Run(ctx, env, command)
}
