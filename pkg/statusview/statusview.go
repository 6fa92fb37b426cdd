// Package statusview is `mps-daemon status`: it reads /status from the
// running daemon and prints it for a person. What it prints is what the
// daemon last did, never recomputed here, so that what the operator reads
// is what the daemon believes.
package statusview

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"yunion.io/x/mps-daemon/pkg/clientreport"
	"yunion.io/x/mps-daemon/pkg/status"
)

// Fetch GETs /status from the daemon at address (host:port, or a
// URL) over plain HTTP within timeout (Daemon.Fetch).
func Fetch(ctx context.Context, address string, timeout time.Duration) (status.Status, error) {
	return Daemon{Address: address}.Fetch(ctx, timeout)
}

// Daemon is where a running daemon's /status is read, and how.
type Daemon struct {
	// Address is host:port (http://), or a URL.
	Address string
	// HTTP is the client (TLS, a client certificate); nil a plain one.
	HTTP *http.Client
	// User and Password are sent as basic auth when User is set.
	User, Password string
}

// Fetch GETs /status within timeout. An unreachable daemon, or one that
// asks for a password it was not given, is one line that says so.
func (d Daemon) Fetch(ctx context.Context, timeout time.Duration) (status.Status, error) {
	address := d.Address
	base := address
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	hc := d.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+"/status", nil)
	if err != nil {
		return status.Status{}, fmt.Errorf("daemon address %q: %w", address, err)
	}
	if d.User != "" {
		req.SetBasicAuth(d.User, d.Password)
	}
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return status.Status{}, fmt.Errorf("no daemon answers at %s (is yunion-mps-daemon running, with that mps_listen_address?): %w", address, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized {
		return status.Status{}, fmt.Errorf("the daemon at %s asks for a user and password (basic_auth_users of its mps_web_config_file): give --user and --password-file", address)
	}
	if resp.StatusCode != http.StatusOK {
		return status.Status{}, fmt.Errorf("the daemon at %s answered /status with %s", address, resp.Status)
	}
	var st status.Status
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&st); err != nil {
		return status.Status{}, fmt.Errorf("reading the status of the daemon at %s: %w", address, err)
	}
	return st, nil
}

// Write prints st for a person: a header, the GPUs, the virtual
// devices. now dates the last reconcile ("12s ago").
func Write(w io.Writer, st status.Status, now time.Time) error {
	p := &printer{w: w}
	host := st.HostName
	if host == "" {
		host = "(not registered yet)"
	}
	title := "mps-daemon on " + host
	if st.Simulated {
		title += "  [SIMULATED GPUs and MPS]"
	}
	p.line(title)
	field := func(k, v string) { fmt.Fprintf(p, "  %-16s%s\n", k+":", v) }
	if st.HostID != "" {
		field("host id", st.HostID)
	}
	field("ready", yesNo(st.Ready))
	field("inventory", map[bool]string{true: "reachable", false: "UNREACHABLE"}[st.InventoryReachable])
	cfg := fmt.Sprintf("generation %d", st.ConfigGeneration)
	if st.ConfigError != "" {
		cfg += "; last edit REJECTED, the previous one runs: " + firstLine(st.ConfigError)
	}
	field("configuration", cfg)
	if h := st.ConfigHeld; h != nil {
		field("held back", fmt.Sprintf("a change of the files, applied at %s if they stay as they are: %s", h.ApplyAt.Local().Format(time.TimeOnly), h.Reason))
	}
	if len(st.RestartPending) > 0 {
		field("needs restart", strings.Join(st.RestartPending, ", ")+" changed on disk; the running values stay until a restart")
	}
	if msg := st.Loop.StallMessage(now); msg != "" {
		field("main loop", "STALLED: "+msg)
	}
	field("last reconcile", since(st.LastReconcile, now))
	field("last error", orNone(firstLine(st.LastError)))
	if rest := restLines(st.LastError); rest != "" {
		p.line(rest)
	}
	field("accounting", accountingLine(st.Accounting))
	if st.Accounting != nil && st.Accounting.NewClients != nil {
		field("new clients", newClientsLine(st.Accounting.NewClients))
	}
	field("CDI spec", cdiLine(st.CDI))
	if st.View != nil {
		field("view", viewLine(*st.View))
	}
	if len(st.Retiring) > 0 {
		field("retiring GPUs", strings.Join(st.Retiring, ", ")+" (MPS kept while a device is held)")
	}

	p.line("")
	p.line("GPUs")
	writeGPUs(p, st.GPUs)
	p.line("")
	p.line("Virtual devices")
	writeDevices(p, st.Devices)
	if len(st.Claims) > 0 {
		p.line("")
		p.line("Kubernetes claims on GPUs shared by claims (each a device of its own, capped at its size)")
		writeClaims(p, st.Claims)
	}
	if len(st.Pods) > 0 {
		p.line("")
		p.line("Cloudpods pods (each server's processes on a GPU, capped at the slices it holds there)")
		writePods(p, st.Pods)
	}
	if st.Accounting != nil && len(st.Accounting.Mismatches) > 0 {
		p.line("")
		p.line("MPS clients whose environment disagrees with their identity file (billed by the identity)")
		writeMismatches(p, st.Accounting.Mismatches)
	}
	if st.Accounting != nil && len(st.Accounting.QoSEscapes) > 0 {
		p.line("")
		p.line("MPS clients of batch devices whose environment escapes the device's QoS (terminated under enforce)")
		writeEscapes(p, st.Accounting.QoSEscapes)
	}
	if st.Accounting != nil && len(st.Accounting.WithoutView) > 0 {
		p.line("")
		p.line("MPS clients that see the whole GPU instead of their device's view (reported, never terminated; caps hold)")
		writeWithoutView(p, st.Accounting.WithoutView)
	}
	if st.Accounting != nil && len(st.Accounting.Terminations) > 0 {
		p.line("")
		p.line("Terminations (the last ones; how long each escape lasted when the first step was taken)")
		writeTerminations(p, st.Accounting.Terminations, now)
	}
	return p.err
}

