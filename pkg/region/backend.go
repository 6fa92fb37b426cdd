package region

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"yunion.io/x/mps-daemon/pkg/keystone"
	"yunion.io/x/mps-daemon/pkg/pci"
	"yunion.io/x/mps-daemon/pkg/restcall"
)

// The data models a region may speak for MPS devices.
const (
	// ModelGPU (Cloudpods master, 4.0.4 and later): one row per physical
	// GPU, dev_type GPU, sharing_mode MPS, virtual_num N.
	ModelGPU = "gpu"
	// ModelPerSlice (4.0.3 and earlier): one NVIDIA_MPS row per slice,
	// addr <bus:dev.fn>-<i>.
	ModelPerSlice = "per-slice"
)

// Options configure a Backend.
type Options struct {
	Keystone *keystone.Client
	// HTTP is the client of keystone.NewHTTPClient.
	HTTP *http.Client
	// Timeout bounds each request; 0 means 10s.
	Timeout time.Duration
	// Retries of a failed request (no answer, 5xx); 0 means 3.
	Retries int
	// NICs lists the interfaces to find the host record by (MachineNICs,
	// or the one MAC host.conf names).
	NICs func() ([]NIC, error)
	// CreateHost creates a missing host record (mps_region_create_host).
	CreateHost bool
	// Model forces a data model (ModelGPU, ModelPerSlice); "" probes the
	// region.
	Model string
	// Models names GPU models as Cloudpods' host agent does (lspci's
	// pci.ids name); nil keeps the driver's name.
	Models *pci.Models
	Log    *slog.Logger
}

// Backend is a Cloudpods region as the daemon's inventory; safe for use by
// one agent loop (and its teardown) at a time.
type Backend struct {
	o   Options
	c   *caller
	log *slog.Logger

	mu    sync.Mutex
	model string // learned once per process
}

// New returns a backend; it does not connect.
func New(o Options) (*Backend, error) {
	if o.Keystone == nil || o.NICs == nil {
		return nil, errors.New("region: keystone client and NICs are required")
	}
	o.HTTP, o.Timeout, o.Retries = restcall.Defaults(o.HTTP, o.Timeout, o.Retries)
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	switch o.Model {
	case "", ModelGPU, ModelPerSlice:
	default:
		return nil, fmt.Errorf("region: unknown device model %q", o.Model)
	}
	b := &Backend{o: o, log: o.Log, model: o.Model}
	b.c = &caller{ks: o.Keystone, http: o.HTTP, timeout: o.Timeout, retries: o.Retries, log: o.Log}
	return b, nil
}

func (b *Backend) nics() ([]NIC, error) { return b.o.NICs() }

// Model is the data model in use ("" until the first sync learned it).
func (b *Backend) Model() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.model
}

// deviceModel learns, once, which model the region speaks: a region of the
// GPU-row model has the isolated_devices column sharing_mode, one of the
// per-slice model does not. `GET /isolated_devices/distinct-field?field=
// sharing_mode` tells them apart without writing anything (the region's
// /version carries no usable version in every build).
func (b *Backend) deviceModel(ctx context.Context, hostID string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.model != "" {
		return b.model, nil
	}
	model, err := b.modelBy(ctx, hostID, modelColumn)
	if err != nil {
		return "", err
	}
	b.model = model
	b.log.Info("the region's MPS device model", "model", b.model)
	return b.model, nil
}

// modelColumn is the isolated_devices column only a region of the GPU-row
// model has.
const modelColumn = "sharing_mode"

// pathModelProbe answers the distinct values of an isolated_devices column.
const pathModelProbe = pathDevices + "/distinct-field"

// modelQuery asks for the distinct values of column among the host's rows.
func modelQuery(hostID, column string) url.Values {
	return url.Values{"field": {column}, "scope": {"system"}, "host": {hostID}}
}

// modelBy asks the region for the distinct values of column and reads the
// model from the answer (modelOf).
func (b *Backend) modelBy(ctx context.Context, hostID, column string) (string, error) {
	err := b.c.call(ctx, http.MethodGet, pathModelProbe, modelQuery(hostID, column), nil, nil)
	if model, ok := modelOf(err); ok {
		return model, nil
	}
	return "", fmt.Errorf("asking the region which MPS device model it speaks: %w", err)
}

// modelOf reads the answer to the probe: any answer means the column
// exists (the GPU-row model), a 400 "model has no field <column>" (what the
// region answers for a column its table lacks) that it does not (the
// per-slice model). ok is false for any other failure.
func modelOf(err error) (model string, ok bool) {
	var ae *APIError
	switch {
	case err == nil:
		return ModelGPU, true
	case errors.As(err, &ae) && ae.Status == http.StatusBadRequest && strings.Contains(ae.Details, "has no field"):
		return ModelPerSlice, true
	}
	return "", false
}
