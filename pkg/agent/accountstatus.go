package agent

import (
	"cmp"
	"maps"
	"slices"

	"yunion.io/x/mps-daemon/pkg/accounting"
	"yunion.io/x/mps-daemon/pkg/clientreport"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/status"
	"yunion.io/x/mps-daemon/pkg/units"
)

// What the accounting's passes leave in the status. Every pass runs in the
// accounting loop (or a test); the status is guarded by a.mu.

// noteUsage copies one accounting pass into the status: the policy, the
// unknown, mismatched and escaping clients, and each device's use,
// clients, over-cap state and the last enforcement step on it. A device
// the pass did not measure (its GPU unreadable, accounting off) is marked
// so, not shown as unused. A poll (sampled: the GPUs it looked at) leaves
// the other GPUs' figures and clients as the last pass that looked at them
// found them.
func (a *Agent) noteUsage(r accounting.Report, sampled map[gpu.UUID]bool) {
	over := map[string]bool{}
	for _, o := range r.Decision.Over {
		over[o.Device] = true
	}
	last := map[string]string{}
	for _, s := range r.Steps {
		last[s.Device] = s.Step
	}
	// Clients by source, per GPU, so a poll replaces only its GPUs' counts.
	sources := map[gpu.UUID]map[string]int{}
	if r.Usage.PerDevice != nil {
		for _, d := range r.Usage.PerDevice {
			if sources[d.GPU] == nil {
				sources[d.GPU] = map[string]int{}
			}
			for _, c := range d.Clients {
				sources[d.GPU][c.Source]++
			}
		}
		for _, u := range r.Usage.Unknown {
			if sources[u.GPU] == nil {
				sources[u.GPU] = map[string]int{}
			}
			sources[u.GPU][accounting.SourceUnknown]++
		}
	}
	mine := func(g gpu.UUID) bool { return sampled == nil || sampled[g] }
	a.mu.Lock()
	defer a.mu.Unlock()
	prev := a.status.Accounting
	st := status.Accounting{Policy: string(r.Policy)}
	if prev != nil {
		st.NewClients, st.Terminations = prev.NewClients, slices.Clone(prev.Terminations)
	}
	if r.Usage.PerDevice != nil {
		if sampled == nil || a.clientSources == nil {
			a.clientSources = map[gpu.UUID]map[string]int{}
		}
		for g := range a.clientSources {
			if mine(g) {
				delete(a.clientSources, g)
			}
		}
		maps.Copy(a.clientSources, sources)
		st.Clients = map[string]int{accounting.SourceUnknown: 0}
		for _, bySource := range a.clientSources {
			for src, n := range bySource {
				st.Clients[src] += n
			}
		}
	} else {
		a.clientSources = nil
	}
	// The reported clients are the accounting's own values; what it keeps
	// besides (start times, Hidden) stays behind.
	for _, p := range r.Usage.Unknown {
		st.Unknown = append(st.Unknown, p.Unknown)
	}
	for _, m := range r.Usage.Mismatches {
		st.Mismatches = append(st.Mismatches, m.Mismatch)
	}
	for _, e := range r.Usage.Escapes {
		st.QoSEscapes = append(st.QoSEscapes, e.Escape)
	}
	for _, w := range r.Usage.WithoutView {
		st.WithoutView = append(st.WithoutView, w.WithoutView)
	}
	if sampled != nil && prev != nil {
		st.Unknown = keepOthers(st.Unknown, prev.Unknown, mine, func(u clientreport.Unknown) gpu.UUID { return u.GPU })
		st.Mismatches = keepOthers(st.Mismatches, prev.Mismatches, mine, func(m clientreport.Mismatch) gpu.UUID { return m.GPU })
		st.QoSEscapes = keepOthers(st.QoSEscapes, prev.QoSEscapes, mine, func(e clientreport.Escape) gpu.UUID { return e.GPU })
		st.WithoutView = keepOthers(st.WithoutView, prev.WithoutView, mine, func(w clientreport.WithoutView) gpu.UUID { return w.GPU })
	}
	a.noteSteps(&st, r.Steps)
	a.status.Accounting = &st
	measure := func(d *status.Device) bool {
		if !mine(gpu.UUID(d.GPU)) {
			return false
		}
		u, measured := r.Usage.PerDevice[d.Name]
		d.UsedBytes, d.Clients, d.Measured, d.OverCap = units.Bytes(u.UsedBytes), len(u.PIDs), measured, over[d.Name]
		d.WithoutView = u.WithoutView
		if step, ok := last[d.Name]; ok {
			d.LastStep = step
		}
		return true
	}
	for i := range a.status.Devices {
		measure(&a.status.Devices[i])
	}
	// A claim's own device is measured as a slice is, with its QoS
	// escapes counted.
	escapes := map[string]int{}
	for _, e := range r.Usage.Escapes {
		escapes[e.Device]++
	}
	for i := range a.status.Claims {
		c := &a.status.Claims[i]
		if measure(&c.Device) {
			c.Escapes = escapes[c.Name]
		}
	}
}

