package dra

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
)

// PluginOptions are where the kubelet meets the plugin.
type PluginOptions struct {
	Client kubernetes.Interface
	// PluginDataDir holds the plugin's gRPC socket (dra.sock); the kubelet
	// dials it: /var/lib/kubelet/plugins/<driver name> on a node.
	PluginDataDir string
	// RegistrarDir is the kubelet's plugin registration directory
	// (/var/lib/kubelet/plugins_registry); the plugin's registration socket
	// there is how the kubelet finds it.
	RegistrarDir string
}

// Start registers the plugin with the kubelet (a registration socket in
// RegistrarDir; the DRA service and the health stream, DRAResourceHealth,
// in PluginDataDir) and starts publishing the pool. The returned stop ends both; the slices stay, as the kubelet
// expects of a plugin that restarts.
func (d *Driver) Start(ctx context.Context, po PluginOptions) (stop func(), err error) {
	if po.Client == nil || po.PluginDataDir == "" || po.RegistrarDir == "" {
		return nil, errors.New("dra: a Kubernetes client, the plugin data directory and the registrar directory are required")
	}
	for _, dir := range []string{po.PluginDataDir, po.RegistrarDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("creating the kubelet plugin directory: %w", err)
		}
	}
	// The library logs through klog's context logger: ours, as logr.
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(d.log.Handler()))
	helper, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(d.opts.DriverName),
		kubeletplugin.NodeName(d.opts.NodeName),
		kubeletplugin.KubeClient(po.Client),
		kubeletplugin.PluginDataDirectoryPath(po.PluginDataDir),
		kubeletplugin.RegistrarDirectoryPath(po.RegistrarDir),
	)
	if err != nil {
		return nil, fmt.Errorf("starting the kubelet plugin: %w", err)
	}
	stopPublishing := d.setPublisher(ctx, helper, po.Client)
	d.log.Info("kubelet plugin started", "driver", d.opts.DriverName, "node", d.opts.NodeName,
		"plugin_dir", po.PluginDataDir, "registrar_dir", po.RegistrarDir, "checkpoint", d.opts.CheckpointPath)
	// The helper first: its stop ends a publication waiting for the API
	// server, which the publishing goroutine may be in.
	return func() { helper.Stop(); stopPublishing() }, nil
}
