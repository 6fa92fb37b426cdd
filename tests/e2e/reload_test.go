package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/client"
	"yunion.io/x/mps-daemon/pkg/status"
)

// Issue 12: a configuration edit can never hurt a running tenant. These
// tests edit the files of a running daemon (simulated 8 x H100 host, SQLite
// inventory) the ways an operator, an editor or a slow copy do, while
// guests hold devices, and watch the inventory, MPS and the compute modes.

// heldYAML shares three GPUs: 18 in twelve (its N is two digits, so a file
// cut after "virtual_number: 1" is a different, valid plan: the issue's
// 20480 -> 81920 MiB cap change), 2a in two, 3a in three; one entry is
// another agent's.
const heldYAML = `# GPU sharing of this host
devices:
- path: /dev/dri/renderD128
  type: NVIDIA_MPS
  virtual_number: 12
- path: /dev/dri/renderD129
  type: NVIDIA_MPS
  virtual_number: 2
- path: /dev/dri/renderD130
  type: NVIDIA_MPS
  virtual_number: %d
- type: CPH_AMD_GPU
  path: /dev/dri/renderD200
`

// hostEnv is a running host: inventory, daemon, and a client with the
// admin token (the scheduler's part: attach and detach).
type hostEnv struct {
	*env
	url, daemonAddr string
	daemon          *proc
	inv             *client.Client
}

// startHost starts an inventory and a daemon on devices, with extra
// host.conf lines, and waits for the first reconcile.
func startHost(t *testing.T, devices, extraConf string) *hostEnv {
	t.Helper()
	_, url := startInventory(t, "127.0.0.1:0")
	h := &hostEnv{url: url, daemonAddr: freePort(t)}
	h.env = newEnv(t, url, h.daemonAddr)
	if err := os.WriteFile(h.devices, []byte(devices), 0o644); err != nil {
		t.Fatal(err)
	}
	if extraConf != "" {
		f, err := os.OpenFile(h.hostConf, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(extraConf); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	h.daemon = startDaemon(t, h.env)
	eventually(t, "ready", func() (bool, string) {
		code, body := get("http://" + h.daemonAddr + "/readyz")
		return code == http.StatusOK, body + h.daemon.Output()
	})
	h.inv = client.New(client.Options{URL: url, Token: tokenFor(t, url)})
	return h
}

func (h *hostEnv) status(t *testing.T) status.Status {
	t.Helper()
	code, body := get("http://" + h.daemonAddr + "/status")
	if code != http.StatusOK {
		t.Fatalf("/status: %d %s", code, body)
	}
	var st status.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("/status: %v\n%s", err, body)
	}
	return st
}

// devices lists the host's devices by addr.
func (h *hostEnv) devicesByAddr(t *testing.T) (map[string]api.IsolatedDevice, error) {
	l, err := h.inv.ListIsolatedDevices(t.Context(), client.ListOptions{Limit: 200})
	if err != nil {
		return nil, err
	}
	m := map[string]api.IsolatedDevice{}
	for _, d := range l.IsolatedDevices {
		m[d.Addr] = d
	}
	return m, nil
}

func (h *hostEnv) attach(t *testing.T, guest, addr string) api.IsolatedDevice {
	t.Helper()
	devs, err := h.devicesByAddr(t)
	if err != nil {
		t.Fatal(err)
	}
	d, ok := devs[addr]
	if !ok {
		t.Fatalf("no device %s", addr)
	}
	if _, err := h.inv.AttachIsolatedDevice(t.Context(), guest, d.ID); err != nil {
		t.Fatal(err)
	}
	return d
}

// computeModeSets are the GPUs whose compute mode the simulated NVML set,
// "<uuid>=<mode>" in order, from the line the NVML adapter logs for every
// successful call: the simulated host keeps its compute modes in the
// daemon's memory, and this line is its record of every change.
var computeModeSet = regexp.MustCompile(`msg="compute mode set"[^\n]* gpu=(GPU-[0-9a-f-]+) mode=(\S+)`)

func computeModeSets(out string) []string {
	var sets []string
	for _, m := range computeModeSet.FindAllStringSubmatch(out, -1) {
		sets = append(sets, m[1]+"="+m[2])
	}
	return sets
}

var reconciledLine = regexp.MustCompile(`msg=reconciled .*created=(\d+) updated=(\d+) deleted=(\d+)`)

// rewriter rewrites a file in place the ways it happens on a host.
type rewriter struct {
	t    *testing.T
	path string
	rnd  *rand.Rand
	// longest is the longest pause the machine really made: a loaded
	// machine can stretch a 250 ms sleep past the daemon's quiet time.
	longest time.Duration
}

// pause is a random pause of up to 250 ms, the longest pause between the
// chunks of one save that issue 12 asks to ride out.
func (r *rewriter) pause() {
	start := time.Now()
	time.Sleep(time.Duration(r.rnd.IntN(251)) * time.Millisecond)
	r.longest = max(r.longest, time.Since(start))
}

// chunks cuts content at one or two random places; cutAfter, when found,
// is one of them (a file ending in "virtual_number: 1" of a 12).
func (r *rewriter) chunks(content, cutAfter string) []string {
	cuts := map[int]bool{}
	for range 1 + r.rnd.IntN(2) {
		cuts[1+r.rnd.IntN(len(content)-1)] = true
	}
	if i := strings.Index(content, cutAfter); cutAfter != "" && i >= 0 {
		cuts[i+len(cutAfter)] = true
	}
	var at []int
	for c := range cuts {
		at = append(at, c)
	}
	sort.Ints(at)
	var out []string
	prev := 0
	for _, c := range at {
		out = append(out, content[prev:c])
		prev = c
	}
	return append(out, content[prev:])
}

// overwrite opens with O_TRUNC and writes the chunks with pauses between.
func (r *rewriter) overwrite(content, cutAfter string) {
	f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		r.t.Fatal(err)
	}
	defer f.Close()
	for i, c := range r.chunks(content, cutAfter) {
		if i > 0 {
			r.pause()
		}
		if _, err := f.WriteString(c); err != nil {
			r.t.Fatal(err)
		}
	}
}

