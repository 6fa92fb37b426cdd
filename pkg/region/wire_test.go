package region

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/cloudpods"
	"yunion.io/x/mps-daemon/internal/testsupport/replay"
	"yunion.io/x/mps-daemon/pkg/keystone"
)

// renaming sends requests with one JSON field name changed in their bodies:
// the backend as it would be with that name changed.
type renaming struct{ from, to string }

func (rn renaming) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		b = bytes.ReplaceAll(b, []byte(`"`+rn.from+`":`), []byte(`"`+rn.to+`":`))
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
	}
	return http.DefaultTransport.RoundTrip(r)
}

// A change to the wire fails the replay, naming the field: the create body
// with one field renamed against TestGPURowsResizeAndHeld's recording.
func TestARenamedFieldFailsTheReplay(t *testing.T) {
	f := &replay.Failures{TB: t}
	defer f.Done()
	c := cloudpods.Replay(f, "region/TestGPURowsResizeAndHeld.json")
	ctx := context.Background()
	mac := newMAC()
	name, ip := newHost("gpu-rows")
	hostID, err := c.CreateHost(ctx, name, mac, ip)
	if err != nil {
		t.Fatal(err)
	}
	ks, err := keystone.New(keystone.Options{Credentials: keystone.Credentials{
		AuthURL: c.AuthURL, User: c.User, Password: c.Password, Project: c.Project, Region: c.RegionName,
	}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Options{Keystone: ks, HTTP: &http.Client{Transport: renaming{"detected_on_host", "detected_on_hosts"}},
		NICs: func() ([]NIC, error) { return []NIC{{MAC: mac}}, nil }, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.SyncDevices(ctx, hostID, slices("GPU-a1", "18:00.0", 4, 81920))
	want := "field body.isolated_device.detected_on_hosts sent (true), not recorded"
	if err == nil || !strings.Contains(f.All(), want) || !strings.Contains(f.All(), "field body.isolated_device.detected_on_host recorded (true), not sent") {
		t.Fatalf("sync with a field renamed: %v\nthe replay said: %s\nwant it to name the field: %s", err, f.All(), want)
	}
}
