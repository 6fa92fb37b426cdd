package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The CPU time of the processes a host-sync run involves, from /proc:
// this loader (its clients, and the inventory too when it serves it
// itself), the inventories given by --inventory-pids, and PostgreSQL,
// --db-pid being its postmaster: the postmaster, its live children
// (backends, autovacuum, the WAL writer...) and those it has reaped.

// clockTick is the unit of /proc/<pid>/stat's times (USER_HZ, 100 on
// every Linux this runs on).
const clockTick = 10 * time.Millisecond

// cpuMeter reads the CPU time of the run's processes.
type cpuMeter struct {
	inventories []int
	db          int
}

// cpuUse is CPU time: user + system.
type cpuUse struct {
	self, inventories, db   time.Duration
	haveInventories, haveDB bool
}

func (m *cpuMeter) read() cpuUse {
	u := cpuUse{self: processCPU(), haveInventories: len(m.inventories) > 0, haveDB: m.db > 0}
	for _, pid := range m.inventories {
		own, _ := procCPU(pid)
		u.inventories += own
	}
	if m.db > 0 {
		own, reaped := procCPU(m.db)
		u.db = own + reaped
		for _, child := range childrenOf(m.db) {
			c, _ := procCPU(child)
			u.db += c
		}
	}
	return u
}

// sub is u less an earlier reading. A child of the postmaster that ended
// between the readings moves from live to reaped: counted once either way.
func (u cpuUse) sub(before cpuUse) cpuUse {
	u.self -= before.self
	u.inventories -= before.inventories
	u.db -= before.db
	return u
}

func (u cpuUse) dbString() string {
	if !u.haveDB {
		return "(in the inventory)"
	}
	return fmt.Sprintf("%.1f", u.db.Seconds())
}

func (u cpuUse) inventoriesString() string {
	if !u.haveInventories {
		return "(in this loader)"
	}
	return fmt.Sprintf("%.1f", u.inventories.Seconds())
}

// procCPU is a process's own CPU time and that of its reaped children.
func procCPU(pid int) (own, reaped time.Duration) {
	f := statFields(pid)
	if len(f) < 17 {
		return 0, 0
	}
	tick := func(i int) time.Duration {
		n, _ := strconv.ParseInt(f[i], 10, 64)
		return time.Duration(n) * clockTick
	}
	// Fields 14-17 of stat (utime, stime, cutime, cstime), here counted
	// from field 3 (state), after the command's closing parenthesis.
	return tick(11) + tick(12), tick(13) + tick(14)
}

// statFields are /proc/<pid>/stat's fields after the command name.
func statFields(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	return strings.Fields(s)
}

// childrenOf lists the live children of pid.
func childrenOf(pid int) []int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var out []int
	for _, d := range dirs {
		child, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		if f := statFields(child); len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

// loadAverage is the 1-minute load average.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

// parsePIDs reads a comma-separated list of process ids.
func parsePIDs(s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("process id %q", p)
		}
		out = append(out, n)
	}
	return out, nil
}
