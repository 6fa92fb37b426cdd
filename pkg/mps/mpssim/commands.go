package mpssim

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/units"
)

// simCommand answers one command line against a running daemon's state, as
// the real control does (docs/gpu-runs/mps-probe*.txt). It returns stdout and
// whether the state changed (a setter given the value held changes nothing,
// and the state is not written again); the real control always exits 0
// here. quit sets *st to nil.
//
// privileged says whether the client reached the daemon's privileged
// socket. Without it the daemon's own settings and quit are refused, as
// measured on an H200 with control_privileged moved out of the pipe
// directory (docs/gpu-runs/probe-privileged-2026-11-29.txt): quit and
// set_default_* answer their refusals (exit 0, nothing changed);
// questions, and the commands on a server (set_active_thread_percentage,
// terminate_client, shutdown_server measured; set_device_pinned_mem_limit
// not measured, modelled alike), are answered as through the privileged
// socket. set_default_client_priority's refusal is not measured either:
// modelled as the other set_default_*'s.
func simCommand(st **simState, line string, privileged bool) (stdout string, dirty bool) {
	d := *st
	f := strings.Fields(line)
	if len(f) == 0 {
		return "", false
	}
	if !privileged {
		switch f[0] {
		case "quit":
			return mps.MsgQuitRefused + "\n", false
		case "set_default_active_thread_percentage", "set_default_device_pinned_mem_limit", "set_default_client_priority":
			return fmt.Sprintf(mps.MsgSettingsRefused, os.Geteuid()) + "\n", false
		}
	}
	args := f[1:]
	arg := func(i int) string { // a missing argument reads as "" (atoi: 0)
		if i < len(args) {
			return args[i]
		}
		return ""
	}
	notFound := func(pid int) string { return fmt.Sprintf("Server %d not found\n", pid) }

	switch f[0] {
	case "get_server_list":
		var b strings.Builder
		for _, srv := range d.Servers {
			fmt.Fprintf(&b, "%d\n", srv.PID)
		}
		return b.String(), false

	case "get_default_active_thread_percentage":
		return pct(d.DefaultThreadPercentage), false

	case "set_default_active_thread_percentage":
		// Out of range (0 and 150 measured, garbage reads as 0): not applied,
		// the old value is echoed, exit 0.
		p, ok := validPercentage(arg(0))
		changed := ok && p != d.DefaultThreadPercentage
		if ok {
			d.DefaultThreadPercentage = p
		}
		return pct(d.DefaultThreadPercentage), changed

	case "get_default_client_priority":
		return strconv.Itoa(d.DefaultClientPriority) + "\n", false

	case "set_default_client_priority":
		// 0 and 1 set it silently, 2 is refused (qos-probe.md); other
		// arguments are read the C way (not measured).
		p := cAtoi(arg(0))
		if p != 0 && p != 1 {
			return mps.MsgInvalidPriority + "\n", false
		}
		changed := p != d.DefaultClientPriority
		d.DefaultClientPriority = p
		return "", changed

	case "get_default_device_pinned_mem_limit":
		if len(args) < 1 { // measured (mps-probe3.txt)
			return "", false
		}
		return memLine(d.DefaultMemoryLimits[cAtoi(arg(0))]), false

	case "set_default_device_pinned_mem_limit":
		if len(args) < 2 { // measured with one argument (mps-probe3.txt)
			return "", false
		}
		// A bad device ordinal is accepted silently and kept: 7 reads back
		// what was set on 7 (mps-probe3.txt).
		return "", setLimit(d.DefaultMemoryLimits, cAtoi(arg(0)), arg(1))

	case "get_server_status":
		if len(args) == 0 {
			return mps.MsgPIDRequired + "\n", false
		}
		pid := cAtoi(arg(0))
		srv := server(d, pid)
		if srv == nil {
			return notFound(pid), false
		}
		if srv.Fault {
			return string(mps.ServerFault) + "\n", false
		}
		return string(mps.ServerActive) + "\n", false

	case "get_client_list":
		pid := cAtoi(arg(0)) // no PID: "Server 0 not found" (measured)
		srv := server(d, pid)
		if srv == nil {
			return notFound(pid), false
		}
		var b strings.Builder
		for _, c := range srv.Clients {
			fmt.Fprintf(&b, "%d\n", c.PID)
		}
		return b.String(), false

	case "get_device_client_list":
		servers := d.Servers // no PID: every server (measured with one)
		if len(args) > 0 {
			pid := cAtoi(arg(0))
			srv := server(d, pid)
			if srv == nil { // measured (mps-probe3.txt)
				return notFound(pid), false
			}
			servers = []simServer{*srv}
		}
		var b strings.Builder
		for _, srv := range servers {
			// The probed control printed bus 00:00.0 for a GPU at 00:06.0.
			fmt.Fprintf(&b, "[0] 00:00.0, %s\n", d.DeviceName)
			for _, c := range srv.Clients {
				fmt.Fprintf(&b, "%d.%d\n", c.PID, c.Context)
			}
		}
		return b.String(), false

	case "ps":
		if len(d.Servers) == 0 {
			return "Server not found\n", false
		}
		return psTable(d), false

	case "get_active_thread_percentage":
		pid := cAtoi(arg(0))
		srv := server(d, pid)
		if srv == nil {
			return notFound(pid), false
		}
		return pct(srv.ThreadPercentage), false

	case "set_active_thread_percentage":
		pid := cAtoi(arg(0)) // `set_active_thread_percentage 50`: "Server 50 not found"
		srv := server(d, pid)
		if srv == nil {
			return notFound(pid), false
		}
		p, ok := validPercentage(arg(1))
		changed := ok && p != srv.ThreadPercentage
		if ok {
			srv.ThreadPercentage = p
		}
		return pct(srv.ThreadPercentage), changed

	case "get_device_pinned_mem_limit":
		if len(args) < 2 { // "Invalid command format." goes to control.log only
			return "", false
		}
		pid := cAtoi(arg(0))
		srv := server(d, pid)
		if srv == nil {
			return notFound(pid), false
		}
		return memLine(srv.MemoryLimits[cAtoi(arg(1))]), false

	case "set_device_pinned_mem_limit":
		if len(args) < 3 { // "Invalid command format." goes to control.log only
			return "", false
		}
		pid := cAtoi(arg(0))
		srv := server(d, pid)
		if srv == nil {
			return notFound(pid), false
		}
		return "", setLimit(srv.MemoryLimits, cAtoi(arg(1)), arg(2))

	case "terminate_client":
		pid := cAtoi(arg(0))
		srv := server(d, pid)
		if srv == nil { // measured, the trailing 1 is the status
			return fmt.Sprintf("Server %d not found\nServer %d not found!\n1\n", pid, pid), false
		}
		client, before := cAtoi(arg(1)), len(srv.Clients)
		srv.Clients = slices.DeleteFunc(srv.Clients, func(c simClient) bool { return c.PID == client })
		if len(srv.Clients) == before { // not measured
			return "1\n", false
		}
		return "0\n", true

	case "shutdown_server":
		pid := cAtoi(arg(0)) // no PID: "Server 0 not found" (measured)
		if server(d, pid) == nil {
			return notFound(pid), false
		}
		// A live server shutting down: not measured, modelled as silent.
		d.Servers = slices.DeleteFunc(d.Servers, func(s simServer) bool { return s.PID == pid })
		return "", true

	case "quit":
		*st = nil
		return "", true
	}
	return mps.MsgUnknownCommand + f[0] + "\"\n", false
}