// truncateAppend truncates, then appends each chunk with its own open, as
// `: > f; cat part >> f` does: every chunk ends with a close.
func (r *rewriter) truncateAppend(content, cutAfter string) {
	if err := os.Truncate(r.path, 0); err != nil {
		r.t.Fatal(err)
	}
	for _, c := range r.chunks(content, cutAfter) {
		r.pause()
		f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			r.t.Fatal(err)
		}
		if _, err := f.WriteString(c); err != nil {
			r.t.Fatal(err)
		}
		f.Close()
	}
}

// shell is issue 12's reproduction, verbatim but for the file names.
func (r *rewriter) shell(content string) {
	good := r.path + ".good"
	if err := os.WriteFile(good, []byte(content), 0o644); err != nil {
		r.t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `( : > "$1"; sleep 0.1; cat "$2" >> "$1" )`, "sh", r.path, good)
	if out, err := cmd.CombinedOutput(); err != nil {
		r.t.Fatalf("%v: %s", err, out)
	}
}

// atomic saves as editors do: a new file renamed over the old one.
func (r *rewriter) atomic(content string) {
	tmp := filepath.Join(filepath.Dir(r.path), ".devices.yml.swp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		r.t.Fatal(err)
	}
	if err := os.Rename(tmp, r.path); err != nil {
		r.t.Fatal(err)
	}
}

