package cloudpods

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// CreateGuest makes a guest (a pod) on a host without a scheduler or a host
// agent: POST /servers/import inserts it on the host, status import (the
// import of its networks and disks, which this test region lacks, fails
// after the guest exists), then POST /servers/<id>/status makes it ready,
// the status attaching an isolated device to a pod needs. It returns the
// guest's id.
func (c *Cloud) CreateGuest(ctx context.Context, name, hostID string) (string, error) {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	id := fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
	body := map[string]any{"id": id, "name": name, "host_id": hostID, "hypervisor": "pod", "mem_size_mb": 1024, "cpu": 1}
	err := c.Call(ctx, http.MethodPost, "/servers/import", body, nil)
	if err != nil && !strings.Contains(err.Error(), "Empty import nics") {
		return "", fmt.Errorf("importing guest %s: %w", name, err)
	}
	if err := c.Call(ctx, http.MethodPost, "/servers/"+id+"/status", map[string]any{"server": map[string]any{"status": "ready"}}, nil); err != nil {
		return "", fmt.Errorf("making guest %s ready: %w", name, err)
	}
	return id, nil
}

// AttachDevice attaches isolated device dev to guest as a user does
// (`climc server-attach-isolated-device`): POST
// /servers/<guest>/attach-isolated-device. The region records the
// attachment at once; the sync task that follows fails without a host
// agent, which leaves the attachment in place.
func (c *Cloud) AttachDevice(ctx context.Context, guest, dev string) error {
	body := map[string]any{"server": map[string]any{"device": dev}}
	if err := c.Call(ctx, http.MethodPost, "/servers/"+guest+"/status", map[string]any{"server": map[string]any{"status": "ready"}}, nil); err != nil {
		return fmt.Errorf("making guest %s ready: %w", guest, err)
	}
	if err := c.Call(ctx, http.MethodPost, "/servers/"+guest+"/attach-isolated-device", body, nil); err != nil {
		return fmt.Errorf("attaching %s to %s: %w", dev, guest, err)
	}
	return nil
}

// DetachAll detaches every isolated device of guest. The failed sync task
// of the last attach left the guest in a status detaching refuses, so it is
// made ready first, as an operator would.
//
// A 5xx is tried again, up to detachTries times: once in 20 runs of
// tests/e2e TestCloudpodsRegion the region answered its detach 500
// "runtime error: invalid memory address or nil pointer dereference" (a
// panic inside the region, while the daemon was syncing the host's rows),
// and a failed remote call is retried, as an operator would.
func (c *Cloud) DetachAll(ctx context.Context, guest string) error {
	var err error
	for try := 1; try <= detachTries; try++ {
		if err = c.detachAll(ctx, guest); err == nil || !serverError(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(time.Duration(try) * 200 * time.Millisecond):
		}
	}
	return fmt.Errorf("%d tries: %w", detachTries, err)
}

// detachTries bounds DetachAll's tries.
const detachTries = 5

func (c *Cloud) detachAll(ctx context.Context, guest string) error {
	if err := c.Call(ctx, http.MethodPost, "/servers/"+guest+"/status", map[string]any{"server": map[string]any{"status": "ready"}}, nil); err != nil {
		return fmt.Errorf("making guest %s ready: %w", guest, err)
	}
	body := map[string]any{"server": map[string]any{"detach_all": true}}
	if err := c.Call(ctx, http.MethodPost, "/servers/"+guest+"/detach-isolated-device", body, nil); err != nil {
		return fmt.Errorf("detaching the devices of %s: %w", guest, err)
	}
	return nil
}

// serverError is an answer of 500 or more.
func serverError(err error) bool {
	var h *HTTPError
	return errors.As(err, &h) && h.Code >= 500
}

// Device is what tests read of an isolated_devices row.
type Device struct {
	ID             string `json:"id"`
	DevType        string `json:"dev_type"`
	SharingMode    string `json:"sharing_mode"`
	Addr           string `json:"addr"`
	Model          string `json:"model"`
	VirtualNum     int    `json:"virtual_num"`
	MemorySize     int    `json:"memory_size"`
	MPSMemoryLimit int    `json:"mps_memory_limit"`
	DevicePath     string `json:"device_path"`
	AllocatedCount int    `json:"allocated_count"`
}

// HostDevices lists a host's isolated devices by addr and fails the test on
// an error or on two rows at one addr (a duplicate is what the tests look
// for).
func (c *Cloud) HostDevices(t testing.TB, hostID string) map[string]Device {
	t.Helper()
	var l struct {
		Devices []Device `json:"isolated_devices"`
	}
	if err := c.Call(context.Background(), http.MethodGet, "/isolated_devices?scope=system&details=true&limit=0&host="+hostID, nil, &l); err != nil {
		t.Fatalf("listing the devices of host %s: %v", hostID, err)
	}
	m := map[string]Device{}
	for _, d := range l.Devices {
		if _, dup := m[d.Addr]; dup {
			t.Fatalf("host %s has two rows at %s", hostID, d.Addr)
		}
		m[d.Addr] = d
	}
	return m
}
