package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// The host-sync load's cluster (--sync): n hosts of rowsPerHost virtual
// devices each (GPUs split in 4, as a daemon registers them), every host
// with a host token of its own, as every daemon has. The rows are created
// as the daemon's first sync would create them, so that a sync of a host
// after the fill finds its rows as it wants them.

// slicesPerGPU is how many virtual devices each GPU of a sync host has.
const slicesPerGPU = 4

// syncHost is one host of the load: what its daemon wants and knows.
type syncHost struct {
	name, id, token string
	// desired are the rows its daemon syncs; the scheduler changes them
	// (changeRow) and hands each sync a copy.
	desired []api.IsolatedDevice
	// busy: a sync of the host is under way.
	busy atomic.Bool
}

// syncHostName is host i's name.
func syncHostName(i int) string { return fmt.Sprintf("sync-%06d", i) }

// desiredRows are host i's rows as its daemon wants them (the agent's
// rowOf): Hopper GPUs split in slicesPerGPU.
func desiredRows(i, n int) []api.IsolatedDevice {
	const memMiB = 81559
	out := make([]api.IsolatedDevice, n)
	for r := range n {
		g, s := r/slicesPerGPU, r%slicesPerGPU
		uuid := fmt.Sprintf("GPU-%08x-%04x-4000-8000-000000000000", i, g)
		out[r] = api.IsolatedDevice{
			DevType: api.DevTypeNvidiaMPS, Model: "NVIDIA H100 80GB HBM3",
			Addr: fmt.Sprintf("%02x:00.0-%d", 0x18+g, s), VendorDeviceID: "10de:2330",
			DevicePath: uuid, NumaNode: g % 2,
			PCIEInfo: api.PCIEInfoOf(5, 16),
			Index:    -1, DeviceMinor: -1,
			CDIName: fmt.Sprintf("yunion.io/mps=%s::%d", uuid, s),
		}
		setSliceCaps(&out[r], memMiB, slicesPerGPU)
	}
	return out
}

// changeRow is a change of one row a host's daemon makes (a slice's
// thread share moving by one percent, back and forth): the next sync
// writes it.
func changeRow(desired []api.IsolatedDevice, round int) {
	d := &desired[round%len(desired)]
	if d.MPSThreadPercentage == 100/slicesPerGPU {
		d.MPSThreadPercentage--
	} else {
		d.MPSThreadPercentage = 100 / slicesPerGPU
	}
}

// syncCluster fills the database with n hosts of rows devices, or finds
// them filled by an earlier run (their tokens in tokensFile), and answers
// the hosts with their ids and tokens.
func syncCluster(ctx context.Context, st *store.Store, n, rows, workers int, tokensFile string, logf func(string, ...any)) ([]*syncHost, error) {
	hosts := make([]*syncHost, n)
	for i := range hosts {
		hosts[i] = &syncHost{name: syncHostName(i), desired: desiredRows(i, rows)}
	}
	tokens, err := readTokens(tokensFile)
	if err != nil {
		return nil, err
	}
	_, have, err := st.ListDevices(ctx, store.DeviceFilter{})
	if err != nil {
		return nil, err
	}
	switch {
	case have == n*rows && len(tokens) == n:
		logf("reusing the %d hosts and their %d rows in the database, tokens from %s", n, have, tokensFile)
	case have != 0:
		return nil, fmt.Errorf("the database holds %d devices: give an empty database, or the one a run with --hosts %d --rows-per-host %d filled (and its --tokens-file)", have, n, rows)
	default:
		logf("filling %d hosts of %d rows, a host token each (%s)", n, rows, st.Dialect())
		start := time.Now()
		if tokens, err = fillSync(ctx, st, hosts, workers, tokensFile, logf); err != nil {
			return nil, err
		}
		logf("filled in %s", time.Since(start).Round(time.Millisecond))
	}
	for _, h := range hosts {
		h.id, h.token, _ = strings.Cut(tokens[h.name], " ")
		if h.token == "" {
			return nil, fmt.Errorf("%s holds no token of host %s", tokensFile, h.name)
		}
	}
	return hosts, nil
}

// fillSync creates the hosts, their rows and their tokens, workers hosts
// at a time, and writes the tokens to tokensFile ("name id token" lines;
// answered by name as "id token").
func fillSync(ctx context.Context, st *store.Store, hosts []*syncHost, workers int, tokensFile string, logf func(string, ...any)) (map[string]string, error) {
	var mu sync.Mutex
	tokens := make(map[string]string, len(hosts))
	var next, done atomic.Int64
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(hosts) || ctx.Err() != nil {
					return
				}
				tok, err := fillSyncHost(ctx, st, hosts[i])
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				tokens[hosts[i].name] = tok // "id token"
				mu.Unlock()
				if d := done.Add(1); d%10000 == 0 {
					logf("fill: %d/%d hosts, %.0f hosts/s", d, len(hosts), float64(d)/time.Since(start).Seconds())
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	return tokens, writeTokens(tokensFile, hosts, tokens)
}

func fillSyncHost(ctx context.Context, st *store.Store, h *syncHost) (string, error) {
	host, err := st.CreateHost(ctx, api.Host{Name: h.name})
	if err != nil {
		return "", fmt.Errorf("creating host %s: %w", h.name, err)
	}
	rows := make([]api.IsolatedDevice, len(h.desired))
	for i, d := range h.desired {
		d.HostID = host.ID
		rows[i] = d
	}
	if _, err := st.CreateDevices(ctx, rows); err != nil {
		return "", fmt.Errorf("creating the devices of host %s: %w", h.name, err)
	}
	tok, _, err := st.CreateToken(ctx, store.NewToken{Name: "daemon " + h.name, Role: store.RoleHost, Host: h.name})
	if err != nil {
		return "", fmt.Errorf("creating the token of host %s: %w", h.name, err)
	}
	return host.ID + " " + tok, nil
}

func readTokens(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the hosts' tokens: %w", err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if name, tok, ok := strings.Cut(sc.Text(), " "); ok {
			out[name] = tok
		}
	}
	return out, sc.Err()
}

func writeTokens(path string, hosts []*syncHost, tokens map[string]string) error {
	var b strings.Builder
	for _, h := range hosts {
		fmt.Fprintf(&b, "%s %s\n", h.name, tokens[h.name])
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("writing the hosts' tokens: %w", err)
	}
	return nil
}
