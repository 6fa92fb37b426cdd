package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/loopback"
	"yunion.io/x/mps-daemon/pkg/statusview"
	"yunion.io/x/mps-daemon/pkg/webtls"
)

// statusFlags are `mps-daemon status`'s own flags.
type statusFlags struct {
	address, user, passwordFile, certFile, keyFile string
	timeout                                        time.Duration
}

// statusCommand is `mps-daemon status`: what the running daemon last did,
// read from its /status (mps_listen_address of host.conf, or --address).
// Behind mps_web_config_file it speaks TLS, trusting the very certificate
// the file names (webtls.LocalClient), with the user, password and client
// certificate given.
func statusCommand(f *flags) *cobra.Command {
	var sf statusFlags
	c := &cobra.Command{
		Use:   "status",
		Short: "Summarise the running daemon: GPUs, MPS state, virtual devices with cap, use and guest, last error",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := statusSource(f.config, sf)
			if err != nil {
				return err
			}
			st, err := d.Fetch(cmd.Context(), sf.timeout)
			if err != nil {
				return err
			}
			return statusview.Write(cmd.OutOrStdout(), st, time.Now())
		},
	}
	fl := c.Flags()
	fl.StringVar(&sf.address, "address", "", "the daemon's host:port, or its URL (default: mps_listen_address of host.conf, over TLS when mps_web_config_file says so)")
	fl.DurationVar(&sf.timeout, "timeout", 5*time.Second, "how long to wait for the daemon's answer")
	fl.StringVar(&sf.user, "user", "", "basic auth user, when mps_web_config_file has basic_auth_users")
	fl.StringVar(&sf.passwordFile, "password-file", "", "file holding --user's password")
	fl.StringVar(&sf.certFile, "cert-file", "", "client certificate (PEM), when mps_web_config_file asks for one")
	fl.StringVar(&sf.keyFile, "key-file", "", "the client certificate's key (PEM)")
	return c
}

// statusSource is where and how to read the daemon's /status.
func statusSource(hostConf string, sf statusFlags) (statusview.Daemon, error) {
	d := statusview.Daemon{Address: sf.address, User: sf.user}
	if sf.user != "" {
		if sf.passwordFile == "" {
			return d, errors.New("--user needs --password-file")
		}
		b, err := os.ReadFile(sf.passwordFile)
		if err != nil {
			return d, fmt.Errorf("--password-file: %w", err)
		}
		d.Password = strings.TrimRight(string(b), "\r\n")
	}
	cert := webtls.Client{CertFile: sf.certFile, KeyFile: sf.keyFile, CertSetting: "--cert-file"}
	if d.Address != "" {
		if cert.Configured() {
			d.HTTP = cert.HTTPClient()
		}
		return d, nil
	}
	hc, err := config.LoadHostConf(hostConf)
	if err != nil {
		return d, fmt.Errorf("finding the daemon's address (or give --address): %w", err)
	}
	if hc.ListenAddress == "" {
		return d, errors.New("mps_listen_address is empty: the daemon serves no status (give --address)")
	}
	addr, err := loopback.Address(hc.ListenAddress)
	if err != nil {
		return d, fmt.Errorf("mps_listen_address: %w", err)
	}
	wc, err := hc.Listener().Check()
	if err != nil {
		return d, err
	}
	if d.HTTP, err = wc.LocalClient(cert); err != nil {
		return d, err
	}
	d.Address = wc.Scheme() + "://" + addr
	return d, nil
}
