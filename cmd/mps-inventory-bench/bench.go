package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/client"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// pageSize is the page of the list measurements: climc's default.
const pageSize = 20

type bench struct {
	c      config
	st     *store.Store
	client *client.Client
	hosts  []hostShape
	logf   func(string, ...any)
}

// randomHost picks a host and its index.
func (b *bench) randomHost() (int, hostShape) {
	i := rand.IntN(len(b.hosts))
	return i, b.hosts[i]
}

// depth is how deep the deep pages start: 90% into the list.
func (b *bench) depth() int { return b.c.rows * 9 / 10 }

// run makes every measurement, one after the other.
func (b *bench) run(ctx context.Context) ([]result, error) {
	var deepMarker string
	if strings.Contains("list: marker page", b.c.only) {
		var err error
		if deepMarker, err = b.markerAt(ctx, b.depth()); err != nil {
			return nil, err
		}
	}
	type measurement struct {
		name string
		op   op
	}
	list := func(o func() client.ListOptions) op {
		return func(ctx context.Context, _, _ int) error {
			_, err := b.client.ListIsolatedDevices(ctx, o())
			return err
		}
	}
	ms := []measurement{
		{"attach + detach (model form, count 1)", b.attachDetach},
		{"list: first page", list(func() client.ListOptions { return client.ListOptions{Limit: pageSize} })},
		// What Cloudpods' climc asks for by default: newest first.
		{"list: first page, newest first", list(func() client.ListOptions { return client.ListOptions{Limit: pageSize, Order: "desc"} })},
		{"list: --host", list(func() client.ListOptions {
			_, h := b.randomHost()
			return client.ListOptions{HostID: h.name, Limit: pageSize}
		})},
		{"list: --unused --model", list(func() client.ListOptions {
			// A random host's model: one the cluster has (at 1k rows not
			// every model is present, and an empty answer is cheaper).
			_, h := b.randomHost()
			return client.ListOptions{Unused: true, Model: models[h.model].name, Limit: pageSize}
		})},
		{"list: --server", list(func() client.ListOptions {
			i, _ := b.randomHost()
			return client.ListOptions{GuestID: fmt.Sprintf("pod-%06d-1", i), Limit: pageSize}
		})},
		{fmt.Sprintf("list: marker page at row %d", b.depth()), list(func() client.ListOptions {
			return client.ListOptions{PagingMarker: &deepMarker, Limit: pageSize}
		})},
		{fmt.Sprintf("list: --offset %d", b.depth()), list(func() client.ListOptions {
			return client.ListOptions{Offset: b.depth(), Limit: pageSize}
		})},
	}
	var out []result
	for _, m := range ms {
		if !strings.Contains(m.name, b.c.only) {
			continue
		}
		b.logf("measuring %s: %d workers, %s", m.name, b.c.workers, b.c.duration)
		r := measure(ctx, m.name, b.c.workers, b.c.warm, b.c.duration, m.op)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if r.errors > 0 {
			b.logf("%s: %d errors, the first: %v", m.name, r.errors, r.firstErr)
		}
		out = append(out, r)
	}
	return out, nil
}

// attachDetach attaches one slice of a random host's model to a new pod
// and detaches it: what a scheduler does for a pod that starts and ends.
func (b *bench) attachDetach(ctx context.Context, w, i int) error {
	_, h := b.randomHost()
	guest := fmt.Sprintf("bench-%d-%d", w, i)
	devs, err := b.client.AttachIsolatedDevices(ctx, guest, api.AttachRequest{Model: models[h.model].name, Host: h.name, Count: 1})
	if err != nil {
		return fmt.Errorf("attach on %s: %w", h.name, err)
	}
	if _, err := b.client.DetachIsolatedDevice(ctx, guest, devs[0].ID); err != nil {
		return fmt.Errorf("detach on %s: %w", h.name, err)
	}
	return nil
}

