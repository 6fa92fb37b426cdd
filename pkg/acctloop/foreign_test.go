package acctloop

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/accounting"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/mps"
)

// control records the limits put back on servers.
type control struct {
	accounting.Terminator
	set   map[int]mps.Limits
	calls int
	err   error
}

func (c *control) SetServerLimits(_ context.Context, server int, l mps.Limits) error {
	c.calls++
	if c.err != nil {
		return c.err
	}
	c.set[server] = l
	return nil
}

// A command another program sent that changed a server's thread share or
// pinned memory has the server's limits put back, once a server, on every
// GPU of that control log's daemon; a command that changes no limit, or a
// GPU not enforced, is left alone, and a failure to put them back is only
// logged.
func TestForeignLimitsPutBack(t *testing.T) {
	a, b := &control{set: map[int]mps.Limits{}}, &control{set: map[int]mps.Limits{}}
	want := mps.Limits{MemoryLimit: 4096, ThreadPercentage: 50}
	in := Inputs{Logs: map[string][]gpu.UUID{"/p/control.log": {gpuA, gpuB}}, Controls: map[gpu.UUID]Control{gpuA: a},
		Limits: map[gpu.UUID]mps.Limits{gpuA: want}}
	l := New(Options{})
	p := newPutBacks(time.Second)
	now := time.Unix(1_800_000_000, 0)
	p.changed("/p/control.log", []mps.Command{
		{Name: "set_active_thread_percentage", Server: 42, Line: "set_active_thread_percentage 42 10"},
		{Name: "set_device_pinned_mem_limit", Server: 42, Line: "set_device_pinned_mem_limit 42 0 99G"},
		{Name: "get_server_list", Line: "get_server_list"},
		{Name: "shutdown_server", Server: 43, Line: "shutdown_server 43"},
	})
	if _, pending := l.undoForeign(context.Background(), in, p, now); pending {
		t.Errorf("a put-back left pending after the first change")
	}
	if len(a.set) != 1 || a.set[42] != want || a.calls != 1 || len(b.set) != 0 {
		t.Errorf("put back: GPU A %v (%d calls), GPU B %v; want server 42 to %+v on A alone, once", a.set, a.calls, b.set, want)
	}
	a.err = errors.New("control daemon away")
	p.changed("/p/control.log", []mps.Command{{Name: "set_active_thread_percentage", Server: 44}})
	l.undoForeign(context.Background(), in, p, now)
	if a.calls != 2 {
		t.Errorf("a failing put-back: %d calls, want it tried", a.calls)
	}
}

// A flood of limit changes to one server (1,000 in a second) costs one
// put-back at once and one when the second is up, which puts back what the
// last of them changed; another server changed meanwhile is put back at
// once, on its own spacing; nothing is left pending or remembered after.
func TestForeignPutBacksSpaced(t *testing.T) {
	a := &control{set: map[int]mps.Limits{}}
	want := mps.Limits{MemoryLimit: 4096, ThreadPercentage: 50}
	const path = "/p/control.log"
	in := Inputs{Logs: map[string][]gpu.UUID{path: {gpuA}}, Controls: map[gpu.UUID]Control{gpuA: a},
		Limits: map[gpu.UUID]mps.Limits{gpuA: want}}
	l := New(Options{})
	p := newPutBacks(time.Second)
	t0 := time.Unix(1_800_000_000, 0)
	var due time.Time
	var pending bool
	for i := range 1000 {
		p.changed(path, []mps.Command{{Name: "set_active_thread_percentage", Server: 42, Line: "set_active_thread_percentage 42 " + strconv.Itoa(i%100)}})
		due, pending = l.undoForeign(context.Background(), in, p, t0.Add(time.Duration(i)*time.Millisecond))
	}
	if a.calls != 1 || !pending || !due.Equal(t0.Add(time.Second)) {
		t.Fatalf("after 1,000 changes in a second: %d put-backs, pending %v until %v; want 1, and the next at %v", a.calls, pending, due, t0.Add(time.Second))
	}
	if p.pending[serverOf{path, 42}].Line != "set_active_thread_percentage 42 99" {
		t.Errorf("pending for the log line: %+v, want the last change", p.pending[serverOf{path, 42}])
	}
	p.changed(path, []mps.Command{{Name: "set_device_pinned_mem_limit", Server: 43}})
	if due, _ = l.undoForeign(context.Background(), in, p, t0.Add(500*time.Millisecond)); a.calls != 2 || a.set[43] != want || !due.Equal(t0.Add(time.Second)) {
		t.Errorf("another server changed meanwhile: %d put-backs (want 2), server 43 %+v, next %v", a.calls, a.set[43], due)
	}
	if _, pending = l.undoForeign(context.Background(), in, p, t0.Add(999*time.Millisecond)); a.calls != 2 || !pending {
		t.Errorf("before the second is up: %d put-backs, pending %v; want 2, pending", a.calls, pending)
	}
	if _, pending = l.undoForeign(context.Background(), in, p, t0.Add(time.Second)); a.calls != 3 || pending || a.set[42] != want {
		t.Errorf("when the second is up: %d put-backs, pending %v, server 42 %+v; want 3, none pending", a.calls, pending, a.set[42])
	}
	l.undoForeign(context.Background(), in, p, t0.Add(2*time.Second))
	if a.calls != 3 || len(p.pending) != 0 || len(p.last) != 0 {
		t.Errorf("a second later: %d put-backs, %d pending, %d remembered; want 3, none, none", a.calls, len(p.pending), len(p.last))
	}
}
