package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/mps/mpssim"
)

// goneRunner shuts an idle server down the moment the daemon asks about it,
// and answers the question as a server on its way out does: with nothing.
// What an H100 showed when two programs shut the same idle server down
// (docs/gpu-results.md).
type goneRunner struct {
	*mpssim.Runner
	question string // the command whose answer is lost
	done     bool
}

func (r *goneRunner) Run(ctx context.Context, env mps.Env, command string) (mps.Output, error) {
	if !r.done && strings.HasPrefix(command, r.question+" ") {
		r.done = true
		pid := strings.Fields(command)[1]
		if _, err := r.Runner.Run(ctx, env, "shutdown_server "+pid); err != nil {
			return mps.Output{}, err
		}
		return mps.Output{Stdout: "\n"}, nil
	}
	return r.Runner.Run(ctx, env, command)
}

// An idle MPS server that goes away while the daemon reads it is no fault:
// the GPU stays healthy and its devices stay in the inventory and in the CDI
// spec, whichever question went unanswered.
func TestServerGoneWhileReadIsNoFault(t *testing.T) {
	for _, question := range []string{"get_active_thread_percentage", "get_server_status", "get_client_list"} {
		t.Run(question, func(t *testing.T) {
			h := newHarness(t, "", onlyFirst)
			ctx := context.Background()
			if err := h.agent.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			pipe := h.agent.Status().GPUs[0].PipeDirectory
			// idle: a client comes and goes; its server stays, idle.
			idle := func() int {
				srv, err := h.runner.AddClient(pipe, 4242)
				if err != nil {
					t.Fatal(err)
				}
				if err := h.runner.RemoveClient(pipe, 4242); err != nil {
					t.Fatal(err)
				}
				return srv
			}
			r := &goneRunner{Runner: h.runner, question: question}
			for _, gs := range h.agent.mps.gpus {
				gs.ctl = mps.NewController(r, gs.env, h.cfg.Host.ControlTimeout, h.agent.log)
			}
			srv := idle()
			asked := question != "get_active_thread_percentage" // the probe asks no limits
			if healthy, reason := h.agent.mps.observe(ctx, h.agent.mps.gpus[gpu.UUID(h.agent.Status().GPUs[0].UUID)]); !healthy || r.done != asked {
				t.Fatalf("health probe (asked %s of server %d: %v): healthy %v (%s) for a server that went away", question, srv, r.done, healthy, reason)
			}
			srv = idle()
			r.done = false
			if err := h.agent.Reconcile(ctx); err != nil {
				t.Fatalf("reconcile with server %d gone while read: %v", srv, err)
			}
			if !r.done {
				t.Fatalf("%s was never asked of server %d", question, srv)
			}
			st := h.agent.Status()
			if !st.GPUs[0].Healthy {
				t.Fatalf("GPU unhealthy after an idle server went away: %s %s", st.GPUs[0].Reason, st.GPUs[0].Error)
			}
			for _, d := range h.devices() {
				if d.Unhealthy {
					t.Errorf("device %s marked unhealthy", d.Addr)
				}
			}
			spec, err := os.ReadFile(filepath.Join(h.dir, "cdi", "yunion.io-mps-gpu.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(spec), st.GPUs[0].UUID+"::"); n < 4 {
				t.Errorf("CDI spec names %d devices, want the 4 of the GPU:\n%s", n, spec)
			}
		})
	}
}
