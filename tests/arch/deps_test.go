package arch

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// kubernetesModules are what the Kubernetes mode links: client-go, the
// kubelet plugin library, their API types, and gRPC under them.
var kubernetesModules = []string{"k8s.io/", "sigs.k8s.io/", "google.golang.org/grpc"}

// ttrpcGRPC are the packages of gRPC that containerd's ttrpc, which NRI's
// plugin stub talks over (pkg/nri, issue 45), uses for its error codes:
// codes, status and what they import, none of gRPC's transport, client or
// server (measured: bin/mps-daemon grew 0.68 MB with the plugin, amd64,
// 2026-11-29).
var ttrpcGRPC = map[string]bool{
	"google.golang.org/grpc/codes": true, "google.golang.org/grpc/status": true, "google.golang.org/grpc/internal/status": true,
	"google.golang.org/grpc/grpclog": true, "google.golang.org/grpc/grpclog/internal": true, "google.golang.org/grpc/connectivity": true,
	"google.golang.org/grpc/serviceconfig": true, "google.golang.org/grpc/internal": true,
}

// depsOf lists the packages the daemon's binary links, built with tags as
// the Makefile builds it (go list -deps: what the linker is given).
func depsOf(t *testing.T, tags string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "list", "-deps", "-tags", tags, "./cmd/mps-daemon")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps -tags %s: %v", tags, err)
	}
	return strings.Fields(string(out))
}

// linked are the packages of deps in one of modules.
func linked(deps, modules []string) []string {
	var out []string
	for _, d := range deps {
		for _, m := range modules {
			if strings.HasPrefix(d, m) {
				out = append(out, d)
			}
		}
	}
	return out
}

// Issue 40, as tailscale's depaware keeps its binaries' dependencies: the
// Cloudpods daemon (bin/mps-daemon, make build's tags) links no Kubernetes
// module and no gRPC, which would make it four times the size and run
// their package initialisers on every Cloudpods host. The Kubernetes build
// (make build-kubernetes) does link them: the test sees what it guards.
func TestTheCloudpodsDaemonLinksNoKubernetes(t *testing.T) {
	var got []string
	for _, p := range linked(depsOf(t, "netgo,osusergo"), kubernetesModules) {
		if !ttrpcGRPC[p] {
			got = append(got, p)
		}
	}
	if len(got) > 0 {
		t.Errorf("bin/mps-daemon links %d packages of Kubernetes or gRPC (keep them behind the kubernetes tag, in pkg/dra and cmd/mps-daemon/dra.go): %v", len(got), got)
	}
	if got := linked(depsOf(t, "netgo,osusergo,kubernetes"), kubernetesModules); len(got) < 10 {
		t.Errorf("the Kubernetes build links only %v: the list is not what it guards", got)
	}
}

// Issue 47: exporter-toolkit (TLS and basic auth on the listeners) comes
// with prometheus/common/config, whose go-conntrack imports
// golang.org/x/net/trace: its init links html/template, whose reflection
// keeps every exported method of every linked type; 4.6 MB more binary
// and 2.9 MB more resident memory in mps-daemon. go.mod replaces
// go-conntrack by our stand-in (standin/go-conntrack), which imports
// neither; this keeps it so.
func TestTheDaemonLinksNoHTMLTemplate(t *testing.T) {
	deps := depsOf(t, "netgo,osusergo,nethttpomithttp2")
	if got := linked(deps, []string{"golang.org/x/net/trace", "html/template"}); len(got) > 0 {
		t.Errorf("bin/mps-daemon links %v (see standin/go-conntrack/conntrack.go)", got)
	}
	if got := linked(deps, []string{"github.com/prometheus/exporter-toolkit/web"}); len(got) == 0 {
		t.Errorf("bin/mps-daemon does not link exporter-toolkit's web package: the guard guards nothing")
	}
}
