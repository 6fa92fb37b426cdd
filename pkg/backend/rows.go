package backend

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/devsync"
)

// RowStore is a backend that keeps a host's devices as rows: mps-inventory
// (pkg/inventory/client) or a Cloudpods region (pkg/region), each over its
// own records.
type RowStore interface {
	// EnsureHost finds the host called name, or registers it.
	EnsureHost(ctx context.Context, name string) (api.Host, error)
	// SyncDevices makes the host's rows what desired describes.
	SyncDevices(ctx context.Context, hostID string, desired []api.IsolatedDevice) (devsync.Result, error)
}

// Rows is a RowStore on the edge: the host registered once per process
// (the store finds it by name, so a restarted daemon gets the same
// record), then each offer's rows synced.
type Rows struct {
	store RowStore
	log   *slog.Logger
	// ahead is the registration NewRows began, until a Sync takes it.
	ahead chan registration
	// mu guards host, which a Sync sets once.
	mu   sync.Mutex
	host registration
}

// registration is the store's answer to registering the host called name.
type registration struct {
	name string
	host api.Host
	err  error
}

// NewRows is s on the edge. A start registers the host while MPS is
// prepared (it hands nothing out: no device is created before the CDI
// spec names it): with a host name, the registration begins now, in the
// background until ctx ends, and the first Sync takes its answer.
func NewRows(ctx context.Context, s RowStore, host string, log *slog.Logger) *Rows {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Rows{store: s, log: log}
	if host != "" {
		ahead := make(chan registration, 1)
		r.ahead = ahead
		go func() {
			h, err := s.EnsureHost(ctx, host)
			ahead <- registration{name: host, host: h, err: err}
		}()
	}
	return r
}

// Sync registers the host (once) and syncs o's rows: the store turns them
// into its records. Only the rows are the store's: it splits GPUs into
// fixed slices, and prepares no claims.
func (r *Rows) Sync(ctx context.Context, o Offer) (Answer, error) {
	id, err := r.register(ctx, o.Host)
	if err != nil {
		return Answer{}, err
	}
	rows := make([]api.IsolatedDevice, len(o.Rows))
	for i, row := range o.Rows {
		row.HostID = id
		rows[i] = row
	}
	res, err := r.store.SyncDevices(ctx, id, rows)
	if err != nil {
		return Answer{HostID: id, Result: res}, fmt.Errorf("syncing devices with the inventory: %w", err)
	}
	return Answer{HostID: id, Result: res}, nil
}

// register is the host's id in the store: registered once per process,
// the answer NewRows began taken when it is for the same name.
func (r *Rows) register(ctx context.Context, name string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.host.host.ID != "" {
		return r.host.host.ID, nil
	}
	var reg registration
	if ahead := r.ahead; ahead != nil {
		r.ahead = nil
		select {
		case reg = <-ahead:
		case <-ctx.Done():
			return "", fmt.Errorf("registering host %q with the inventory: %w", name, ctx.Err())
		}
	}
	if reg.name != name {
		h, err := r.store.EnsureHost(ctx, name)
		reg = registration{name: name, host: h, err: err}
	}
	if reg.err != nil {
		return "", fmt.Errorf("registering host %q with the inventory: %w", name, reg.err)
	}
	r.host = reg
	r.log.Info("host registered", "host", name, "host_id", reg.host.ID)
	return reg.host.ID, nil
}
