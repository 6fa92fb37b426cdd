package agent

import (
	"context"
	"slices"

	"yunion.io/x/mps-daemon/pkg/accounting"
	"yunion.io/x/mps-daemon/pkg/acctloop"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/mps"
)

// newAccounting is the accounting's station over acct: its steps under the
// loop's deadline with a heartbeat of their own (acctBeat), its metrics
// the agent's.
func (a *Agent) newAccounting(acct *accounting.Accountant) *acctloop.Loop {
	return acctloop.New(acctloop.Options{
		Accountant: acct, GPUs: a.opts.Backend, Views: a.entries.host.Views, Guard: a.mps.guard, Metrics: a.met.daemon,
		Step: func(ctx context.Context, name string, f func(context.Context)) {
			a.acctBeat.enter(name)
			defer a.acctBeat.leave()
			ctx, cancel := context.WithTimeout(ctx, stepBudget(a.config().Host))
			defer cancel()
			f(ctx)
		},
		PollInterval: a.opts.ClientPollInterval, Log: a.log,
	})
}

// accountInputs is the snapshot of the stations' state the accounting
// works from (acctloop.Inputs): the GPUs with enforced caps, their devices,
// daemons and control logs (the MPS station's), the claims' own devices
// and, with Cloudpods' pods looked for, what each holder holds (the
// backend's last answer), the view the entries gave. It runs in the main
// loop.
func (a *Agent) accountInputs() acctloop.Inputs {
	cfg := a.config()
	in := acctloop.Inputs{Policy: cfg.Host.Accounting, Limits: map[gpu.UUID]mps.Limits{}, Controls: map[gpu.UUID]acctloop.Control{},
		Logs: map[string][]gpu.UUID{}, Single: cfg.single(), Claims: a.devices.claims,
		ViewGiven: a.entries.viewGiven.On(), ViewConfigured: cfg.Host.ViewLibrary != ""}
	for uuid := range a.mps.planned {
		if gs := a.mps.gpus[uuid]; gs != nil && gs.enforced {
			in.GPUs = append(in.GPUs, uuid)
			in.Controls[uuid], in.Limits[uuid] = gs.ctl, gs.limits
			log := mps.ControlLog(gs.env)
			in.Logs[log] = append(in.Logs[log], uuid)
		}
	}
	slices.Sort(in.GPUs)
	for _, uuid := range in.GPUs {
		in.Devices = append(in.Devices, a.mps.planned[uuid]...)
	}
	for _, g := range in.Logs {
		slices.Sort(g)
	}
	if cfg.Host.PodCgroupParent != "" {
		in.Held = []acctloop.Held{}
		for _, l := range a.devices.listed {
			if l.Holder != "" {
				in.Held = append(in.Held, acctloop.Held{Device: l.Device, Holder: l.Holder})
			}
		}
	}
	return in
}

// account runs one accounting pass over every GPU with enforced caps, in
// the caller's goroutine (tests; the daemon's passes run in the
// accounting loop).
func (a *Agent) account(ctx context.Context) { a.acct.Pass(ctx, a.accountInputs()) }

// keepFigures has the accounting keep the figures of the devices and
// claims listed both before and after the sync (r.remaining): one gone is
// gone from the status, one new to it starts unmeasured.
func (a *Agent) keepFigures(_ context.Context, r *round) error {
	a.acct.Keep(r.remaining)
	return nil
}
