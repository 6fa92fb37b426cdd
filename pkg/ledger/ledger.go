// Package ledger is the Kubernetes mode's record of prepared claims, as
// plain Go: which claims are prepared and with which devices, the slots
// of claims' own devices on GPUs shared by claims (one assignment, for a
// prepare and a rebuild alike), the claims' CDI spec, the checkpoint file
// a restart reads back and, when that is corrupt, the rebuild from the
// claims the API server lists. It knows no Kubernetes type and no client:
// pkg/dra, the kubelet plugin, turns the API's objects into its
// Allocations and its Devices into ResourceSlices.
//
// A GPU of fixed slices is published as its slices. A GPU shared by claims
// of any size (the device YAML's sharing: claims) is published as one
// claims device that claims consume; each claim prepared on it gets a
// device of its own (pkg/claim), with its own entry in a CDI spec of
// claims, made at prepare time and removed at unprepare.
//
// A prepared fixed slice is held: the holdings answered to the agent name
// the claim as the device's holder, so the agent keeps the device's CDI
// entry when a resize or a removed GPU takes it out of the plan (as it
// does for a Cloudpods guest), and the pool keeps publishing it exactly as
// it was prepared until the claim is unprepared.
package ledger

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"yunion.io/x/mps-daemon/pkg/backend"
	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/claim"
	"yunion.io/x/mps-daemon/pkg/entries"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// Options configure a Ledger.
type Options struct {
	// Pool is the node's pool of devices (the node's name).
	Pool string
	// Driver is the DRA driver's name, for messages naming its taint.
	Driver string
	// CheckpointPath is the file of prepared claims.
	CheckpointPath string
	// ClaimKind is the CDI kind of the claims' spec; claim.DefaultKind
	// when empty.
	ClaimKind string
	Log       *slog.Logger
}

// Ledger is the prepared claims and the devices they are prepared from;
// safe for concurrent use.
type Ledger struct {
	opts Options
	log  *slog.Logger

	mu      sync.Mutex
	synced  bool     // a reconcile has handed devices over since the start
	current []Device // fixed slices and claims devices, as the last reconcile had them
	claims  map[string]Claim
	// gpus are the planned GPUs as the agent last offered them, and spec
	// where claims' entries go (nil until it has).
	gpus  map[gpu.UUID]backend.GPU
	spec  *entries.Spec
	specW cdi.Writer
	// rebuild is why the checkpoint is to be rebuilt from the API server
	// (it was corrupt, and its rebuild not done yet); nothing is
	// published or prepared until it is.
	rebuild error
}