// The proof: 100 in-place rewrites with random pauses of up to
// 250 ms, while guests hold devices, end in exactly the final file's plan;
// on the way no device of a held GPU changes its cap or id, nothing is
// created or deleted, no control daemon starts and no compute mode of a GPU
// outside the configuration is touched.
func TestRewritesInPlaceNeverReachMPSOrTheInventory(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 12))
	start := fmt.Sprintf(heldYAML, 3)
	h := startHost(t, start, "")
	eventually(t, "17 devices", func() (bool, string) {
		devs, err := h.devicesByAddr(t)
		return err == nil && len(devs) == 17, fmt.Sprint(len(devs), err)
	})
	h.attach(t, "vm-1", "18:00.0-0")
	h.attach(t, "vm-1", "18:00.0-5")
	h.attach(t, "vm-2", "2a:00.0-1")
	before, err := h.devicesByAddr(t)
	if err != nil {
		t.Fatal(err)
	}
	if d := before["18:00.0-0"]; d.MPSMemoryLimit != 81920/12 || d.GuestID != "vm-1" {
		t.Fatalf("18:00.0-0 before: %+v", d)
	}
	configured := map[string]bool{}
	var gpu3a string
	for _, g := range h.status(t).GPUs {
		configured[g.UUID] = true
		if strings.Contains(g.PCI.String(), ":3a:00.0") {
			gpu3a = g.UUID
		}
	}
	startupOutput := h.daemon.Output()
	sets := computeModeSets(startupOutput)
	if len(sets) != 3 {
		t.Fatalf("compute mode set %v at start, want the 3 configured GPUs", sets)
	}
	cdiSpec := filepath.Join(h.dir, "cdi", "yunion.io-mps-gpu.yaml")
	spec0, err := os.ReadFile(cdiSpec)
	if err != nil {
		t.Fatal(err)
	}

	// Watch the inventory and the CDI spec while the file is rewritten.
	var mu sync.Mutex
	var seen []string
	// final is set when the final file is being written: from then on
	// GPU 3a's devices may also be as the final plan has them.
	var final atomic.Bool
	finalOK := func(addr string, d api.IsolatedDevice, present bool) bool {
		if !final.Load() || !strings.HasPrefix(addr, "3a:") {
			return false
		}
		if addr == "3a:00.0-2" {
			return !present
		}
		return present && d.ID == before[addr].ID && d.MPSMemoryLimit == 40960 && d.MPSThreadPercentage == 50
	}
	note := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) < 20 {
			seen = append(seen, fmt.Sprintf(format, args...))
		}
	}
	stop := make(chan struct{})
	watched := make(chan int, 1)
	go func() {
		polls := 0
		defer func() { watched <- polls }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			polls++
			now, err := h.devicesByAddr(t)
			if err != nil {
				note("listing: %v", err)
				continue
			}
			for addr, d := range now {
				b, ok := before[addr]
				switch {
				case !ok:
					note("created %s (%s)", addr, d.ID)
				case finalOK(addr, d, true):
				case b.ID != d.ID || b.MPSMemoryLimit != d.MPSMemoryLimit || b.MPSThreadPercentage != d.MPSThreadPercentage || b.PendingRemoval != d.PendingRemoval:
					note("%s changed: id %s -> %s, cap %d -> %d MiB, threads %d -> %d, pending removal %v", addr, b.ID, d.ID, b.MPSMemoryLimit, d.MPSMemoryLimit, b.MPSThreadPercentage, d.MPSThreadPercentage, d.PendingRemoval)
				}
			}
			for addr := range before {
				if _, ok := now[addr]; !ok && !finalOK(addr, api.IsolatedDevice{}, false) {
					note("deleted %s", addr)
				}
			}
			if spec, err := os.ReadFile(cdiSpec); !final.Load() && (err != nil || string(spec) != string(spec0)) {
				note("CDI spec changed (%v)", err)
			}
		}
	}()

	r := &rewriter{t: t, path: h.devices, rnd: rnd}
	styles := map[string]int{}
	for i := range 99 {
		style := []string{"overwrite", "truncate-append", "atomic", "shell"}[rnd.IntN(4)]
		if i%10 == 3 {
			style = "overwrite-cut-in-a-number"
		}
		styles[style]++
		switch style {
		case "overwrite":
			r.overwrite(start, "")
		case "overwrite-cut-in-a-number":
			r.overwrite(start, "virtual_number: 1")
		case "truncate-append":
			r.truncateAppend(start, "virtual_number: 1")
		case "atomic":
			r.atomic(start)
		case "shell":
			r.shell(start)
		}
		r.pause()
	}
	// The 100th: GPU 3a (free) from three devices to two.
	final.Store(true)
	r.overwrite(fmt.Sprintf(heldYAML, 2), "")
	t.Logf("rewrites: %v", styles)
	reloadsBefore := strings.Count(h.daemon.Output(), "configuration reloaded")
	eventually(t, "the final plan", func() (bool, string) {
		devs, err := h.devicesByAddr(t)
		// The reconcile logs its line after the inventory has changed: wait
		// for the line too before counting what it did.
		logged := strings.Contains(h.daemon.Output()[len(startupOutput):], "deleted=1")
		return err == nil && len(devs) == 16 && logged, fmt.Sprint(len(devs), err, logged)
	})
	close(stop)
	t.Logf("inventory and CDI spec checked %d times during the rewrites", <-watched)

	mu.Lock()
	for _, s := range seen {
		t.Errorf("during the rewrites: %s", s)
	}
	mu.Unlock()
	// A reload during the rewrites is harmless only if it changed nothing:
	// a file cut where the plan stays the same. Every limit change must be
	// the final one (GPU 3a).
	t.Logf("reloads during the rewrites: %d; longest real pause between chunks: %v", reloadsBefore, r.longest)
	out := h.daemon.Output()
	if n := strings.Count(out, `msg="MPS limits changed"`); n != 1 || !strings.Contains(out, `msg="MPS limits changed" component=agent gpu=`+gpu3a) {
		t.Errorf("MPS limits changed %d times, want once, on GPU 3a for the final plan (longest real pause %v)", n, r.longest)
	}
	created, deleted := 0, 0
	for _, m := range reconciledLine.FindAllStringSubmatch(out[len(startupOutput):], -1) {
		var c, d int
		fmt.Sscan(m[1], &c)
		fmt.Sscan(m[3], &d)
		created += c
		deleted += d
	}
	if created != 0 || deleted != 1 {
		t.Errorf("after start the daemon created %d and deleted %d devices; want 0 and 1 (3a:00.0-2)", created, deleted)
	}
	for _, s := range computeModeSets(out) {
		if !configured[strings.SplitN(s, "=", 2)[0]] {
			t.Errorf("compute mode of a GPU outside the configuration set: %s", s)
		}
	}
	if got := computeModeSets(out); len(got) != 3 {
		t.Errorf("compute modes set %v; only the 3 at start", got)
	}
	if n := strings.Count(out, "started MPS control daemon"); n != 3 {
		t.Errorf("%d MPS control daemons started, want the 3 configured GPUs' at start", n)
	}
	pipes, _ := os.ReadDir(filepath.Join(h.dir, "pipe"))
	if len(pipes) != 3 {
		t.Errorf("pipe directories %v, want the 3 configured GPUs'", pipes)
	}

	// Exactly the final plan: 3a's third device gone, its others at half
	// the GPU, everything else as before, held devices where they were.
	after, err := h.devicesByAddr(t)
	if err != nil {
		t.Fatal(err)
	}
	for addr, b := range before {
		a, ok := after[addr]
		switch {
		case addr == "3a:00.0-2":
			if ok {
				t.Errorf("3a:00.0-2 still there")
			}
		case !ok:
			t.Errorf("%s gone", addr)
		case a.ID != b.ID || a.GuestID != b.GuestID:
			t.Errorf("%s: id %s -> %s, guest %q -> %q", addr, b.ID, a.ID, b.GuestID, a.GuestID)
		case strings.HasPrefix(addr, "3a:") && a.MPSMemoryLimit != 40960:
			t.Errorf("%s cap %d MiB, want 40960", addr, a.MPSMemoryLimit)
		case !strings.HasPrefix(addr, "3a:") && a.MPSMemoryLimit != b.MPSMemoryLimit:
			t.Errorf("%s cap %d -> %d MiB", addr, b.MPSMemoryLimit, a.MPSMemoryLimit)
		}
	}
}
