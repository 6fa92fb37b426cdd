package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/pkg/backend"
	"yunion.io/x/mps-daemon/pkg/claim"
	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/nri"
	"yunion.io/x/mps-daemon/pkg/status"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// Each station of the row alone: handed a round as the stages before it
// would leave it, it does its part, hands on what the stages after it
// take, and fills its part of /status.

// roundOf is a full round of h's plan, every GPU healthy, nothing listed.
func (h *harness) roundOf(t *testing.T) *round {
	t.Helper()
	p, gpus, err := h.agent.plan(context.Background(), h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := newRound(h.cfg, p, gpus, true, nil)
	for _, gp := range p.GPUs {
		r.gpus = append(r.gpus, status.GPU{UUID: gp.GPU.UUID.String(), Healthy: true})
	}
	return r
}

// answering is a backend that answers what it is set to, and keeps the
// offer.
type answering struct {
	offer  backend.Offer
	answer backend.Answer
	err    error
}

func (b *answering) Sync(_ context.Context, o backend.Offer) (backend.Answer, error) {
	b.offer = o
	return b.answer, b.err
}

// The devices station offers the plan (GPU 0 of four, GPU 1 of two) and
// keeps the holdings: a planned device with its id and holder, one out of
// the plan held (its caps as the backend holds them), a claim's own
// device; it lists them in /status; a failed sync leaves them and says the
// backend is unreachable.
func TestTheDevicesStationAlone(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	g0, g1 := twoGPUs()[0].UUID, twoGPUs()[1].UUID
	gone := vdev.NameOf("GPU-0000000f-aaaa-bbbb-cccc-dddddddddddd", 3)
	b := &answering{answer: backend.Answer{HostID: "host-1", Devices: []backend.Holding{
		{Name: vdev.NameOf(g0, 0), ID: "d0", Holder: "pod-a", Healthy: true},
		{Name: vdev.NameOf(g1, 1), ID: "d1", Healthy: true},
		{Name: gone, ID: "d9", Holder: "pod-b", PendingRemoval: true, MemoryLimit: 1024, ThreadPercentage: 25},
	}, ClaimDevices: []claim.Device{{Device: vdev.Device{GPU: gpu.Info{UUID: g1}, Index: claim.IndexBase, MemoryLimit: 2048, ThreadPercentage: 50}, Claim: "default/c", UID: "u"}}}}
	opts := Options{Devices: b}
	d := &devicesStation{opts: &opts, log: h.agent.log}
	r := h.roundOf(t)
	r.claimSpec.CDI.Kind = "as-the-entries-left-it"
	if err := d.sync(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if len(b.offer.GPUs) != 2 || len(b.offer.GPUs[0].Devices) != 4 || len(b.offer.GPUs[1].Devices) != 2 || b.offer.GPUs[1].Sharing != config.SharingSlices ||
		b.offer.Host != "node-1" || b.offer.ClaimSpec.CDI.Kind != "as-the-entries-left-it" {
		t.Errorf("offered %+v", b.offer)
	}
	if l := r.listed[gone]; l.Device.GPU.UUID != "GPU-0000000f-aaaa-bbbb-cccc-dddddddddddd" || l.Device.MemoryLimit != 1024 || l.Device.GPU.Index != -1 || l.Holder != "pod-b" || l.ClassKnown {
		t.Errorf("the device out of the plan as listed: %+v", l)
	}
	if l := r.listed[vdev.NameOf(g0, 0)]; l.Device.MemoryLimit != units.MiB(h200Memory/4) || !l.ClassKnown || l.ID != "d0" {
		t.Errorf("a planned device as listed: %+v", l)
	}
	var st status.Status
	d.status(&st)
	if st.HostID != "host-1" || st.VirtualDevices != 6 || !st.InventoryReachable || len(st.Devices) != 3 || len(st.Claims) != 1 {
		t.Fatalf("status %+v", st)
	}
	if dev := st.Devices[2]; dev.Name != gone.String() || !dev.PendingRemoval || dev.Guest != "pod-b" || dev.GPUIndex != -1 {
		t.Errorf("the held device in the status: %+v", dev)
	}
	if c := st.Claims[0]; c.Claim != "default/c" || c.GPUIndex != 1 || !c.Healthy || int(c.MemoryLimit.MiB()) != 2048 {
		t.Errorf("the claim in the status: %+v", c)
	}
	if len(d.claims) != 1 || d.claims[0].Index != claim.IndexBase {
		t.Errorf("the claims' devices for the accounting: %+v", d.claims)
	}

	b.err = errors.New("inventory away")
	if err := d.sync(context.Background(), h.roundOf(t)); err == nil {
		t.Fatal("a failed sync succeeded")
	}
	st = status.Status{}
	d.status(&st)
	if st.InventoryReachable || st.VirtualDevices != 0 || len(st.Devices) != 3 || len(d.listed) != 3 {
		t.Errorf("after a failed sync: %+v, listed %d", st, len(d.listed))
	}
}

// The entries station chooses the view once a round (the library missing
// here: the devices go without it), hands the claims' spec on with it, and
// writes the spec of every healthy GPU's devices and the held device out
// of the plan; a GPU that is not healthy has no entries.
func TestTheEntriesStationAlone(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	e := &entriesStation{opts: &h.agent.opts, log: h.agent.log, host: h.agent.entries.host}
	r := h.roundOf(t)
	r.gpus[1].Healthy = false
	held := vdev.Device{GPU: twoGPUs()[1], Index: 5, MemoryLimit: 1024, ThreadPercentage: 10}
	r.listed = map[vdev.Name]listed{held.Name(): {Device: held, ID: "5a1e0000-0000-4000-8000-000000000005", Holder: "pod-a", PendingRemoval: true}}
	if err := e.ahead(context.Background(), r); err != nil || r.identities == nil {
		t.Fatalf("ahead: %v", err)
	}
	if err := e.write(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	var st status.Status
	e.status(&st)
	if st.CDI == nil || st.CDI.Error != "" {
		t.Fatalf("the CDI spec: %+v", st.CDI)
	}
	if !r.viewChosen || r.view.On() || r.claimSpec.CDI.Dir != h.cfg.Host.CDIDirectory || r.claimSpec.Identity != e.host.Identity {
		t.Errorf("the view %+v and the claims' spec %+v handed on", r.view, r.claimSpec)
	}
	spec, err := os.ReadFile(filepath.Join(h.cfg.Host.CDIDirectory, "yunion.io-mps-gpu.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{vdev.NameOf(twoGPUs()[0].UUID, 3).String(), held.Name().String(), "5a1e0000-0000-4000-8000-000000000005"} {
		if !strings.Contains(string(spec), "name: "+want+"\n") {
			t.Errorf("the spec lacks the entry %s", want)
		}
	}
	if strings.Contains(string(spec), vdev.NameOf(twoGPUs()[1].UUID, 0).String()) {
		t.Error("a GPU that is not healthy has entries")
	}
	if st.CDI.Devices != 5 || st.CDI.Error != "" || st.View == nil || st.View.State != status.ViewMissing {
		t.Errorf("status: cdi %+v, view %+v", st.CDI, st.View)
	}
	if !e.identitiesMade {
		t.Error("the start's identity files not made ahead")
	}
	if p, _ := e.host.Identity.Path(held.Name()); p == "" || !exists(p) {
		t.Errorf("the held device's identity file %q", p)
	}
	// Nothing created, nothing held out of the plan: no second write.
	spec0, _ := os.ReadFile(filepath.Join(h.cfg.Host.CDIDirectory, "yunion.io-mps-gpu.yaml"))
	r.listed = nil
	if err := e.rewrite(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if spec1, _ := os.ReadFile(filepath.Join(h.cfg.Host.CDIDirectory, "yunion.io-mps-gpu.yaml")); string(spec1) != string(spec0) {
		t.Error("rewrite wrote with nothing created or held")
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// The MPS station prepares every planned GPU (its control daemon up, its
// defaults the plan's) and hands their status on; out of the plan and
// unused, a GPU's daemon is stopped.
func TestTheMPSStationAlone(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	m := h.agent.mps
	r := h.roundOf(t)
	r.gpus = nil
	if err := m.prepare(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if len(r.errs) != 0 || len(r.gpus) != 2 || !r.gpus[0].Healthy || !r.gpus[0].Enforced || r.gpus[0].MemoryLimit != units.MiB(h200Memory/4) {
		t.Fatalf("prepared %+v (%v)", r.gpus, r.errs)
	}
	if _, ok := r.priorities[twoGPUs()[1].UUID]; !ok {
		t.Error("no control daemon priority handed on")
	}
	// The control reads limits back in whole GiB (docs/gpu-runs).
	if def, err := h.controlDefaults(1); err != nil || mps.DisplayMemLimit(def.MemoryLimit) != mps.DisplayMemLimit(units.MiB(h200Memory/2)) {
		t.Errorf("GPU 1's daemon holds %+v (%v)", def, err)
	}
	var st status.Status
	m.status(&st)
	if len(st.GPUs) != 2 || len(st.Retiring) != 0 {
		t.Errorf("status %+v", st.GPUs)
	}
	// GPU 1 out of the plan, nothing held, no client: retired.
	h.cfg.Devices = mustDevices(t, h.dir, onlyGPU0)
	r = h.roundOf(t)
	if err := m.retire(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if _, err := h.controlDefaults(1); err == nil {
		t.Error("GPU 1's control daemon still answers after its retirement")
	}
}

// The NRI station hands the plugin, in the single layout, the pipe root
// and, by GPU and holder, the devices each holder of the holdings keeps on
// a planned GPU, each with its identity file; a free device, and one of a
// GPU out of the plan, are not handed. Without a plugin it does nothing.
func TestTheNRIStationAlone(t *testing.T) {
	h := newHarness(t, "mps_pipe_layout: single\n", fourAndTwo)
	plugin := nri.New(filepath.Join(h.dir, "nri.sock"), nil)
	n := &nriStation{plugin: plugin, entries: h.agent.entries}
	r := h.roundOf(t)
	g0 := twoGPUs()[0]
	slice := func(i int) vdev.Device {
		return vdev.Device{GPU: g0, Index: i, MemoryLimit: 1024, ThreadPercentage: 25}
	}
	elsewhere := vdev.Device{GPU: gpu.Info{UUID: "GPU-0000000f-aaaa-bbbb-cccc-dddddddddddd", Index: -1}, Index: 1, MemoryLimit: 1024}
	r.listed = map[vdev.Name]listed{
		slice(2).Name():  {Device: slice(2), ID: "d2", Holder: "server-a", ClassKnown: true},
		slice(0).Name():  {Device: slice(0), ID: "d0", Holder: "server-a", ClassKnown: true},
		slice(1).Name():  {Device: slice(1), ID: "d1"},
		elsewhere.Name(): {Device: elsewhere, ID: "d9", Holder: "server-b"},
	}
	if err := n.publish(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	d := plugin.Devices()
	if d.PipeRoot != h.cfg.Host.CudaMPSPipeDirectory || d.CDI.Dir != h.cfg.Host.CDIDirectory {
		t.Errorf("pipe root %q, CDI options %+v", d.PipeRoot, d.CDI)
	}
	if len(d.Held) != 1 || len(d.Held[g0.UUID]) != 1 {
		t.Fatalf("held %+v: want server-a's two slices of GPU 0 alone", d.Held)
	}
	got := d.Held[g0.UUID]["server-a"]
	if len(got) != 2 {
		t.Fatalf("server-a's slices %+v", got)
	}
	for _, dev := range got {
		want, _ := h.agent.entries.host.Identity.Path(dev.Name())
		if dev.IdentityFile != want || dev.ViewDir != "" || dev.PipeDir != h.cfg.Host.CudaMPSPipeDirectory || dev.ID == "" {
			t.Errorf("%s as handed: %+v", dev.Name(), dev)
		}
	}
	if err := (&nriStation{entries: h.agent.entries}).publish(context.Background(), r); err != nil {
		t.Errorf("without a plugin: %v", err)
	}
}