// keepOthers is cur plus the entries of prev of GPUs that mine says were
// not sampled, sorted by GPU then PID.
func keepOthers[T any](cur, prev []T, mine func(gpu.UUID) bool, gpuOf func(T) gpu.UUID) []T {
	for _, p := range prev {
		if !mine(gpuOf(p)) {
			cur = append(cur, p)
		}
	}
	slices.SortStableFunc(cur, func(x, y T) int { return cmp.Compare(gpuOf(x), gpuOf(y)) })
	return cur
}

// noteConnected adds what the check of connecting clients found to the
// status: its counts, the escapes and the clients billed to no device
// (until the next pass of their GPU says what it finds), the terminations
// and the devices' last steps.
func (a *Agent) noteConnected(r accounting.ConnectReport) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.accountingCopy(string(r.Policy))
	nc := st.NewClients
	nc.Checked += uint64(r.Checked)
	for _, s := range r.Skipped {
		switch s.Reason {
		case accounting.SkipExited:
			nc.Exited++
		case accounting.SkipReused:
			nc.Reused++
		}
	}
	for _, e := range r.Usage.Escapes {
		if !slices.ContainsFunc(st.QoSEscapes, func(x clientreport.Escape) bool { return x.PID == e.PID && x.Device == e.Device }) {
			st.QoSEscapes = append(st.QoSEscapes, e.Escape)
		}
	}
	for _, u := range r.Usage.Unknown {
		if !slices.ContainsFunc(st.Unknown, func(x clientreport.Unknown) bool { return x.PID == u.PID && x.GPU == u.GPU }) {
			st.Unknown = append(st.Unknown, u.Unknown)
		}
	}
	a.noteSteps(st, r.Steps)
	for _, s := range r.Steps {
		for i := range a.status.Devices {
			if a.status.Devices[i].Name == s.Device {
				a.status.Devices[i].LastStep = s.Step
			}
		}
	}
}

// noteSteps appends the terminations steps began (their first step) to
// st's, keeping the last status.MaxTerminations.
func (a *Agent) noteSteps(st *status.Accounting, steps []accounting.Step) {
	for _, s := range steps {
		if !s.First {
			continue
		}
		t := status.Termination{PID: s.PID, GPU: s.GPU.String(), Device: s.Device, Server: s.Server, Cause: s.Cause, Step: s.Step, Detected: s.Detected, At: s.At}
		if least, most, ok := s.Escape.Lasted(s.At); ok {
			t.EscapeFrom, t.EscapeSeconds, t.EscapeSecondsAtMost = s.Escape.From, least.Seconds(), most.Seconds()
		}
		st.Terminations = append(st.Terminations, t)
	}
	if n := len(st.Terminations); n > status.MaxTerminations {
		st.Terminations = slices.Clone(st.Terminations[n-status.MaxTerminations:])
	}
}

// noteClientLogs records how the control logs fare and which GPUs are
// polled, as the accounting loop last saw them.
func (a *Agent) noteClientLogs(logs map[string][]gpu.UUID, states map[string]mps.ClientLogState, polled []gpu.UUID, every float64) {
	var out []status.ClientLog
	for _, path := range slices.Sorted(maps.Keys(logs)) {
		s := states[path]
		l := status.ClientLog{Path: path, Following: s.Following, Error: s.Error, Clients: s.Clients, Malformed: s.Malformed,
			LongLines: s.LongLines, Restarts: s.Restarts, Trouble: s.Trouble, LastForeign: s.LastForeign}
		for k, n := range s.Foreign {
			if l.ForeignCommands == nil {
				l.ForeignCommands = map[string]uint64{}
			}
			l.ForeignCommands[string(k)] = n
		}
		for _, g := range logs[path] {
			l.GPUs = append(l.GPUs, g.String())
		}
		out = append(out, l)
	}
	var polledNames []string
	for _, g := range polled {
		polledNames = append(polledNames, g.String())
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.status.Accounting == nil {
		return // no pass yet: said with the first
	}
	st := a.accountingCopy("")
	st.NewClients.Logs, st.NewClients.PolledGPUs, st.NewClients.PollIntervalSeconds = out, polledNames, every
}

// accountingCopy puts a copy of the status's accounting (policy, when
// there is none yet) in its place and returns it to be changed: what
// Status handed out before is never written to. a.mu is held.
func (a *Agent) accountingCopy(policy string) *status.Accounting {
	st := &status.Accounting{Policy: policy}
	if old := a.status.Accounting; old != nil {
		*st = *old
		st.Unknown, st.Mismatches, st.QoSEscapes = slices.Clone(old.Unknown), slices.Clone(old.Mismatches), slices.Clone(old.QoSEscapes)
		st.Terminations = slices.Clone(old.Terminations)
	}
	nc := &status.NewClients{}
	if st.NewClients != nil {
		*nc = *st.NewClients
	}
	st.NewClients = nc
	a.status.Accounting = st
	return st
}
