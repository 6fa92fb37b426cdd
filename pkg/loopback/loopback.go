// Package loopback says where a client on the same host reaches a server
// that listens on a given address: `mps-daemon status` the daemon's
// mps_listen_address, mps-inventory's watchdog its own --listen. It
// imports nothing of ours.
package loopback

import (
	"fmt"
	"net"
)

// Address is the host:port to dial for a server listening on listen
// (host:port). A wildcard host is reached on the loopback of its family:
// an empty host or 0.0.0.0 on 127.0.0.1, :: on ::1; any other host is
// dialled as it is.
func Address(listen string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("listen address %q: %w", listen, err)
	}
	switch ip := net.ParseIP(host); {
	case host == "":
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified() && ip.To4() != nil:
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified():
		host = "::1"
	}
	return net.JoinHostPort(host, port), nil
}
