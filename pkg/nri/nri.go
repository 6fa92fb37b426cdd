// Package nri is the daemon's NRI plugin (issue 45): it gives the
// containers of a Cloudpods pod what a CDI container of a slice gets (the
// slice's environment, its caps among it, the pipe directory read-only
// with the privileged socket masked, the identity file, the view), by
// adjusting each container as containerd creates it. Cloudpods' host
// agent hands its pods the single layout's pipe root and nothing else,
// and its containerd runs with CDI off; NRI (containerd 1.7 with NRI
// enabled, 2.x by default) lets a plugin edit a container before it is
// made.
//
// Best effort by design: caps and terminations never depend on it (the
// accounting finds a pod's processes by their cgroup, pkg/pod), a
// container NRI creates while no plugin answers gets no edits, and a
// container this plugin cannot place is created as Cloudpods asked.
//
// A container is adjusted when its sandbox carries Cloudpods' label
// io.yunion.pod.uid, its environment points CUDA_MPS_PIPE_DIRECTORY at the
// single layout's pipe root, and NVIDIA_VISIBLE_DEVICES names exactly one
// GPU whose slices the pod's server (the sandbox's uid, or its name where
// Cloudpods' GPU rows list names) holds: it gets the edits of the slice of
// that GPU with the lowest index the server holds (pkg/cdi builds them,
// as it does the spec's entry). A pod given several GPUs is left as it
// is: a slice's edits name one GPU.
package nri

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"

	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/gpu"
)

// PodUIDLabel is Cloudpods' label on a pod's sandbox and containers,
// naming its server (pkg/hostman/guestman/pod/runtime/labels.go).
const PodUIDLabel = "io.yunion.pod.uid"

// The environment Cloudpods gives a pod's container with an MPS device.
const (
	envPipe    = "CUDA_MPS_PIPE_DIRECTORY"
	envVisible = "NVIDIA_VISIBLE_DEVICES"
)

// PluginName and PluginIndex are how containerd knows the plugin: the
// index orders plugins (lower first); ours goes late, after those that
// place a container, and before any that would look at its environment.
const (
	PluginName  = "yunion-mps"
	PluginIndex = "50"
)

// Devices is what the plugin adjusts containers from: a snapshot the
// agent hands over after each reconcile.
type Devices struct {
	// PipeRoot is the single layout's pipe root ("" in the per-GPU
	// layout: pods reach no MPS there, and get nothing).
	PipeRoot string
	// CDI are the options the host's spec is built with (view included).
	CDI cdi.Options
	// Held are, by GPU, the slices each holder holds, as the rows name
	// the holder (a server's id, or its name in Cloudpods' GPU rows), each
	// a CDI device with its identity file and view directory.
	Held map[gpu.UUID]map[string][]cdi.Device
}

// Add puts dev, a slice holder keeps, among d's slices of its GPU.
func (d *Devices) Add(holder string, dev cdi.Device) {
	g := dev.GPU.UUID
	if d.Held == nil {
		d.Held = map[gpu.UUID]map[string][]cdi.Device{}
	}
	if d.Held[g] == nil {
		d.Held[g] = map[string][]cdi.Device{}
	}
	d.Held[g][holder] = append(d.Held[g][holder], dev)
}

// Pod is what the plugin reads of a container's sandbox.
type Pod struct {
	UID, Name string
	Labels    map[string]string
}

// Container is what the plugin reads of a container.
type Container struct {
	Env []string
	// Mounts are the container paths mounted already.
	Mounts []string
}

// Decision is what Adjust decided for one container: the slice whose
// edits it gets (zero when none) and why.
type Decision struct {
	Device cdi.Device
	Server string
	Reason string
}

// Adjust decides a container's edits: nil (and why) for a container that
// is not a Cloudpods pod's MPS container, or whose slice cannot be
// established.
func Adjust(d Devices, p Pod, c Container) (*api.ContainerAdjustment, Decision) {
	dec := Decision{Server: p.UID}
	if p.Labels[PodUIDLabel] == "" {
		dec.Reason = "not a Cloudpods pod (no " + PodUIDLabel + " label)"
		return nil, dec
	}
	env := map[string]string{}
	for _, kv := range c.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	pipe, ok := env[envPipe]
	if !ok {
		dec.Reason = "no " + envPipe + ": not given an MPS device"
		return nil, dec
	}
	if d.PipeRoot == "" || filepath.Clean(pipe) != filepath.Clean(d.PipeRoot) {
		dec.Reason = fmt.Sprintf("%s=%s is not the single layout's pipe root %q", envPipe, pipe, d.PipeRoot)
		return nil, dec
	}
	var uuids []gpu.UUID
	for _, u := range strings.Split(env[envVisible], ",") {
		if u = strings.TrimSpace(u); u != "" && !slices.ContainsFunc(uuids, func(x gpu.UUID) bool { return strings.EqualFold(string(x), u) }) {
			uuids = append(uuids, gpu.UUID(u))
		}
	}
	if len(uuids) != 1 {
		dec.Reason = fmt.Sprintf("%s=%q names %d GPUs: a slice's edits name one", envVisible, env[envVisible], len(uuids))
		return nil, dec
	}
	var held map[string][]cdi.Device
	for g, h := range d.Held {
		if strings.EqualFold(string(g), string(uuids[0])) {
			held = h
		}
	}
	devs := held[p.UID]
	if len(devs) == 0 && p.Name != "" {
		devs = held[p.Name]
	}
	if len(devs) == 0 {
		dec.Reason = fmt.Sprintf("server %s (%s) holds no slice of GPU %s in the rows last synced", p.UID, p.Name, uuids[0])
		return nil, dec
	}
	dev := slices.MinFunc(devs, func(a, b cdi.Device) int { return a.Index - b.Index })
	e, err := cdi.Edits(d.CDI, dev)
	if err != nil {
		dec.Reason = "the slice's edits: " + err.Error()
		return nil, dec
	}
	adj := &api.ContainerAdjustment{}
	for _, kv := range e.Env {
		k, v, _ := strings.Cut(kv, "=")
		adj.AddEnv(k, v)
	}
	for _, m := range e.Mounts {
		// Cloudpods mounts the pipe root and /dev/shm read-write: the
		// slice's mounts take their place.
		if slices.Contains(c.Mounts, filepath.Clean(m.ContainerPath)) {
			adj.RemoveMount(m.ContainerPath)
		}
		adj.AddMount(&api.Mount{Destination: m.ContainerPath, Source: m.HostPath, Type: m.Type, Options: slices.Clone(m.Options)})
	}
	// The device nodes are the nvidia runtime's (legacy mode), which
	// Cloudpods' containerd runs its pods with.
	dec.Device = dev
	return adj, dec
}

