// Package mpsctl is the command line client of the inventory. It keeps
// Cloudpods' climc command names, options and table layout so that an
// operator's habits and runbooks (`mpsctl isolated-device-list --host h1`)
// work unchanged against this project's inventory. It is called mpsctl, not
// climc, so that it never shadows Cloudpods' own climc on a host (see
// docs/inventory.md).
package mpsctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/inventory/client"
	"yunion.io/x/mps-daemon/pkg/version"
)

// Exit codes of Run.
const (
	ExitOK      = 0
	ExitRuntime = 1 // the command ran and failed: server error, unreachable inventory
	ExitUsage   = 2 // the command line is wrong
)

const rootLong = `mpsctl talks to the GPU inventory (Cloudpods' isolated_devices resource).

Finding the inventory, first match wins, for the URL and the token each:
  1. --url / --token
  2. the environment: MPS_INVENTORY_URL / MPS_INVENTORY_TOKEN
  3. host.conf (--host-conf, else MPS_HOST_CONF, else /etc/yunion/host.conf):
     mps_inventory_url, and mps_inventory_token_file or mps_inventory_token.
     A missing or unreadable host.conf is skipped silently; a broken one is
     skipped with a warning.
  4. ` + DefaultURL + `, and the admin token a local mps-inventory keeps in
     ` + config.DefaultInventoryTokenFile + ` (readable by root) when that file exists.

An https:// inventory's certificate is verified against --ca-file, else
MPS_INVENTORY_CA_FILE, else host.conf's mps_inventory_ca_file, else the
system's roots; --cert-file and --key-file (else host.conf's
mps_inventory_cert_file and mps_inventory_key_file) are presented when the
inventory asks for a client certificate.`

// runtimeError marks an error of a command that parsed and ran, so that Run
// can tell it (exit 1) from an error of the command line (exit 2).
type runtimeError struct{ err error }

func (e runtimeError) Error() string { return e.err.Error() }
func (e runtimeError) Unwrap() error { return e.err }

// app is one invocation: the streams, the environment and the global flags.
type app struct {
	env    func(string) string
	stdout io.Writer
	stderr io.Writer

	url      string
	token    string
	hostConf string
	timeout  time.Duration
	output   string
	// caFile, certFile and keyFile are --ca-file, --cert-file, --key-file.
	caFile, certFile, keyFile string

	// endpoint is resolved once the flags are parsed.
	endpoint endpoint
}

// Run executes mpsctl with args (without the program name) and returns the
// process exit code. env is os.Getenv in production; tests pass their own so
// that they can run in parallel without touching the process environment.
func Run(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) int {
	a := &app{env: env, stdout: stdout, stderr: stderr}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	if _, ok := errors.AsType[runtimeError](err); ok {
		fmt.Fprintln(stderr, a.errorLine(err))
		return ExitRuntime
	}
	fmt.Fprintf(stderr, "Error: %v\nRun 'mpsctl --help' for usage.\n", err)
	return ExitUsage
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "mpsctl",
		Short:         "Command line client of the GPU inventory",
		Long:          rootLong,
		Version:       version.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			return a.setup()
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true

	hostConfDefault := first(a.env(EnvHostConf), config.DefaultHostConfPath)
	f := root.PersistentFlags()
	f.StringVar(&a.url, "url", "", "inventory URL (env "+EnvURL+")")
	f.StringVar(&a.token, "token", "", "inventory bearer token (env "+EnvToken+")")
	f.StringVar(&a.hostConf, "host-conf", hostConfDefault, "host.conf to find the local inventory in (env "+EnvHostConf+")")
	f.StringVar(&a.caFile, "ca-file", "", "PEM file of the CAs that may sign an https:// inventory's certificate (env "+EnvCAFile+"; default: host.conf's mps_inventory_ca_file, else the system's roots)")
	f.StringVar(&a.certFile, "cert-file", "", "client certificate (PEM) to present when the inventory asks for one (default: host.conf's mps_inventory_cert_file)")
	f.StringVar(&a.keyFile, "key-file", "", "the client certificate's key (PEM)")
	f.DurationVar(&a.timeout, "timeout", 10*time.Second, "timeout of each request to the inventory")
	f.StringVarP(&a.output, "output", "o", "table", "output format: table or json")

	root.AddCommand(a.isolatedDeviceListCommand(), a.isolatedDeviceShowCommand(), a.hostListCommand())
	root.AddCommand(a.allocCommands()...)
	return root
}

// setup checks the global flags and finds the inventory. Its errors are
// usage errors.
func (a *app) setup() error {
	if a.output != "table" && a.output != "json" {
		return fmt.Errorf("invalid --output %q: want table or json", a.output)
	}
	if a.timeout <= 0 {
		return fmt.Errorf("invalid --timeout %s: must be positive", a.timeout)
	}
	ep, warnings := resolveEndpoint(endpointInputs{
		FlagURL:      a.url,
		FlagToken:    a.token,
		FlagCAFile:   a.caFile,
		FlagCertFile: a.certFile,
		FlagKeyFile:  a.keyFile,
		HostConf:     a.hostConf,
		Env:          a.env,
	}, config.LoadHostConf)
	for _, w := range warnings {
		fmt.Fprintln(a.stderr, w)
	}
	// From --url or MPS_INVENTORY_URL (host.conf's is checked by
	// pkg/config): a usage error.
	if err := client.CheckURL(ep.URL); err != nil {
		return fmt.Errorf("invalid %w", err)
	}
	if err := ep.TLS.Check(); err != nil {
		return fmt.Errorf("invalid %w", err)
	}
	a.endpoint = ep
	return nil
}

// client builds the inventory client. A command line tool does not retry:
// the user is waiting and can run it again.
func (a *app) client() *client.Client {
	return client.New(client.Options{
		URL:        a.endpoint.URL,
		Token:      a.endpoint.Token,
		Timeout:    a.timeout,
		Retries:    -1,
		HTTPClient: a.endpoint.TLS.HTTPClient(),
		Log:        slog.New(slog.DiscardHandler),
	})
}

// runE wraps a command body so that its errors count as runtime errors.
func runE(fn func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if err := fn(cmd, args); err != nil {
			return runtimeError{err}
		}
		return nil
	}
}
