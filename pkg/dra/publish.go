package dra

import (
	"context"
	"fmt"
	"slices"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"yunion.io/x/mps-daemon/pkg/ledger"
)

// publishWait is how long a sync waits for its publication before it
// leaves it to the background: kubeletplugin.Helper's first publication
// starts the ResourceSlice controller, which waits for the API server
// (measured: with none reachable, for ever), and the agent's loop must
// never wait that long.
const publishWait = 5 * time.Second

// publishing is the background publication of the pool: one goroutine
// hands the latest pool to the Publisher, one publication at a time; a
// newer pool replaces one not yet handed over.
type publishing struct {
	to   Publisher
	kick chan struct{}
	next *publication // the latest pool not yet handed over
	// published is the pool last asked for (nil: publish the next one
	// whatever it is, as after a failure).
	published []ledger.Device
}

// publication is one pool to publish, and who waits for its outcome.
type publication struct {
	res     resourceslice.DriverResources
	waiters []chan error
}

// setPublisher starts publishing in the background until ctx ends or stop
// is called (which waits for the goroutine): at once when a reconcile has
// already handed devices over, else at the first one (until then the
// slices left by a previous run stay as they were).
func (d *Driver) setPublisher(ctx context.Context, p Publisher, client kubernetes.Interface) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	d.mu.Lock()
	d.pub = publishing{to: p, kick: make(chan struct{}, 1)}
	d.client = client
	kick := d.pub.kick
	d.mu.Unlock()
	if err := d.rebuild(ctx); err != nil {
		d.log.Warn("the DRA checkpoint not rebuilt yet; the next reconcile tries again", "err", err)
	}
	d.publish(true)
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-kick:
			}
			d.publishNext(ctx)
		}
	}()
	return func() { cancel(); <-done }
}

// publishNext hands the latest pool to the Publisher and tells its
// waiters how that went; after a failure the next sync publishes again.
func (d *Driver) publishNext(ctx context.Context) {
	d.mu.Lock()
	next, to := d.pub.next, d.pub.to
	d.pub.next = nil
	d.mu.Unlock()
	if next == nil {
		return
	}
	err := to.PublishResources(ctx, next.res)
	if err != nil {
		err = fmt.Errorf("publishing ResourceSlices: %w", err)
		d.mu.Lock()
		d.pub.published = nil
		d.mu.Unlock()
	}
	for _, w := range next.waiters {
		w <- err
	}
}

// publish asks for the pool to be published when it changed (or when
// force) and answers what reports the outcome (nil when nothing is to be
// published); not before a reconcile has said what there is, nor while the
// checkpoint is being rebuilt. A change of health wakes the kubelet's
// health streams.
func (d *Driver) publish(force bool) <-chan error {
	// d.mu before the ledger's: two publications never cross, the later
	// state is the one handed over.
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.ledger.State()
	if d.pub.to == nil || !st.Ready {
		return nil
	}
	devs := st.Published
	if healthOf(devs) != healthOf(d.shown) {
		close(d.healthChanged)
		d.healthChanged = make(chan struct{})
	}
	d.shown = devs
	if !force && d.pub.published != nil && slices.Equal(devs, d.pub.published) {
		return nil
	}
	w := make(chan error, 1)
	p := &publication{res: d.resources(devs), waiters: []chan error{w}}
	if d.pub.next != nil {
		p.waiters = append(p.waiters, d.pub.next.waiters...) // superseded: told this one's outcome
	}
	d.pub.next, d.pub.published = p, devs
	select {
	case d.pub.kick <- struct{}{}:
	default:
	}
	d.log.Info("ResourceSlices to publish", "pool", d.Pool(), "devices", len(devs))
	return w
}

// healthOf is the devices' names and health, comparable.
func healthOf(devs []ledger.Device) string {
	var b []byte
	for _, dev := range devs {
		b = fmt.Appendf(b, "%s=%v;", dev.Name, dev.Healthy)
	}
	return string(b)
}

// awaitPublished waits for a publication's outcome, for at most
// publishWait: past that it goes on in the background.
func (d *Driver) awaitPublished(ctx context.Context, done <-chan error) error {
	if done == nil {
		return nil
	}
	t := time.NewTimer(publishWait)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		d.log.Warn("publishing ResourceSlices waits for the API server; it goes on in the background", "waited", publishWait)
	case <-ctx.Done():
	}
	return nil
}
