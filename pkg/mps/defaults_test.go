package mps_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/mps/mpssim"
	"yunion.io/x/mps-daemon/pkg/units"
)

// countingRunner counts the set_default_* commands it passes on.
type countingRunner struct {
	*mpssim.Runner
	mu   sync.Mutex
	sets int
}

func (r *countingRunner) Run(ctx context.Context, env mps.Env, command string) (mps.Output, error) {
	if strings.HasPrefix(command, "set_default_") {
		r.mu.Lock()
		r.sets++
		r.mu.Unlock()
	}
	return r.Runner.Run(ctx, env, command)
}

func (r *countingRunner) setCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sets
}

func TestEnsureDefaults(t *testing.T) {
	want := mps.Limits{MemoryLimit: 20389, ThreadPercentage: 25, ClientPriority: 1}
	// Both within 19G: what the getters print of either.
	sameGiB := mps.Limits{MemoryLimit: 19500, ThreadPercentage: 25, ClientPriority: 1}
	cases := []struct {
		name    string
		before  *mps.Limits // set by hand first; nil: a fresh daemon's
		force   bool
		wantSet bool
		// exact is the memory limit held afterwards.
		exact int
	}{
		{"fresh daemon", nil, false, true, 20389},
		{"already right", &want, false, false, 20389},
		{"other percentage", &mps.Limits{MemoryLimit: 20389, ThreadPercentage: 50, ClientPriority: 1}, false, true, 20389},
		{"other priority", &mps.Limits{MemoryLimit: 20389, ThreadPercentage: 25}, false, true, 20389},
		{"other GiB", &mps.Limits{MemoryLimit: 30000, ThreadPercentage: 25, ClientPriority: 1}, false, true, 20389},
		{"within the GiB: not seen", &sameGiB, false, false, 19500},
		{"within the GiB, forced", &sameGiB, true, true, 20389},
		{"already right, forced", &want, true, true, 20389},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := simEnv(t)
			env.VisibleDevices = ""
			sim := mpssim.New(nil)
			r := &countingRunner{Runner: sim}
			ctl := mps.NewController(r, env, 5*time.Second, nil)
			if _, err := ctl.Ensure(t.Context()); err != nil {
				t.Fatal(err)
			}
			if c.before != nil {
				if err := ctl.SetDefaults(t.Context(), *c.before); err != nil {
					t.Fatal(err)
				}
			}
			before := r.setCount()
			set, err := ctl.EnsureDefaults(t.Context(), want, c.force)
			if err != nil || set != c.wantSet {
				t.Fatalf("EnsureDefaults = %v, %v; want %v, nil", set, err, c.wantSet)
			}
			if sent := r.setCount() - before; (sent > 0) != c.wantSet {
				t.Errorf("%d set_default_* commands sent, set = %v", sent, set)
			}
			got, err := sim.ExactDefaults(env.PipeDir)
			if err != nil {
				t.Fatal(err)
			}
			if got != (mps.Limits{MemoryLimit: units.MiB(c.exact), ThreadPercentage: 25, ClientPriority: 1}) {
				t.Errorf("defaults held afterwards %+v; want 25%%, priority 1, %d MiB", got, c.exact)
			}
		})
	}
}

// TestEnsureDefaultsRefusesAsSetDefaults: a limit the control refuses is
// sent, and refused, even when the getters print it as held.
func TestEnsureDefaultsRefusesAsSetDefaults(t *testing.T) {
	ctl := mps.NewController(mpssim.New(nil), simEnv(t), 5*time.Second, nil)
	if _, err := ctl.Ensure(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The control holds 100.0, which is how 100.04 prints too.
	set, err := ctl.EnsureDefaults(t.Context(), mps.Limits{ThreadPercentage: 100.04}, false)
	if err == nil || !set || !strings.Contains(err.Error(), "refused active thread percentage 100.04") {
		t.Fatalf("EnsureDefaults(100.04%%) = %v, %v; want the control's refusal", set, err)
	}
}
