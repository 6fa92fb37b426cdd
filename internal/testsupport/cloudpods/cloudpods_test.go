package cloudpods

import (
	"context"
	"strings"
	"testing"
)

func TestMain(m *testing.M) { Main(m) }

// TestControlPlane: the real climc lists through the real region, and a
// host created as Cloudpods' host agent creates one shows in host-list.
func TestControlPlane(t *testing.T) {
	c := Get(t)
	ctx := context.Background()
	out, errOut, err := c.RunClimc(ctx, "host-list")
	if err != nil {
		t.Fatalf("climc host-list: %v\n%s", err, errOut)
	}
	if !strings.Contains(out, c.HostID) || !strings.Contains(out, c.HostName) {
		t.Fatalf("host-list lacks the script's host %s (%s):\n%s", c.HostName, c.HostID, out)
	}
	id, err := c.CreateHost(ctx, "gpuhost-extra", "02:00:00:00:00:77", "127.0.0.2")
	if err != nil {
		t.Fatal(err)
	}
	out, _, err = c.RunClimc(ctx, "host-show", "gpuhost-extra")
	if err != nil || !strings.Contains(out, id) {
		t.Fatalf("host-show gpuhost-extra: %v\n%s", err, out)
	}
}
