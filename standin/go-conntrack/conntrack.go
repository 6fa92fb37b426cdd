// Package conntrack is this project's stand-in for
// github.com/mwitkow/go-conntrack, put in its place by go.mod's replace
// directive. It is our own code, not a copy: the four functions
// prometheus/common/config's HTTP client calls, which here dial with no
// tracing and no metrics.
//
// Why (issue 47, docs/operations.md "What the daemon costs"): the listeners'
// TLS comes from prometheus/exporter-toolkit, whose web package imports
// prometheus/common/config, which imports go-conntrack, which imports
// golang.org/x/net/trace. That package's init registers /debug/requests on
// net/http's default mux, so its HTML page, html/template, is linked into
// every binary, and html/template's reflection turns off the linker's
// pruning of unused methods: mps-daemon grew from 15.3 MB to 19.9 MB and
// its resident memory by 2.9 MB. Nothing of ours calls common/config's
// HTTP client (only its Secret type and JoinDir are used, by the toolkit's
// configuration parsing), so nothing dials through these functions; they
// still dial as asked if anything ever does. tests/arch checks that
// mps-daemon links neither x/net/trace nor html/template.
package conntrack

import (
	"context"
	"net"
)

// dialerOpts are what the options set.
type dialerOpts struct {
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// dialerOpt is an option of NewDialContextFunc.
type dialerOpt func(*dialerOpts)

// DialWithDialContextFunc dials with f.
func DialWithDialContextFunc(f func(ctx context.Context, network, addr string) (net.Conn, error)) dialerOpt {
	return func(o *dialerOpts) { o.dial = f }
}

// DialWithTracing is go-conntrack's tracing: none here.
func DialWithTracing() dialerOpt { return func(*dialerOpts) {} }

// DialWithName names the dialer in go-conntrack's metrics: none here.
func DialWithName(string) dialerOpt { return func(*dialerOpts) {} }

// NewDialContextFunc is a dial function as the options say (a
// net.Dialer's when none gives one).
func NewDialContextFunc(opts ...dialerOpt) func(ctx context.Context, network, addr string) (net.Conn, error) {
	o := &dialerOpts{dial: (&net.Dialer{}).DialContext}
	for _, opt := range opts {
		opt(o)
	}
	return o.dial
}