func writeWithoutView(p *printer, ws []clientreport.WithoutView) {
	tw := tabwriter.NewWriter(p, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  PID\tDEVICE\tBY\tUSED MiB\tWHY")
	for _, w := range ws {
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%d\t%s\n", w.PID, w.Device, w.Source, w.UsedBytes.MiB(), w.Reason)
	}
	p.flush(tw)
}

// newClientsLine says how the accounting learns of clients as they
// connect: the control logs followed, the GPUs polled, the counts.
func newClientsLine(nc *status.NewClients) string {
	following := 0
	var broken []string
	for _, l := range nc.Logs {
		if l.Following {
			following++
		} else {
			broken = append(broken, l.Path+": "+firstLine(l.Error))
		}
	}
	line := fmt.Sprintf("%d of %d control logs followed; %d checked as they connected, %d gone before, %d PIDs reused",
		following, len(nc.Logs), nc.Checked, nc.Exited, nc.Reused)
	if len(nc.PolledGPUs) > 0 {
		line += fmt.Sprintf("; %s polled every %gs", plural(len(nc.PolledGPUs), "GPU"), nc.PollIntervalSeconds)
	}
	if len(broken) > 0 {
		line += " (NOT followed, polled instead: " + strings.Join(broken, "; ") + ")"
	}
	var foreign uint64
	var last []string
	for _, l := range nc.Logs {
		for _, n := range l.ForeignCommands {
			foreign += n
		}
		if l.LastForeign != "" {
			last = append(last, l.LastForeign)
		}
	}
	if foreign > 0 {
		line += fmt.Sprintf("; %s sent by other programs (last: %s)", plural(int(foreign), "MPS control command"), strings.Join(last, "; "))
	}
	return line
}

func writeTerminations(p *printer, ts []status.Termination, now time.Time) {
	tw := tabwriter.NewWriter(p, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  WHEN\tPID\tDEVICE\tSERVER\tCAUSE\tFOUND BY\tFIRST STEP\tESCAPE LASTED")
	for _, t := range ts {
		lasted := fmt.Sprintf("%.3fs from %s", t.EscapeSeconds, t.EscapeFrom)
		if t.EscapeFrom == "" {
			lasted = "-"
		}
		if t.EscapeSecondsAtMost > 0 {
			lasted += fmt.Sprintf(" (at most %.3fs)", t.EscapeSecondsAtMost)
		}
		fmt.Fprintf(tw, "  %s ago\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", now.Sub(t.At).Round(time.Second), t.PID, orDash(t.Device), orDash(t.Server),
			t.Cause, t.Detected, t.Step, lasted)
	}
	p.flush(tw)
}

// viewLine says whether containers get their device's view.
func viewLine(v status.View) string {
	switch v.State {
	case status.ViewOn:
		return fmt.Sprintf("on, %s (%s kept)", v.Library, plural(v.Devices, "view"))
	case status.ViewOff:
		return "off (mps_view_library is empty): containers see the whole GPU's memory"
	}
	return strings.ToUpper(v.State) + ": " + firstLine(v.Reason)
}

func writeEscapes(p *printer, es []clientreport.Escape) {
	tw := tabwriter.NewWriter(p, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  PID\tDEVICE\tTHREADS ENV\tPRIORITY ENV\tUSED MiB\tWHY")
	for _, e := range es {
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%d\t%s\n", e.PID, e.Device, envValue(e.Environment.ThreadPercentage),
			envValue(e.Environment.ClientPriority), e.UsedBytes.MiB(), e.Reason)
	}
	p.flush(tw)
}

// envValue is a variable of a process's environment: unset, its value, or
// "set twice".
func envValue(v clientreport.EnvValue) string {
	switch {
	case v.Twice:
		return "set twice"
	case !v.Set:
		return "unset"
	}
	return strconv.Quote(v.Value)
}

func writeMismatches(p *printer, ms []clientreport.Mismatch) {
	tw := tabwriter.NewWriter(p, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  PID\tBILLED TO\tENVIRONMENT SAYS\tBY\tUSED MiB")
	for _, m := range ms {
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%d\n", m.PID, m.Device, orDash(m.Environment), m.Source, m.UsedBytes.MiB())
	}
	p.flush(tw)
}

func writeGPUs(p *printer, gpus []status.GPU) {
	if len(gpus) == 0 {
		p.line("  none planned")
		return
	}
	tw := tabwriter.NewWriter(p, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  INDEX\tPCI\tMODEL\tN\tCAP\tTHREADS\tQOS\tMEMORY USED\tCOMPUTE MODE\tMPS CONTROL\tSERVERS\tHEALTH")
	var notes []string
	for _, g := range gpus {
		health := "healthy"
		switch {
		case g.Error != "":
			health = "ERROR"
			notes = append(notes, fmt.Sprintf("  GPU %d: %s", g.Index, firstLine(g.Error)))
		case !g.Healthy:
			health = "UNHEALTHY"
			notes = append(notes, fmt.Sprintf("  GPU %d: %s", g.Index, orNone(g.Reason)))
		}
		if g.PrivilegedSocketReachable {
			notes = append(notes, fmt.Sprintf("  GPU %d: MPS privileged socket REACHABLE from the pipe directory: %s", g.Index, firstLine(g.PrivilegedSocketReason)))
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%d\t%d MiB\t%d%%\t%s\t%d / %d MiB\t%s\t%s\t%s\t%s\n",
			g.Index, g.PCI, g.Model, g.VirtualNumber, g.MemoryLimit, g.ThreadPercentage, qosColumn(g),
			g.MemoryUsed.MiB(), g.MemoryTotal.MiB(), g.ComputeMode,
			map[bool]string{true: "up", false: "DOWN"}[g.ControlDaemonUp], servers(g.Servers), health)
	}
	p.flush(tw)
	for _, n := range notes {
		p.line(n)
	}
}

func writeDevices(p *printer, devs []status.Device) {
	if len(devs) == 0 {
		p.line("  none in the inventory yet")
		return
	}
	tw := tabwriter.NewWriter(p, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  ADDR\tNAME\tCAP MiB\tUSED MiB\tCLIENTS\tGUEST\tTHREADS\tQOS\tSTATE")
	for _, d := range devs {
		used, clients := "-", "-"
		if d.Measured {
			used, clients = fmt.Sprint(int(d.UsedBytes.MiB())), fmt.Sprint(d.Clients)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%s\t%s\t%d%%\t%s\t%s\n", d.Addr, d.Name, d.MemoryLimit.MiB(), used, clients, orDash(d.Guest),
			d.ThreadPercentage, deviceQoS(d), deviceState(d))
	}
	p.flush(tw)
}

func writePods(p *printer, pods []status.Pod) {
	tw := tabwriter.NewWriter(p, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  SERVER\tNAME\tGPU\tSLICES\tCAP MiB\tUSED MiB\tCLIENTS\tSTATE")
	for _, d := range pods {
		state := "within its cap"
		if d.OverCap {
			state = "OVER CAP"
		}
		if d.LastStep != "" {
			state += ", last step " + d.LastStep
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", d.Server, orDash(d.ServerName), d.GPUIndex, d.Slices,
			d.MemoryLimit.MiB(), d.UsedBytes.MiB(), d.Clients, state)
	}
	p.flush(tw)
}

func writeClaims(p *printer, claims []status.Claim) {
	tw := tabwriter.NewWriter(p, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  CLAIM\tDEVICE\tSIZE MiB\tUSED MiB\tCLIENTS\tTHREADS\tESCAPES\tSTATE")
	for _, c := range claims {
		used, clients, escapes := "-", "-", "-"
		if c.Measured {
			used, clients, escapes = fmt.Sprint(int(c.UsedBytes.MiB())), fmt.Sprint(c.Clients), fmt.Sprint(c.Escapes)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%s\t%d%%\t%s\t%s\n", c.Claim, c.Name, c.MemoryLimit.MiB(), used, clients,
			c.ThreadPercentage, escapes, claimState(c))
	}
	p.flush(tw)
}

// claimState is prepared, then what stands out: unhealthy (its GPU's MPS
// is not serving), over its size.
func claimState(c status.Claim) string {
	s := []string{"prepared"}
	if !c.Healthy {
		s = append(s, "UNHEALTHY")
	}
	if c.OverCap {
		s = append(s, "OVER SIZE")
	}
	return strings.Join(s, ", ")
}

// deviceState is free or attached, then what stands out: unhealthy (not
// handed out), pending removal (left the configuration, waits for its
// guest), over cap (its clients use more than the cap).
func deviceState(d status.Device) string {
	s := []string{"free"}
	if d.Guest != "" {
		s[0] = "attached"
	}
	if !d.Healthy {
		s = append(s, "UNHEALTHY")
	}
	if d.PendingRemoval {
		s = append(s, "pending removal")
	}
	if d.OverCap {
		s = append(s, "OVER CAP")
	}
	if d.WithoutView > 0 {
		s = append(s, plural(d.WithoutView, "client")+" without the view")
	}
	return strings.Join(s, ", ")
}

// qosColumn is a GPU's QoS: "-" without mps_qos, else its latency slices
// and the batch share, with the control daemon's default priority.
func qosColumn(g status.GPU) string {
	if g.QoS == nil {
		return "-"
	}
	return fmt.Sprintf("latency %v, batch %d%% prio %d", g.QoS.LatencySlices, g.QoS.BatchThreadPercentage, g.ClientPriority)
}

// deviceQoS is a device's class and client priority: "-" on a GPU without
// mps_qos.
func deviceQoS(d status.Device) string {
	if d.QoSClass == "" {
		return "-"
	}
	return fmt.Sprintf("%s, prio %d", d.QoSClass, d.ClientPriority)
}

func servers(ss []status.Server) string {
	if len(ss) == 0 {
		return "none"
	}
	out := make([]string, 0, len(ss))
	for _, s := range ss {
		out = append(out, fmt.Sprintf("%d %s (%s)", s.PID, s.Status, plural(s.Clients, "client")))
	}
	return strings.Join(out, "; ")
}

func accountingLine(a *status.Accounting) string {
	if a == nil {
		return "no tick yet"
	}
	line := a.Policy
	var notes []string
	if n := len(a.Unknown); n > 0 {
		notes = append(notes, plural(n, "MPS client")+" billed to no device")
	}
	if n := len(a.Mismatches); n > 0 {
		notes = append(notes, plural(n, "MPS client")+" disagreeing with the identity file")
	}
	if n := len(a.QoSEscapes); n > 0 {
		notes = append(notes, plural(n, "MPS client")+" escaping its device's QoS")
	}
	if n := len(a.WithoutView); n > 0 {
		notes = append(notes, plural(n, "MPS client")+" seeing the whole GPU")
	}
	if len(notes) > 0 {
		line += " (" + strings.Join(notes, "; ") + ")"
	}
	return line
}

func cdiLine(c *status.CDI) string {
	switch {
	case c == nil:
		return "not written yet"
	case c.Error != "":
		return "ERROR: " + firstLine(c.Error)
	}
	return fmt.Sprintf("%s (%d devices)", orNone(c.Path), c.Devices)
}

func since(t, now time.Time) string {
	if t.IsZero() {
		return "none yet"
	}
	return fmt.Sprintf("%s (%s ago)", t.UTC().Format("2006-01-02 15:04:05 UTC"), now.Sub(t).Round(time.Second))
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// restLines are the lines of a joined error after the first, indented.
func restLines(s string) string {
	_, rest, ok := strings.Cut(s, "\n")
	if !ok {
		return ""
	}
	return strings.Repeat(" ", 18) + strings.ReplaceAll(rest, "\n", "\n"+strings.Repeat(" ", 18))
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "NO"
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printer writes lines and keeps the first error.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) Write(b []byte) (int, error) {
	if p.err != nil {
		return 0, p.err
	}
	n, err := p.w.Write(b)
	p.err = err
	return n, err
}

func (p *printer) line(s string) { fmt.Fprintln(p, s) }

// flush flushes a table written to p; its error is p's.
func (p *printer) flush(tw *tabwriter.Writer) { _ = tw.Flush() }

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
