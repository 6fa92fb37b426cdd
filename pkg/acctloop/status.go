package acctloop

import (
	"maps"
	"slices"
	"sort"

	"yunion.io/x/mps-daemon/pkg/accounting"
	"yunion.io/x/mps-daemon/pkg/claim"
	"yunion.io/x/mps-daemon/pkg/clientreport"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/status"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// What the accounting's passes leave in the status. Every pass runs in the
// accounting loop (or a test); the part is guarded by Loop.mu, and the
// agent's Status asks for it (Loop.Status).

// statusPart is the accounting's part of /status.
type statusPart struct {
	// accounting is what Status hands out (a new value for every change:
	// what was handed out before is never written to).
	accounting *status.Accounting
	// clientSources are the last pass's clients by how they were billed,
	// by GPU, so a poll replaces only its GPUs' counts.
	clientSources map[gpu.UUID]map[string]int
	// use is each device's figures, by name, as the passes left them.
	use map[string]deviceUse
	// pods are Cloudpods' pods with clients, as the passes left them
	// (pods.go).
	pods []status.Pod
}

// deviceUse is what the passes measured of one device (or a claim's).
type deviceUse struct {
	UsedBytes   units.Bytes
	Clients     int
	Measured    bool
	OverCap     bool
	WithoutView int
	// LastStep is the last enforcement step on the device; passStep the
	// last a pass took (a claim's shows that one: the connect path's steps
	// show on the agent's devices alone, as they always have).
	LastStep, passStep string
	// Escapes counts a claim's clients escaping its QoS.
	Escapes int
}

// Keep forgets the figures of every device but those of names: the
// agent's devices and claims listed both before and after a sync (a device
// gone from the backend is gone from the status; one new to it starts
// unmeasured).
func (l *Loop) Keep(names map[string]bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	maps.DeleteFunc(l.st.use, func(n string, _ deviceUse) bool { return !names[n] })
}

// fill puts the part in st: the accounting, each device's and claim's
// figures, and the pods.
func (p *statusPart) fill(st *status.Status) {
	st.Accounting = p.accounting
	p.fillPods(st)
	for i := range st.Devices {
		d := &st.Devices[i]
		u := p.use[d.Name]
		d.UsedBytes, d.Clients, d.Measured, d.OverCap, d.LastStep, d.WithoutView = u.UsedBytes, u.Clients, u.Measured, u.OverCap, u.LastStep, u.WithoutView
	}
	for i := range st.Claims {
		c := &st.Claims[i]
		u := p.use[c.Name]
		c.UsedBytes, c.Clients, c.Measured, c.OverCap, c.LastStep, c.WithoutView = u.UsedBytes, u.Clients, u.Measured, u.OverCap, u.passStep, u.WithoutView
		c.Escapes = u.Escapes
	}
}

// gpuOf is the GPU of a device's name.
func gpuOf(name string) gpu.UUID {
	uuid, _, _ := vdev.ParseName(name)
	return uuid
}

// noteUsage copies one pass into the status: the policy, the unknown,
// mismatched and escaping clients, and each device's use, clients,
// over-cap state and the last enforcement step on it. A device the pass
// did not measure (its GPU unreadable, accounting off) is marked so, not
// shown as unused. A poll (sampled: the GPUs it looked at) leaves the
// other GPUs' figures and clients as the last pass that looked at them
// found them.
func (l *Loop) noteUsage(r accounting.Report, sampled map[gpu.UUID]bool) {
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
	l.mu.Lock()
	defer l.mu.Unlock()
	p := &l.st
	prev := p.accounting
	st := status.Accounting{Policy: string(r.Policy)}
	if prev != nil {
		st.NewClients, st.Terminations = prev.NewClients, slices.Clone(prev.Terminations)
	}
	if r.Usage.PerDevice != nil {
		if sampled == nil || p.clientSources == nil {
			p.clientSources = map[gpu.UUID]map[string]int{}
		}
		for g := range p.clientSources {
			if mine(g) {
				delete(p.clientSources, g)
			}
		}
		maps.Copy(p.clientSources, sources)
		st.Clients = map[string]int{accounting.SourceUnknown: 0}
		for _, bySource := range p.clientSources {
			for src, n := range bySource {
				st.Clients[src] += n
			}
		}
	} else {
		p.clientSources = nil
	}
	// The reported clients are the accounting's own values; what it keeps
	// besides (start times, Hidden) stays behind.
	for _, u := range r.Usage.Unknown {
		st.Unknown = append(st.Unknown, u.Unknown)
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
	noteSteps(&st, r.Steps)
	p.accounting = &st
	// Each device of a GPU the pass looked at: measured as the pass found
	// it (a claim's own device as a slice is, with its QoS escapes
	// counted), or not measured; its last step kept unless the pass took
	// one.
	escapes := map[string]int{}
	for _, e := range r.Usage.Escapes {
		escapes[e.Device]++
	}
	if p.use == nil {
		p.use = map[string]deviceUse{}
	}
	names := map[string]bool{}
	for n := range p.use {
		names[n] = true
	}
	for n := range r.Usage.PerDevice {
		names[n] = true
	}
	for n := range escapes {
		names[n] = true
	}
	for n := range last {
		names[n] = true
	}
	for n := range names {
		if !mine(gpuOf(n)) {
			continue
		}
		old := p.use[n]
		u, measured := r.Usage.PerDevice[n]
		d := deviceUse{UsedBytes: units.Bytes(u.UsedBytes), Clients: len(u.PIDs), Measured: measured, OverCap: over[n],
			WithoutView: u.WithoutView, LastStep: old.LastStep, passStep: old.passStep, Escapes: escapes[n]}
		if step, ok := last[n]; ok {
			d.LastStep, d.passStep = step, step
		}
		p.use[n] = d
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
	sort.SliceStable(cur, func(i, j int) bool { return gpuOf(cur[i]) < gpuOf(cur[j]) })
	return cur
}

// noteConnected adds what the check of connecting clients found to the
// status: its counts, the escapes and the clients billed to no device
// (until the next pass of their GPU says what it finds), the terminations
// and the devices' last steps.
func (l *Loop) noteConnected(r accounting.ConnectReport) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.st.accountingCopy(string(r.Policy))
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
	noteSteps(st, r.Steps)
	if l.st.use == nil {
		l.st.use = map[string]deviceUse{}
	}
	for _, s := range r.Steps {
		if claim.IsClaimName(vdev.Name(s.Device)) {
			continue // a claim shows its passes' steps (deviceUse)
		}
		u := l.st.use[s.Device]
		u.LastStep = s.Step
		l.st.use[s.Device] = u
	}
}

// noteSteps appends the terminations steps began (their first step) to
// st's, keeping the last status.MaxTerminations.
func noteSteps(st *status.Accounting, steps []accounting.Step) {
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
func (l *Loop) noteClientLogs(logs map[string][]gpu.UUID, states map[string]mps.ClientLogState, polled []gpu.UUID, every float64) {
	var out []status.ClientLog
	for _, path := range slices.Sorted(maps.Keys(logs)) {
		s := states[path]
		cl := status.ClientLog{Path: path, Following: s.Following, Error: s.Error, Clients: s.Clients, Active: s.Active, Malformed: s.Malformed,
			LongLines: s.LongLines, Restarts: s.Restarts, Trouble: s.Trouble, LastForeign: s.LastForeign}
		for k, n := range s.Foreign {
			if cl.ForeignCommands == nil {
				cl.ForeignCommands = map[string]uint64{}
			}
			cl.ForeignCommands[string(k)] = n
		}
		for _, g := range logs[path] {
			cl.GPUs = append(cl.GPUs, g.String())
		}
		out = append(out, cl)
	}
	var polledNames []string
	for _, g := range polled {
		polledNames = append(polledNames, g.String())
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.st.accounting == nil {
		return // no pass yet: said with the first
	}
	st := l.st.accountingCopy("")
	st.NewClients.Logs, st.NewClients.PolledGPUs, st.NewClients.PollIntervalSeconds = out, polledNames, every
}

// accountingCopy puts a copy of the accounting (policy, when there is
// none yet) in its place and returns it to be changed: what Status handed
// out before is never written to. Loop.mu is held.
func (p *statusPart) accountingCopy(policy string) *status.Accounting {
	st := &status.Accounting{Policy: policy}
	if old := p.accounting; old != nil {
		*st = *old
		st.Unknown, st.Mismatches, st.QoSEscapes = slices.Clone(old.Unknown), slices.Clone(old.Mismatches), slices.Clone(old.QoSEscapes)
		st.Terminations = slices.Clone(old.Terminations)
	}
	nc := &status.NewClients{}
	if st.NewClients != nil {
		*nc = *st.NewClients
	}
	st.NewClients = nc
	p.accounting = st
	return st
}
