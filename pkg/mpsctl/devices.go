package mpsctl

import (
	"fmt"

	"github.com/spf13/cobra"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/client"
)

// listFlags are the paging options every list command has.
type listFlags struct {
	limit  int
	offset int
}

func (l *listFlags) register(cmd *cobra.Command) {
	cmd.Flags().IntVar(&l.limit, "limit", 20, "page size (0: the server's maximum, 2048)")
	cmd.Flags().IntVar(&l.offset, "offset", 0, "rows to skip")
}

func (l *listFlags) check() error {
	if l.limit < 0 {
		return fmt.Errorf("invalid --limit %d: must not be negative", l.limit)
	}
	if l.offset < 0 {
		return fmt.Errorf("invalid --offset %d: must not be negative", l.offset)
	}
	return nil
}

func (a *app) isolatedDeviceListCommand() *cobra.Command {
	var (
		page                     listFlags
		opts                     client.ListOptions
		unhealthy, pendingRemove bool
		marker                   string
	)
	cmd := &cobra.Command{
		Use:   "isolated-device-list",
		Short: "List isolated devices (one row per MPS virtual device)",
		Args:  cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("paging-marker") && page.offset != 0 {
				return fmt.Errorf("give either --offset or --paging-marker")
			}
			if opts.Order != "asc" && opts.Order != "desc" {
				return fmt.Errorf("invalid --order %q: want asc or desc", opts.Order)
			}
			return page.check()
		},
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			opts.Limit, opts.Offset = page.limit, page.offset
			if cmd.Flags().Changed("paging-marker") {
				opts.PagingMarker = &marker
			}
			if unhealthy {
				opts.Unhealthy = &unhealthy
			}
			if pendingRemove {
				opts.PendingRemoval = &pendingRemove
			}
			list, err := a.client().ListIsolatedDevices(cmd.Context(), opts)
			if err != nil {
				return fmt.Errorf("listing isolated devices: %w", err)
			}
			if a.output == "json" {
				return writeJSON(a.stdout, list)
			}
			rows, err := ToObjects(list.IsolatedDevices)
			if err != nil {
				return err
			}
			p := Page{Total: list.Total, Limit: list.Limit, Offset: list.Offset,
				MarkerField: list.MarkerField, MarkerOrder: list.MarkerOrder, NextMarker: list.NextMarker}
			if p.Total == 0 && p.Limit == 0 {
				// An empty page carries no limit (Cloudpods leaves it out):
				// the footer says what was asked for.
				p.Limit, p.Offset = page.limit, page.offset
			}
			if p.MarkerField != "" {
				p.Total = len(list.IsolatedDevices)
			}
			_, err = fmt.Fprint(a.stdout, ListTable(isolatedDeviceColumns(opts.Details), rows, p))
			return err
		}),
	}
	f := cmd.Flags()
	// The inventory resolves a host name itself, and answers 404 for an
	// unknown one rather than an empty list.
	f.StringVar(&opts.HostID, "host", "", "only devices of this host (id or name)")
	f.StringVar(&opts.DevType, "dev-type", "", "only devices of this type, e.g. "+api.DevTypeNvidiaMPS)
	f.StringVar(&opts.Model, "model", "", "only devices of this model, e.g. \"Tesla P40\"")
	f.StringVar(&opts.GPU, "gpu", "", "only slices of this physical GPU (UUID, the device_path)")
	f.StringVar(&opts.GuestID, "server", "", "only devices held by this server (guest id)")
	f.BoolVar(&opts.Unused, "unused", false, "only devices no server holds")
	f.BoolVar(&opts.Details, "details", false, "ask for details: the Host column, and the CDI name to give a container runtime")
	f.BoolVar(&unhealthy, "unhealthy", false, "only devices whose GPU's MPS is not serving (not handed out)")
	f.BoolVar(&pendingRemove, "pending-removal", false, "only devices their host no longer offers, kept while a server holds them")
	f.StringVar(&marker, "paging-marker", "", "page by marker instead of --offset: \"\" for the first page, then the NextMarker "+
		"the footer shows (each page costs the same however deep)")
	// Cloudpods' climc lists newest first; mpsctl keeps its creation order
	// unless asked.
	f.StringVar(&opts.Order, "order", "asc", "asc: oldest first (creation order), desc: newest first (as Cloudpods' climc lists)")
	page.register(cmd)
	return cmd
}

func (a *app) isolatedDeviceShowCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "isolated-device-show ID|NAME",
		Short: "Show one isolated device, by id or by name",
		Args:  cobra.ExactArgs(1),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			dev, err := a.client().GetIsolatedDevice(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("showing isolated device %s: %w", args[0], err)
			}
			if a.output == "json" {
				return writeJSON(a.stdout, api.IsolatedDeviceBody{IsolatedDevice: dev})
			}
			o, err := ToObject(dev)
			if err != nil {
				return err
			}
			_, err = fmt.Fprint(a.stdout, ShowTable(o))
			return err
		}),
	}
}
