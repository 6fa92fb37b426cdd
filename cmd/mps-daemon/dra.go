//go:build kubernetes

// The Kubernetes mode is built only with -tags kubernetes (make
// build-kubernetes: bin/mps-daemon-kubernetes): client-go and gRPC quadruple
// the binary (15 to 63 MB) and their package initialisers would cost every
// Cloudpods host memory for a mode it never runs.

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"yunion.io/x/mps-daemon/pkg/agent"
	"yunion.io/x/mps-daemon/pkg/dra"
)

// buildModes are the modes this build runs, the one its package runs
// first: the Kubernetes build is packaged to run `kubernetes`.
var buildModes = []agent.Mode{agent.ModeKubernetes, agent.ModeCloudpods}

// draFlags are the Kubernetes mode's paths and names.
type draFlags struct {
	nodeName, kubeconfig, driverName    string
	pluginDir, registrarDir, checkpoint string
}

// draCommand is `mps-daemon kubernetes`: the same agent (plan, MPS control,
// CDI spec), its devices published to Kubernetes as a DRA driver instead
// of to the inventory.
func draCommand(f *flags) *cobra.Command {
	var df draFlags
	c := &cobra.Command{
		Use:   "kubernetes",
		Short: "Run as a Kubernetes DRA kubelet plugin: publish the virtual devices in ResourceSlices, prepare claims with their CDI names",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return serveDRA(cmd.Context(), *f, df) },
	}
	fl := c.Flags()
	fl.StringVar(&df.nodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name in Kubernetes (default $NODE_NAME)")
	fl.StringVar(&df.kubeconfig, "kubeconfig", "", "kubeconfig of the node's credentials; empty: in-cluster (a DaemonSet's service account)")
	fl.StringVar(&df.driverName, "driver-name", dra.DefaultDriverName, "DRA driver name (DeviceClass selectors and attribute domain)")
	fl.StringVar(&df.pluginDir, "plugin-dir", filepath.Join("/var/lib/kubelet/plugins", dra.DefaultDriverName), "directory of the plugin's gRPC socket, which the kubelet dials")
	fl.StringVar(&df.registrarDir, "registrar-dir", "/var/lib/kubelet/plugins_registry", "the kubelet's plugin registration directory")
	fl.StringVar(&df.checkpoint, "checkpoint", "", "file of the prepared claims (default <plugin-dir>/checkpoint.json)")
	return c
}

func serveDRA(ctx context.Context, f flags, df draFlags) error {
	if df.nodeName == "" {
		return fmt.Errorf("kubernetes: --node-name (or $NODE_NAME) is required")
	}
	if df.checkpoint == "" {
		df.checkpoint = filepath.Join(df.pluginDir, "checkpoint.json")
	}
	l, err := load(ctx, f, agent.ModeKubernetes, true)
	if err != nil {
		return err
	}
	defer l.backend.Close()
	log := l.log
	kc, err := kubeClient(df.kubeconfig)
	if err != nil {
		return err
	}
	driverVersion, err := l.nvml.DriverVersion()
	if err != nil {
		log.Warn("NVIDIA driver version unknown: not published", "err", err)
	}
	d, err := dra.New(dra.Options{DriverName: df.driverName, NodeName: df.nodeName, CheckpointPath: df.checkpoint, DriverVersion: driverVersion, Log: log})
	if err != nil {
		return err
	}
	stop, err := d.Start(ctx, dra.PluginOptions{Client: kc, PluginDataDir: df.pluginDir, RegistrarDir: df.registrarDir})
	if err != nil {
		return err
	}
	defer stop()
	return runAgent(ctx, f, l, agent.ModeKubernetes, d, d.Changed(), "mode", "kubernetes", "node", df.nodeName, "driver", df.driverName)
}

// kubeClient is the API server's client: from the kubeconfig, or the pod's
// service account when there is none.
func kubeClient(kubeconfig string) (kubernetes.Interface, error) {
	var rc *rest.Config
	var err error
	if kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes: API server credentials: %w", err)
	}
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: client: %w", err)
	}
	return c, nil
}

// The driver is the agent's backend in this mode.
var _ agent.DeviceBackend = (*dra.Driver)(nil)
