package mpsctl

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"yunion.io/x/mps-daemon/pkg/api"
)

// Attaching, detaching and purging, with Cloudpods' command names. Each
// prints the devices it changed as the list table (without the paging
// footer: it is not a page of a list), or with -o json what the API
// answered (api.IsolatedDevicesBody, api.PurgeBody).

func (a *app) allocCommands() []*cobra.Command {
	return []*cobra.Command{a.serverAttachCommand(), a.serverDetachCommand(), a.isolatedDevicePurgeCommand()}
}

func (a *app) serverAttachCommand() *cobra.Command {
	var (
		req  api.AttachRequest
		numa int
	)
	cmd := &cobra.Command{
		Use:   "server-attach-isolated-device SERVER [DEVICE]",
		Short: "Attach isolated devices to a server (a container or pod)",
		Long: `Attach one device by its id, or, without DEVICE, --count devices of --model on
--host, picked as Cloudpods does: the GPU with the most free slices first,
one server's slices spread across GPUs, on --numa-node when given. A
request gets all its devices or none.`,
		Args: cobra.RangeArgs(1, 2),
		PreRunE: func(cmd *cobra.Command, args []string) error {
			modelFlags := []string{"model", "dev-type", "count", "host", "numa-node"}
			if len(args) == 2 {
				for _, f := range modelFlags {
					if cmd.Flags().Changed(f) {
						return fmt.Errorf("--%s: give either DEVICE or --model and --host, not both", f)
					}
				}
				return nil
			}
			switch {
			case req.Model == "":
				return errors.New("give DEVICE, or --model and --host")
			case req.Host == "":
				return errors.New("--host is required with --model")
			case req.Count < 1:
				return fmt.Errorf("invalid --count %d: must be at least 1", req.Count)
			case numa < -1:
				return fmt.Errorf("invalid --numa-node %d: -1 (any) or a node number", numa)
			}
			return nil
		},
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			c, guest := a.client(), args[0]
			var devs []api.IsolatedDevice
			var err error
			if len(args) == 2 {
				devs, err = c.AttachIsolatedDevice(cmd.Context(), guest, args[1])
			} else {
				if numa >= 0 {
					req.NUMANode = &numa
				}
				devs, err = c.AttachIsolatedDevices(cmd.Context(), guest, req)
			}
			if err != nil {
				return fmt.Errorf("attaching isolated devices to %s: %w", guest, err)
			}
			return a.printDevices(devs)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&req.Model, "model", "", "model of the devices, e.g. \"NVIDIA H100 80GB HBM3\"")
	f.StringVar(&req.DevType, "dev-type", api.DevTypeNvidiaMPS, "device type")
	f.IntVar(&req.Count, "count", 1, "how many devices")
	f.StringVar(&req.Host, "host", "", "host of the devices (id or name)")
	f.IntVar(&numa, "numa-node", -1, "only devices on this NUMA node (-1: any)")
	return cmd
}

func (a *app) serverDetachCommand() *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "server-detach-isolated-device SERVER [DEVICE]",
		Short: "Detach isolated devices from a server (DEVICE, or --all)",
		Long: `Detach one device from a server, or with --all every device it holds. Detaching
a device that is already free changes nothing and prints no device.`,
		Args: cobra.RangeArgs(1, 2),
		PreRunE: func(_ *cobra.Command, args []string) error {
			if (len(args) == 2) == all {
				return errors.New("give either DEVICE or --all")
			}
			return nil
		},
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			c, guest := a.client(), args[0]
			var devs []api.IsolatedDevice
			var err error
			if all {
				devs, err = c.DetachAll(cmd.Context(), guest)
			} else {
				devs, err = c.DetachIsolatedDevice(cmd.Context(), guest, args[1])
			}
			if err != nil {
				return fmt.Errorf("detaching isolated devices from %s: %w", guest, err)
			}
			return a.printDevices(devs)
		}),
	}
	cmd.Flags().BoolVar(&all, "all", false, "detach every device the server holds")
	return cmd
}

func (a *app) isolatedDevicePurgeCommand() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "isolated-device-purge ID",
		Short: "Remove an isolated device (--force: even one a server holds)",
		Long: `Remove an isolated device from the inventory. A device a server holds is
refused ("Isolated device used by server") unless --force is given: then it
is detached first, and the server it was taken from is printed.`,
		Args: cobra.ExactArgs(1),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			dev, guest, err := a.client().PurgeIsolatedDevice(cmd.Context(), args[0], force)
			if err != nil {
				return fmt.Errorf("purging isolated device %s: %w", args[0], err)
			}
			if a.output == "json" {
				return writeJSON(a.stdout, api.PurgeBody{IsolatedDevice: dev, DetachedGuest: guest})
			}
			if err := a.printDevices([]api.IsolatedDevice{dev}); err != nil {
				return err
			}
			if guest != "" {
				_, err = fmt.Fprintf(a.stdout, "Detached from server %s.\n", guest)
			}
			return err
		}),
	}
	cmd.Flags().BoolVar(&force, "force", false, "detach the device from its server first")
	return cmd
}

// printDevices prints devices as the list table, or as the API's JSON.
func (a *app) printDevices(devs []api.IsolatedDevice) error {
	if devs == nil {
		devs = []api.IsolatedDevice{}
	}
	if a.output == "json" {
		return writeJSON(a.stdout, api.IsolatedDevicesBody{IsolatedDevices: devs})
	}
	rows, err := ToObjects(devs)
	if err != nil {
		return err
	}
	_, err = fmt.Fprint(a.stdout, Table(isolatedDeviceColumns(true), rows))
	return err
}
