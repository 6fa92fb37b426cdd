package agent

import (
	"cmp"
	"context"
	"log/slog"
	"sync"

	"yunion.io/x/mps-daemon/pkg/backend"
	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/metrics"
	"yunion.io/x/mps-daemon/pkg/status"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// devicesStation is the agent's one edge to its backend (pkg/backend:
// mps-inventory, a Cloudpods region or Kubernetes): each reconcile offers
// it the plan per GPU and takes back what it holds, which the station
// keeps (the devices' ids and holders, the claims' own devices) for the
// CDI spec, the retirement of GPUs and the accounting. Its part of /status
// is the host's record and its devices and claims. Loop-owned but for that
// part.
type devicesStation struct {
	opts *Options // the agent's: its backend (Devices)
	log  *slog.Logger
	// hostID is the backend's id of the host; listed its devices as the
	// last sync left them; claims the claims' own devices it answered.
	hostID string
	listed map[vdev.Name]listed
	claims []vdev.Device

	mu sync.Mutex
	st struct {
		hostID, hostName string
		devices          []status.Device
		claims           []status.Claim
		virtual          int
		reachable        bool
	}
}

// listed is a virtual device as the backend holds it after a sync.
type listed struct {
	// Device is the device as planned or, for one out of the plan that a
	// holder still keeps, as the backend holds it (its class as it was
	// last planned, ClassShared when that is not known).
	Device vdev.Device
	// ClassKnown is false for a device out of the plan whose class was
	// never seen by this process (the backend does not hold it).
	ClassKnown bool
	ID         string
	// Holder holds the device (a guest, a claim); empty when free.
	Holder         string
	Healthy        bool
	PendingRemoval bool
	CDIName        string
}

// status fills the station's part of /status.
func (d *devicesStation) status(st *status.Status) {
	d.mu.Lock()
	defer d.mu.Unlock()
	st.HostID, st.HostName = d.st.hostID, d.st.hostName
	st.Devices = append([]status.Device(nil), d.st.devices...)
	st.Claims = append([]status.Claim(nil), d.st.claims...)
	st.VirtualDevices, st.InventoryReachable = d.st.virtual, d.st.reachable
}

// sync is the backend's stage: the plan's GPUs offered (their devices
// unhealthy where their GPU is) with where claims' entries go (the
// reconcile's view), and what the backend then holds kept, in r for the
// stages after it and in the status. A failure leaves what it held before
// as it was, the backend unreachable.
func (d *devicesStation) sync(ctx context.Context, r *round) error {
	var err error
	if r.host, err = HostName(r.cfg.Host); err != nil {
		return d.failed(withKind(metrics.ErrorInventory, err))
	}
	offer := backend.Offer{Host: r.host, GPUs: offerGPUs(r), ClaimSpec: r.claimSpec}
	answer, err := d.opts.Devices.Sync(ctx, offer)
	if answer.HostID != "" && answer.HostID != d.hostID {
		d.hostID = answer.HostID
		d.mu.Lock()
		d.st.hostID, d.st.hostName = answer.HostID, r.host
		d.mu.Unlock()
	}
	if err != nil {
		return d.failed(withKind(metrics.ErrorInventory, err))
	}
	r.answer = answer
	byName := map[vdev.Name]vdev.Device{}
	for _, devs := range r.planned {
		for _, dev := range devs {
			byName[dev.Name()] = dev
		}
	}
	listed, order := byNameOf(answer.Devices, byName, r)
	d.listed, r.listed, r.desired = listed, listed, len(byName)
	d.claims = nil
	for _, c := range answer.ClaimDevices {
		d.claims = append(d.claims, c.Device)
	}
	healthy := map[gpu.UUID]bool{}
	for i, gp := range r.plan.GPUs {
		healthy[gp.GPU.UUID] = r.gpus[i].Healthy
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	before := map[string]bool{}
	for _, s := range d.st.devices {
		before[s.Name] = true
	}
	for _, c := range d.st.claims {
		before[c.Name] = true
	}
	d.st.devices, d.st.claims = nil, nil
	r.remaining = map[string]bool{}
	for _, name := range order {
		s := deviceStatus(name, listed[name], r.planned)
		r.remaining[s.Name] = before[s.Name]
		d.st.devices = append(d.st.devices, s)
	}
	for _, c := range answer.ClaimDevices {
		gi := -1
		if _, ok := r.planned[c.GPU.UUID]; ok {
			gi = r.present[c.GPU.UUID].Index
		}
		s := status.Claim{Claim: c.Claim, UID: c.UID, Device: status.Device{
			Name: c.Name().String(), GPU: c.GPU.UUID.String(), GPUIndex: gi, MemoryLimit: c.MemoryLimit.Bytes(),
			ThreadPercentage: c.ThreadPercentage, ClientPriority: c.Class.ClientPriority(), Healthy: healthy[c.GPU.UUID], CDIName: c.CDIName,
		}}
		r.remaining[s.Name] = before[s.Name]
		d.st.claims = append(d.st.claims, s)
	}
	d.st.virtual, d.st.reachable = r.desired, true
	return nil
}

// failed records a failed sync in the status: no device offered, the
// backend unreachable.
func (d *devicesStation) failed(err error) error {
	d.mu.Lock()
	d.st.virtual, d.st.reachable = 0, false
	d.mu.Unlock()
	return err
}

// offerGPUs are the plan's GPUs as the backend is offered them: each with
// how it is shared, its virtual_number and health, and its devices as the
// CDI spec makes their entries, from which a backend of rows makes its rows
// and one that prepares claims of any size (Kubernetes) makes each claim's
// own device.
func offerGPUs(r *round) []backend.GPU {
	gpus := make([]backend.GPU, 0, len(r.plan.GPUs))
	for i, gp := range r.plan.GPUs {
		if len(gp.Devices) == 0 {
			continue
		}
		g := backend.GPU{Sharing: cmp.Or(gp.Sharing, config.SharingSlices), VirtualNumber: gp.VirtualNumber, Healthy: r.gpus[i].Healthy,
			Devices: make([]cdi.Device, len(gp.Devices))}
		pipe := r.cfg.pipeLog(gp.GPU.UUID).PipeDir
		for j, dev := range gp.Devices {
			g.Devices[j] = cdi.FromVirtual(dev, "", pipe)
		}
		gpus = append(gpus, g)
	}
	return gpus
}

// byNameOf reads the backend's holdings, keyed by device name, and their
// names in the backend's order: a planned device's holding carries that
// device; any other is the device the backend holds (unplannedDevice).
func byNameOf(held []backend.Holding, planned map[vdev.Name]vdev.Device, r *round) (map[vdev.Name]listed, []vdev.Name) {
	out := make(map[vdev.Name]listed, len(held))
	order := make([]vdev.Name, 0, len(held))
	for _, h := range held {
		l := listed{ID: h.ID, Holder: h.Holder, Healthy: h.Healthy, PendingRemoval: h.PendingRemoval, CDIName: h.CDIName}
		if dev, ok := planned[h.Name]; ok {
			l.Device, l.ClassKnown = dev, true
		} else if dev, known, ok := unplannedDevice(h, r); ok {
			l.Device, l.ClassKnown = dev, known
		} else {
			continue
		}
		out[h.Name] = l
		order = append(order, h.Name)
	}
	return out, order
}

// unplannedDevice is the device of holding h, which the plan does not have
// any more: its GPU as listed now (only its UUID when the GPU is gone),
// its caps as the backend holds them, its class as last planned. ok is
// false for a name that is no virtual device's.
func unplannedDevice(h backend.Holding, r *round) (dev vdev.Device, classKnown, ok bool) {
	uuid, i, err := vdev.ParseName(string(h.Name))
	if err != nil {
		return vdev.Device{}, false, false
	}
	g, present := r.present[uuid]
	if !present {
		g = gpu.Info{UUID: uuid, Index: -1, Minor: -1}
	}
	dev = vdev.Device{GPU: g, Index: i, MemoryLimit: h.MemoryLimit, ThreadPercentage: h.ThreadPercentage}
	dev.Class, classKnown = r.classes[dev.Name()]
	return dev, classKnown, true
}

// deviceStatus is the status of device name as the backend holds it (l).
func deviceStatus(name vdev.Name, l listed, planned map[gpu.UUID][]vdev.Device) status.Device {
	dev := l.Device
	gi := -1 // a GPU out of the plan
	if _, ok := planned[dev.GPU.UUID]; ok {
		gi = dev.GPU.Index
	}
	s := status.Device{
		Name: name.String(), ID: l.ID, Addr: dev.Addr(), GPU: dev.GPU.UUID.String(), GPUIndex: gi,
		MemoryLimit: dev.MemoryLimit.Bytes(), ThreadPercentage: dev.ThreadPercentage,
		Guest: l.Holder, Healthy: l.Healthy, PendingRemoval: l.PendingRemoval, CDIName: l.CDIName,
	}
	if l.ClassKnown {
		s.QoSClass, s.ClientPriority = string(dev.Class), dev.Class.ClientPriority()
	}
	return s
}
