package agent

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"yunion.io/x/mps-daemon/pkg/backend"
	"yunion.io/x/mps-daemon/pkg/claim"
	"yunion.io/x/mps-daemon/pkg/entries"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// claimsBackend is a backend that prepares claims (what pkg/dra's driver
// is): it keeps the offers it was made, syncs their rows with the real
// inventory, and answers the claims' own devices it holds.
type claimsBackend struct {
	rows   *backend.Rows
	mu     sync.Mutex
	offers []backend.Offer
	claims []claim.Device
}

func (s *claimsBackend) Sync(ctx context.Context, o backend.Offer) (backend.Answer, error) {
	s.mu.Lock()
	s.offers = append(s.offers, o)
	held := s.claims
	s.mu.Unlock()
	a, err := s.rows.Sync(ctx, o)
	a.ClaimDevices = held
	return a, err
}

func (s *claimsBackend) lastOffer() backend.Offer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.offers[len(s.offers)-1]
}

const claimsAndTwo = `devices:
- path: 0000:1A:00.0
  type: NVIDIA_MPS
  virtual_number: 4
  sharing: claims
- path: GPU-00000001-AAAA-BBBB-CCCC-DDDDDDDDDDDD
  type: NVIDIA_MPS
  virtual_number: 2
`

// A GPU shared by claims runs its control daemon with the whole GPU as the
// default (a claim's client lowers it to its size), the backend is offered
// each planned GPU with the sync, and under enforce the accounting holds
// each claim's processes to its claim's size: the process that pushed a
// claim over is terminated, the other claim's goes on; so is a process
// that dropped its claim's memory limit (MPS would give it the whole GPU)
// before it allocated more than its claim, and one that dropped its thread
// share.
func TestClaimsOfAnySizeAreToldAndAccounted(t *testing.T) {
	h := newHarness(t, "", claimsAndTwo)
	ctx := context.Background()
	inv := &claimsBackend{rows: backend.NewRows(ctx, h.inv, "", nil)}
	killer := &signals{}
	h.withFakeProc(t, killer)
	var err error
	h.agent, err = New(Options{Config: h.cfg, Backend: h.backend, Runner: h.runner, Devices: inv, SysfsRoot: h.dir + "/nosys", DevRoot: h.dir + "/nodev", Killer: killer})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	g0, g1 := twoGPUs()[0].UUID, twoGPUs()[1].UUID
	offer := inv.lastOffer()
	gpus, spec := offer.GPUs, offer.ClaimSpec
	if len(gpus) != 2 {
		t.Fatalf("the backend was offered %d GPUs, want 2", len(gpus))
	}
	a, b := gpus[0], gpus[1]
	if len(a.Devices) != 1 || len(b.Devices) != 2 {
		t.Fatalf("offered %d and %d devices, want 1 (GPU 0 whole) and 2 (GPU 1 in two)", len(a.Devices), len(b.Devices))
	}
	if ad := a.Devices[0]; ad.GPU.UUID != g0 || !a.Sharing.Claims() || a.VirtualNumber != 4 || !a.Healthy || ad.MemoryLimit != h200Memory || ad.ThreadPercentage != 100 || ad.PipeDir != h.pipeDir(0) {
		t.Errorf("GPU 0 as offered: %+v", a)
	}
	if bd := b.Devices[1]; bd.GPU.UUID != g1 || b.Sharing.Claims() || b.VirtualNumber != 2 || bd.MemoryLimit != h200Memory/2 || bd.Index != 1 {
		t.Errorf("GPU 1 as offered: %+v", b)
	}
	if spec.CDI.Dir != h.cfg.Host.CDIDirectory || spec.Identity != entries.IdentityStore(h.cfg.Host.StateDirectory) {
		t.Errorf("where claims' entries go: %+v", spec)
	}
	if offer.Host != "node-1" {
		t.Errorf("offered host %q, want node-1", offer.Host)
	}
	def, err := mps.NewController(h.runner, mps.Env{PipeDir: h.pipeDir(0)}, 5e9, nil).Defaults(ctx)
	if err != nil || def.MemoryLimit < h200Memory-1024 || def.ThreadPercentage != 100 {
		t.Errorf("GPU 0's control daemon defaults %+v (%v), want the whole GPU", def, err)
	}

	const gib = 1 << 30
	inv.mu.Lock()
	inv.claims = []claim.Device{
		{Device: vdev.Device{GPU: gpu.Info{UUID: g0}, Index: claim.IndexBase, MemoryLimit: 20 << 10, ThreadPercentage: 100}, Claim: "default/c0", UID: "u0"},
		{Device: vdev.Device{GPU: gpu.Info{UUID: g0}, Index: claim.IndexBase + 1, MemoryLimit: 10 << 10, ThreadPercentage: 100}, Claim: "default/c1", UID: "u1"},
		{Device: vdev.Device{GPU: gpu.Info{UUID: g0}, Index: claim.IndexBase + 2, MemoryLimit: 10 << 10, ThreadPercentage: 30}, Claim: "default/c2", UID: "u2"},
	}
	inv.mu.Unlock()
	// The claims were prepared since: the backend says so (Changed) and the
	// agent reconciles, which takes its answer.
	if err := h.agent.reconcileChanged(ctx); err != nil {
		t.Fatal(err)
	}
	c0, c1, c2 := vdev.NameOf(g0, claim.IndexBase).String(), vdev.NameOf(g0, claim.IndexBase+1).String(), vdev.NameOf(g0, claim.IndexBase+2).String()
	h.addProc(t, 101, 1000, c0)
	h.addProc(t, 102, 2000, c0)
	h.addProc(t, 201, 1500, c1)
	// The claim of 30% of the SMs: 301 dropped its thread share (MPS then
	// gives it the GPU's 100%), 302 kept it.
	h.addProc(t, 301, 1600, c2)
	h.addProc(t, 302, 1700, c2)
	// 401, of the 10 GiB claim, dropped its memory limit: MPS then holds it
	// to the control daemon's, the whole GPU.
	h.addProc(t, 401, 1800, c1)
	// Each process's environment is its claim's CDI entry's, but for what
	// it dropped.
	for pid, env := range map[int]string{
		101: c0 + "\x00" + vdev.EnvMemoryLimit + "=0=20480M", 102: c0 + "\x00" + vdev.EnvMemoryLimit + "=0=20480M",
		201: c1 + "\x00" + vdev.EnvMemoryLimit + "=0=10240M", 401: c1,
		301: c2 + "\x00" + vdev.EnvMemoryLimit + "=0=10240M",
		302: c2 + "\x00" + vdev.EnvMemoryLimit + "=0=10240M\x00" + vdev.EnvThreadPercentage + "=30",
	} {
		env = "PATH=/usr/bin\x00" + vdev.EnvVar + "=" + env + "\x00"
		if err := os.WriteFile(filepath.Join(h.cfg.Host.ProcRoot, strconv.Itoa(pid), "environ"), []byte(env), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, pid := range []int{101, 102, 201, 301, 302, 401} {
		if _, err := h.runner.AddClient(h.pipeDir(0), pid); err != nil {
			t.Fatal(err)
		}
	}
	h.backend.mu.Lock()
	h.backend.procs = map[gpu.UUID][]gpu.Process{g0: {{PID: 101, UsedMemoryBytes: 12 * gib}, {PID: 102, UsedMemoryBytes: 12 * gib}, {PID: 201, UsedMemoryBytes: 9 * gib},
		{PID: 301, UsedMemoryBytes: gib}, {PID: 302, UsedMemoryBytes: gib}, {PID: 401, UsedMemoryBytes: gib / 2}}}
	h.backend.mu.Unlock()
	h.agent.account(ctx)
	clients, err := mps.NewController(h.runner, mps.Env{PipeDir: h.pipeDir(0)}, 5e9, nil).ClientServers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for pid, wantThere := range map[int]bool{101: true, 102: false, 201: true, 301: false, 302: true, 401: false} {
		if _, there := clients[pid]; there != wantThere {
			t.Errorf("client %d connected=%v after enforcement, want %v", pid, there, wantThere)
		}
	}
	// /status shows the claims beside the devices: size, GPU, clients and
	// memory of the tick, escapes.
	claims := h.agent.Status().Claims
	if len(claims) != 3 {
		t.Fatalf("/status claims: %+v", claims)
	}
	for i, want := range []struct {
		claim, device      string
		capMiB, usedGiB    int
		clients, escapes   int
		overCap, threads30 bool
	}{
		{"default/c0", c0, 20 << 10, 24, 2, 0, true, false},
		{"default/c1", c1, 10 << 10, 9, 2, 1, false, false},
		{"default/c2", c2, 10 << 10, 2, 2, 1, false, true},
	} {
		c := claims[i]
		if c.Claim != want.claim || c.Name != want.device || c.GPU != g0.String() || c.GPUIndex != 0 || int(c.MemoryLimit.MiB()) != want.capMiB ||
			!c.Measured || c.Clients != want.clients || c.UsedBytes>>30 != units.Bytes(want.usedGiB) || c.Escapes != want.escapes || c.OverCap != want.overCap ||
			(c.ThreadPercentage == 30) != want.threads30 || !c.Healthy || c.UID == "" {
			t.Errorf("/status claim %d: %+v, want %+v", i, c, want)
		}
	}
	st := h.agent.Status().Accounting
	if st == nil || len(st.Unknown) != 0 {
		t.Fatalf("claims' processes taken for unknown: %+v", st)
	}
	if len(st.QoSEscapes) != 2 || st.QoSEscapes[0].PID != 301 || st.QoSEscapes[1].PID != 401 ||
		!strings.Contains(st.QoSEscapes[1].Reason, "its control daemon's 143771 MiB, its device's cap is 10240 MiB") {
		t.Errorf("the escapes are not the claim's client without its thread share and the one without its memory limit: %+v", st.QoSEscapes)
	}
}
