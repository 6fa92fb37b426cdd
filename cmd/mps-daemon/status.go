package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/loopback"
	"yunion.io/x/mps-daemon/pkg/statusview"
)

// statusCommand is `mps-daemon status`: what the running daemon last did,
// read from its /status (mps_listen_address of host.conf, or --address).
func statusCommand(f *flags) *cobra.Command {
	var address string
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "status",
		Short: "Summarise the running daemon: GPUs, MPS state, virtual devices with cap, use and guest, last error",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if address == "" {
				hc, err := config.LoadHostConf(f.config)
				if err != nil {
					return fmt.Errorf("finding the daemon's address (or give --address): %w", err)
				}
				if hc.ListenAddress == "" {
					return errors.New("mps_listen_address is empty: the daemon serves no status (give --address)")
				}
				if address, err = loopback.Address(hc.ListenAddress); err != nil {
					return fmt.Errorf("mps_listen_address: %w", err)
				}
			}
			st, err := statusview.Fetch(cmd.Context(), address, timeout)
			if err != nil {
				return err
			}
			return statusview.Write(cmd.OutOrStdout(), st, time.Now())
		},
	}
	c.Flags().StringVar(&address, "address", "", "the daemon's host:port (default: mps_listen_address of host.conf)")
	c.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "how long to wait for the daemon's answer")
	return c
}