// Plugin is the NRI plugin: Set hands it the devices, Run connects it to
// containerd and keeps it connected until its context ends.
type Plugin struct {
	socket string
	log    *slog.Logger
	mu     sync.Mutex
	devs   Devices
	// connected says whether containerd took the plugin (for the status).
	connected bool
	err       string
}

// New makes the plugin for containerd's NRI socket.
func New(socket string, log *slog.Logger) *Plugin {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Plugin{socket: socket, log: log.With("component", "nri")}
}

// Set replaces the devices containers are adjusted from.
func (p *Plugin) Set(d Devices) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.devs = d
}

// Devices are what containers are adjusted from now (the last Set).
func (p *Plugin) Devices() Devices {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.devs
}

// State says whether containerd has the plugin, and the last failure.
func (p *Plugin) State() (connected bool, err string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.connected, p.err
}

func (p *Plugin) note(connected bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.connected, p.err = connected, ""
	if err != nil {
		p.err = err.Error()
	}
}

// retry bounds the wait between two tries to reach containerd.
const (
	retryFirst = time.Second
	retryMax   = 30 * time.Second
)

// Run registers the plugin with containerd and serves it, registering
// again (1 s, doubling to 30 s) whenever containerd is away or restarts,
// until ctx ends.
func (p *Plugin) Run(ctx context.Context) {
	wait := retryFirst
	for ctx.Err() == nil {
		err := p.serve(ctx)
		if ctx.Err() != nil {
			break
		}
		p.note(false, err)
		p.log.Warn("NRI plugin not connected to containerd; pods get no slice edits until it is (caps still hold)", "socket", p.socket, "err", err, "retry_in", wait.String())
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, retryMax)
	}
	p.note(false, nil)
}

// serve is one connection: it returns when containerd goes away.
func (p *Plugin) serve(ctx context.Context) error {
	s, err := stub.New(handler{p}, stub.WithPluginName(PluginName), stub.WithPluginIdx(PluginIndex),
		stub.WithSocketPath(p.socket), stub.WithLogger(logger{p.log}))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		s.Stop()
		<-done
		return ctx.Err()
	}
}

// handler is the plugin's one event: CreateContainer.
type handler struct{ p *Plugin }

func (h handler) Configure(_ context.Context, _, runtime, version string) (api.EventMask, error) {
	h.p.note(true, nil)
	h.p.log.Info("NRI plugin registered with the runtime", "runtime", runtime, "version", version)
	return api.MustParseEventMask("CreateContainer"), nil
}

func (h handler) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	h.p.mu.Lock()
	d := h.p.devs
	h.p.mu.Unlock()
	c := Container{Env: ctr.GetEnv()}
	for _, m := range ctr.GetMounts() {
		c.Mounts = append(c.Mounts, filepath.Clean(m.GetDestination()))
	}
	adj, dec := Adjust(d, Pod{UID: pod.GetUid(), Name: pod.GetName(), Labels: pod.GetLabels()}, c)
	switch {
	case adj != nil:
		h.p.log.Info("Cloudpods pod's container given its slice's edits", "server", dec.Server, "pod", pod.GetName(),
			"container", ctr.GetName(), "device", dec.Device.Name().String())
	case pod.GetLabels()[PodUIDLabel] != "":
		h.p.log.Debug("Cloudpods pod's container left as it is", "server", dec.Server, "container", ctr.GetName(), "reason", dec.Reason)
	}
	// Never an error: a container this plugin cannot place is created as
	// asked, and billed by its cgroup all the same.
	return adj, nil, nil
}

// logger is NRI's logger over slog.
type logger struct{ l *slog.Logger }

func (l logger) Debugf(_ context.Context, f string, a ...any) { l.l.Debug(fmt.Sprintf(f, a...)) }
func (l logger) Infof(_ context.Context, f string, a ...any)  { l.l.Debug(fmt.Sprintf(f, a...)) }
func (l logger) Warnf(_ context.Context, f string, a ...any)  { l.l.Warn(fmt.Sprintf(f, a...)) }
func (l logger) Errorf(_ context.Context, f string, a ...any) { l.l.Error(fmt.Sprintf(f, a...)) }
