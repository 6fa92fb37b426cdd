package k8s

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	resourceapi "k8s.io/api/resource/v1"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// kubelet is the kubelet's side of a DRA plugin: its plugin watcher finds
// the registration socket, asks GetInfo, checks the answer and says so
// with NotifyRegistrationStatus; then it dials the endpoint the plugin
// named and calls NodePrepareResources / NodeUnprepareResources there.
type kubelet struct {
	t      *testing.T
	dra    drapb.DRAPluginClient
	health drahealthv1.DRAResourceHealthClient
	// services are what the plugin's registration offers.
	services []string
}

// register does what the kubelet's plugin manager does with a socket in
// its registration directory and answers the plugin's DRA client.
func register(t *testing.T, registrarDir, driver string) *kubelet {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	reg := dial(t, filepath.Join(registrarDir, driver+"-reg.sock"))
	rc := registerapi.NewRegistrationClient(reg)
	info, err := rc.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatalf("registration GetInfo: %v", err)
	}
	if info.Type != registerapi.DRAPlugin || info.Name != driver || !slices.Contains(info.SupportedVersions, drapb.DRAPluginService) {
		t.Fatalf("registration answered %+v: want a %s named %s offering %s", info, registerapi.DRAPlugin, driver, drapb.DRAPluginService)
	}
	if _, err := rc.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatalf("NotifyRegistrationStatus: %v", err)
	}
	conn := dial(t, info.Endpoint)
	return &kubelet{t: t, dra: drapb.NewDRAPluginClient(conn), health: drahealthv1.NewDRAResourceHealthClient(conn), services: info.SupportedVersions}
}

func dial(t *testing.T, socket string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dialling %s: %v", socket, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// prepare is NodePrepareResources for one claim: the CDI device names the
// plugin answers with, or its error for that claim.
func (k *kubelet) prepare(c *resourceapi.ResourceClaim) ([]string, string) {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(k.t.Context(), 30*time.Second)
	defer cancel()
	resp, err := k.dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{
		Claims: []*drapb.Claim{{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)}},
	})
	if err != nil {
		k.t.Fatalf("NodePrepareResources: %v", err)
	}
	r, ok := resp.Claims[string(c.UID)]
	if !ok {
		k.t.Fatalf("NodePrepareResources answered no result for claim %s: %+v", c.UID, resp)
	}
	var cdi []string
	for _, d := range r.Devices {
		cdi = append(cdi, d.CdiDeviceIds...)
	}
	return cdi, r.Error
}

// unprepare is NodeUnprepareResources for one claim.
func (k *kubelet) unprepare(c *resourceapi.ResourceClaim) {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(k.t.Context(), 30*time.Second)
	defer cancel()
	resp, err := k.dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{
		Claims: []*drapb.Claim{{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)}},
	})
	if err != nil {
		k.t.Fatalf("NodeUnprepareResources: %v", err)
	}
	if r, ok := resp.Claims[string(c.UID)]; !ok || r.Error != "" {
		k.t.Fatalf("NodeUnprepareResources for %s: %+v", c.UID, resp.Claims)
	}
}
