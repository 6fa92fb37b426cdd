package mpsctl

import (
	"fmt"

	"github.com/spf13/cobra"

	"yunion.io/x/mps-daemon/pkg/inventory/client"
)

func (a *app) hostListCommand() *cobra.Command {
	var (
		page listFlags
		name string
	)
	cmd := &cobra.Command{
		Use:   "host-list",
		Short: "List the hosts registered in the inventory",
		Args:  cobra.NoArgs,
		PreRunE: func(*cobra.Command, []string) error {
			return page.check()
		},
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			list, err := a.client().ListHosts(cmd.Context(), client.ListHostsOptions{
				Name: name, Limit: page.limit, Offset: page.offset,
			})
			if err != nil {
				return fmt.Errorf("listing hosts: %w", err)
			}
			if a.output == "json" {
				return writeJSON(a.stdout, list)
			}
			rows, err := ToObjects(list.Hosts)
			if err != nil {
				return err
			}
			_, err = fmt.Fprint(a.stdout, ListTable(hostColumns(), rows,
				Page{Total: list.Total, Limit: list.Limit, Offset: list.Offset}))
			return err
		}),
	}
	cmd.Flags().StringVar(&name, "name", "", "only the host with this name")
	page.register(cmd)
	return cmd
}