func server(d *simState, pid int) *simServer {
	for i := range d.Servers {
		if d.Servers[i].PID == pid {
			return &d.Servers[i]
		}
	}
	return nil
}

func removeClient(d *simState, pid int) bool {
	for i := range d.Servers {
		srv := &d.Servers[i]
		n := len(srv.Clients)
		srv.Clients = slices.DeleteFunc(srv.Clients, func(c simClient) bool { return c.PID == pid })
		if len(srv.Clients) != n {
			if len(srv.Clients) == 0 {
				// A faulted server turns ACTIVE again once its last client
				// has exited, and serves new clients (mps-probe-fault.txt).
				srv.Fault = false
			}
			return true
		}
	}
	return false
}

func copyLimits(m map[int]units.MiB) map[int]units.MiB {
	out := maps.Clone(m)
	if out == nil {
		out = map[int]units.MiB{}
	}
	return out
}

func pct(p float64) string { return mps.FormatThreadPercentage(p) + "\n" }

func memLine(limit units.MiB) string {
	if s := mps.DisplayMemLimit(limit); s != "" {
		return s + "\n"
	}
	return ""
}

// psTable prints ps as the real control does: fixed-width columns, the
// device as the first 22 characters of its UUID, one row per client.
func psTable(d *simState) string {
	var b strings.Builder
	row := func(cols ...string) {
		fmt.Fprintf(&b, "%-10s%-10s%-15s%-26s%-15s%-15s\n", cols[0], cols[1], cols[2], cols[3], cols[4], cols[5])
	}
	row("PID", "ID", "SERVER", "DEVICE", "NAMESPACE", "COMMAND")
	dev := d.VisibleDevices
	if len(dev) > 22 {
		dev = dev[:22]
	}
	for _, srv := range d.Servers {
		for _, c := range srv.Clients {
			row(strconv.Itoa(c.PID), strconv.Itoa(c.Context), strconv.Itoa(srv.PID), dev, c.Namespace, c.Command)
		}
	}
	return b.String()
}