// Open reads the checkpoint; it starts nothing. A corrupt checkpoint is
// reported, moved aside (<path>.corrupt-<time>) and left to Rebuild, as is
// one whose rebuild a previous run began and did not finish (the marker
// beside it).
func Open(opts Options) (*Ledger, error) {
	if opts.Pool == "" {
		return nil, errors.New("ledger: the pool's name is required")
	}
	if opts.CheckpointPath == "" {
		return nil, errors.New("ledger: checkpoint path is required")
	}
	if opts.ClaimKind == "" {
		opts.ClaimKind = claim.DefaultKind
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	l := &Ledger{opts: opts, log: opts.Log}
	pending := pendingRebuild(opts.CheckpointPath)
	claims, err := loadCheckpoint(opts.CheckpointPath)
	switch {
	case errors.Is(err, ErrCorrupt):
		// The marker first: a restart before the rebuild is done rebuilds
		// too (the file is not where it was any more).
		if merr := markRebuild(opts.CheckpointPath, err, time.Now()); merr != nil {
			return nil, fmt.Errorf("%w; %w", err, merr)
		}
		aside, merr := moveAside(opts.CheckpointPath, time.Now())
		if merr != nil {
			return nil, fmt.Errorf("%w; %w", err, merr)
		}
		l.log.Error("the DRA checkpoint is corrupt: moved aside; the prepared claims are rebuilt from the API server before anything is published or prepared",
			"err", err, "moved_to", aside)
		l.rebuild, claims = err, map[string]Claim{}
	case err != nil:
		return nil, err
	case pending != nil:
		l.log.Error("the DRA checkpoint's rebuild is not done yet: the prepared claims are rebuilt from the API server before anything is published or prepared",
			"why", pending, "marker", rebuildMarker(opts.CheckpointPath))
		l.rebuild, claims = pending, map[string]Claim{}
	}
	l.claims = claims
	if len(claims) > 0 {
		l.log.Info("prepared claims read from the checkpoint", "claims", len(claims), "path", opts.CheckpointPath)
	}
	return l, nil
}

// Pool is the name of the node's pool.
func (l *Ledger) Pool() string { return l.opts.Pool }

// Sync takes one reconcile's offer: its GPUs, the devices published from
// now on (a GPU shared by claims as its claims device), and where claims'
// entries go (the claims' spec is written again when what it is made from
// changed: a start's, from the checkpoint). It answers what the pool
// holds: the offered devices, each fixed slice with the claim that holds
// it, then the held slices the plan does not have any more (pending
// removal, as they were prepared).
func (l *Ledger) Sync(o backend.Offer) backend.Answer {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.spec = &o.ClaimSpec
	l.gpus = make(map[gpu.UUID]backend.GPU, len(o.GPUs))
	for _, g := range o.GPUs {
		if len(g.Devices) > 0 {
			l.gpus[g.Devices[0].GPU.UUID] = g
		}
	}
	if l.rebuild == nil { // else the spec is written once the claims are rebuilt
		if err := l.syncSpecLocked(); err != nil {
			l.log.Error("the claims' CDI spec not written; the previous one stays", "err", err)
		}
	}
	var cur []Device
	holder := l.holders()
	answer := backend.Answer{HostID: l.opts.Pool}
	inPlan := map[string]bool{}
	for _, g := range o.GPUs {
		for i, d := range g.Devices {
			dev := deviceOf(d, g.Healthy)
			if g.Sharing.Claims() {
				if i == 0 {
					cur = append(cur, dev.claimsDevice(g.VirtualNumber))
				}
				answer.Devices = append(answer.Devices, dev.holding("", false))
				continue
			}
			cur = append(cur, dev)
			inPlan[dev.Name] = true
			answer.Devices = append(answer.Devices, dev.holding(holder[dev.Name].UID, false))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(holder)) {
		if h := holder[name]; !inPlan[name] {
			// Kept out of the plan, pending removal: what the inventory's
			// sync does with a device a guest holds.
			answer.HeldOutOfPlan++
			answer.Devices = append(answer.Devices, h.Device.holding(h.UID, true))
		}
	}
	l.current, l.synced = cur, true
	return answer
}

// holding is a prepared fixed slice and the claim that holds it.
type holding struct {
	Prepared
	UID string
}

// holders maps each prepared fixed slice's name to its claim. A claims
// device is held by none: its claims share it.
func (l *Ledger) holders() map[string]holding {
	out := map[string]holding{}
	for uid, c := range l.claims {
		for _, p := range c.Devices {
			if p.Own == nil {
				out[p.Device.Name] = holding{Prepared: p, UID: uid}
			}
		}
	}
	return out
}

// State is what the plugin publishes and reports health on.
type State struct {
	// Ready: a reconcile has said what there is since the start, and no
	// rebuild is pending; until then nothing is published.
	Ready bool
	// Published is what the pool holds (Published).
	Published []Device
	// Planned are the GPUs of the last reconcile, by UUID.
	Planned map[string]bool
}

// State is the ledger's state now.
func (l *Ledger) State() State {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := State{Ready: l.synced && l.rebuild == nil, Planned: map[string]bool{}}
	for _, dev := range l.current {
		st.Planned[dev.GPUUUID] = true
	}
	if st.Ready {
		st.Published = Published(l.current, l.claims)
	}
	return st
}

// Published is what the pool holds: every prepared fixed slice as it was
// prepared; every device of the last reconcile that no claim holds; a
// claims device as the plan has it now, or, out of the plan, as its claims
// were prepared on it, while any holds a device on it. A device of a GPU
// the last reconcile saw unhealthy is marked so (and tainted when
// published); a removed GPU's free devices are withdrawn. Ordered by GPU,
// fixed slices by index, then the claims device.
func Published(current []Device, claims map[string]Claim) []Device {
	healthy := map[string]bool{}
	now := map[string]Device{}
	for _, dev := range current {
		healthy[dev.GPUUUID] = dev.Healthy
		now[dev.Name] = dev
	}
	out := map[string]Device{}
	for _, c := range claims {
		for _, p := range c.Devices {
			dev := p.Device
			if cur, ok := now[dev.Name]; ok && dev.ClaimsDevice {
				dev = cur
			}
			if h, known := healthy[dev.GPUUUID]; known {
				dev.Healthy = h
			}
			out[dev.Name] = dev
		}
	}
	for _, dev := range current {
		if _, held := out[dev.Name]; !held {
			out[dev.Name] = dev
		}
	}
	devs := slices.Collect(maps.Values(out))
	sort.Slice(devs, func(i, j int) bool {
		a, b := devs[i], devs[j]
		return cmp.Or(cmp.Compare(a.GPUUUID, b.GPUUUID), compareBool(a.ClaimsDevice, b.ClaimsDevice), cmp.Compare(a.Index, b.Index)) < 0
	})
	return devs
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// Claims are the prepared claims, by UID.
func (l *Ledger) Claims() map[string]Claim {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.claims)
}

// ClaimDevices are the own devices of the prepared claims on claims
// devices, which the agent bills and shows as virtual devices, by name.
func (l *Ledger) ClaimDevices() []claim.Device {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []claim.Device
	for uid, c := range l.claims {
		for _, p := range c.Devices {
			if s := p.Own; s != nil {
				out = append(out, claim.Device{
					Device: vdev.Device{GPU: gpu.Info{UUID: gpu.UUID(p.Device.GPUUUID), Minor: s.Minor, Index: -1},
						Index: s.Index, MemoryLimit: s.MemoryLimit, ThreadPercentage: s.ThreadPercentage},
					Claim: c.Namespace + "/" + c.Name, UID: uid, CDIName: s.CDIName,
				})
			}
		}
	}
	slices.SortFunc(out, func(a, b claim.Device) int { return cmp.Compare(a.Name(), b.Name()) })
	return out
}