// markerAt is the paging marker of the row n rows into the list: the end
// of a descending walk of the rows after it, read straight from the store
// (over the API that is as many pages as it takes).
func (b *bench) markerAt(ctx context.Context, n int) (string, error) {
	if n == 0 {
		return "", nil
	}
	page, err := b.st.ListDevicesByMarker(ctx, store.DeviceFilter{Limit: b.c.rows - n - 1}, "", true)
	if err != nil {
		return "", fmt.Errorf("finding the marker of row %d: %w", n, err)
	}
	return page.NextMarker, nil
}

// explain prints the plans of the list statements the measurements and
// climc's filters run.
func (b *bench) explain(ctx context.Context, w io.Writer) error {
	h := b.hosts[len(b.hosts)/2]
	model := models[h.model].name
	yes := true
	filters := []struct {
		name     string
		f        store.DeviceFilter
		byMarker bool
	}{
		{"first page", store.DeviceFilter{}, false},
		{"first page, newest first (climc's default)", store.DeviceFilter{Desc: true}, false},
		{"--host, newest first", store.DeviceFilter{HostID: h.name, Desc: true}, false},
		{"--gpu (Cloudpods': dev_type GPU...)", store.DeviceFilter{GPU: true}, false},
		{"--host", store.DeviceFilter{HostID: h.name}, false},
		{"--dev-type --model", store.DeviceFilter{DevTypes: []string{api.DevTypeNvidiaMPS}, Models: []string{model}}, false},
		{"--unused", store.DeviceFilter{Unused: true}, false},
		{"--unused --model", store.DeviceFilter{Unused: true, Models: []string{model}}, false},
		{"--gpu", store.DeviceFilter{DevicePaths: []string{"GPU-00000001-0000-0000-0000-000000000000"}}, false},
		{"--server", store.DeviceFilter{GuestID: "pod-000001-1"}, false},
		{"--unhealthy", store.DeviceFilter{Unhealthy: &yes}, false},
		{"--pending-removal", store.DeviceFilter{PendingRemoval: &yes}, false},
		{"--offset (deep)", store.DeviceFilter{Offset: b.depth()}, false},
		{"marker page", store.DeviceFilter{}, true},
		{"marker page --unused --model", store.DeviceFilter{Unused: true, Models: []string{model}}, true},
	}
	fmt.Fprintf(w, "## Plans (%s, %d rows)\n\n", b.st.Dialect(), b.c.rows)
	for _, f := range filters {
		f.f.Limit = pageSize
		plan, err := b.st.ExplainListDevices(ctx, f.f, f.byMarker)
		if err != nil {
			return fmt.Errorf("explaining %s: %w", f.name, err)
		}
		fmt.Fprintf(w, "### %s\n\n```\n%s```\n\n", f.name, plan)
	}
	return nil
}

// report prints the run as markdown.
func (b *bench) report(w io.Writer, results []result, fill, analyze time.Duration) {
	fmt.Fprintf(w, "## %s, %d device rows, %d hosts\n\n", b.st.Dialect(), b.c.rows, len(b.hosts))
	fmt.Fprintf(w, "%s; %d concurrent clients; %s per measurement after %s of warm-up.", machine(), b.c.workers, b.c.duration, b.c.warm)
	if fill > 0 {
		fmt.Fprintf(w, " Fill: %s (%.0f rows/s)", fill.Round(time.Millisecond), float64(b.c.rows)/fill.Seconds())
	} else {
		fmt.Fprint(w, " Fill: reused")
	}
	fmt.Fprintf(w, ", analyze: %s.\n\n", analyze.Round(time.Millisecond))
	fmt.Fprintln(w, "| measurement | ops | ops/s | p50 ms | p99 ms | CPU ms/op | errors |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
	for _, r := range results {
		fmt.Fprintf(w, "| %s | %d | %.0f | %s | %s | %s | %d |\n", r.name, r.ops, r.perSecond(), ms(r.percentile(0.5)), ms(r.percentile(0.99)), ms(r.cpuPerOp()), r.errors)
	}
	fmt.Fprintln(w)
}
