package mpsctl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"

	"yunion.io/x/mps-daemon/pkg/inventory/client"
	"yunion.io/x/mps-daemon/pkg/webtls"
)

// errorLine is the one line mpsctl prints for a failed command. The server's
// own words come first, as in Cloudpods' climc, then the HTTP status and
// error class that a script or a bug report needs; a connection failure
// says where mpsctl looked and how to point it elsewhere, since the usual
// cause is a default URL on a machine that runs no inventory.
func (a *app) errorLine(err error) string {
	if apiErr, ok := errors.AsType[*client.APIError](err); ok {
		code := apiErr.Status
		if code == 0 {
			code = apiErr.Code
		}
		details := apiErr.Details
		if details == "" {
			details = apiErr.Error()
		}
		return oneLine(fmt.Sprintf("Error: %s (HTTP %d %s)", details, code, apiErr.Class))
	}
	if errors.Is(err, context.Canceled) {
		return "Error: interrupted"
	}
	if refused, ok := errors.AsType[*webtls.RefusedError](err); ok {
		advice := ""
		if refused.ServerCertificate {
			advice = fmt.Sprintf(" (--ca-file, %s or host.conf's mps_inventory_ca_file says whom to trust)", EnvCAFile)
		}
		return oneLine(fmt.Sprintf("Error: the inventory at %s: TLS refused: %s%s", a.endpoint.URL, refused.Cause, advice))
	}
	if cause, ok := a.unreachable(err); ok {
		return oneLine(fmt.Sprintf("Error: cannot reach the inventory at %s: %s (set --url or %s)",
			a.endpoint.URL, cause, EnvURL))
	}
	return oneLine("Error: " + err.Error())
}

// unreachable reports whether err means that no answer came back from the
// inventory, and the cause in the fewest words: the transport's error
// without the request line net/http puts in front of it, or the timeout
// that ran out.
func (a *app) unreachable(err error) (string, bool) {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Sprintf("no answer within %s", a.timeout), true
	}
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Err.Error(), true
	}
	if oe, ok := errors.AsType[*net.OpError](err); ok {
		return oe.Error(), true
	}
	return "", false
}
