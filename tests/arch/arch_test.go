// Package arch checks the boundaries the design rests on: cgo (go-nvml) only
// in the NVML packages, simulators only in tests and the --simulate wiring,
// os/exec only in the MPS package, the API types a leaf, the status types
// only at the status edge, and dependencies pointing one way.
package arch

import (
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "yunion.io/x/mps-daemon/"

// fileImports maps each non-test Go file (relative to the module root) to
// the set of packages it imports.
func fileImports(t *testing.T) map[string]map[string]bool {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]bool{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin") {
				return filepath.SkipDir
			}
			// Another module (tools/, standin/'s stand-ins) is not ours to map.
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && path != root {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		out[rel] = map[string]bool{}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			out[rel][p] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// imports maps each non-test Go package directory (relative to the module
// root) to the set of packages its files import.
func imports(t *testing.T) map[string]map[string]bool {
	t.Helper()
	out := map[string]map[string]bool{}
	for file, imps := range fileImports(t) {
		dir := filepath.Dir(file)
		if out[dir] == nil {
			out[dir] = map[string]bool{}
		}
		for p := range imps {
			out[dir][p] = true
		}
	}
	if len(out) < 10 {
		t.Fatalf("found only %d packages: wrong root?", len(out))
	}
	return out
}

func TestOnlyTheNVMLPackagesUseCgoAndGoNVML(t *testing.T) {
	for dir, imps := range imports(t) {
		for p := range imps {
			if (p == "C" || strings.HasPrefix(p, "github.com/NVIDIA/go-nvml")) && dir != "pkg/gpu/nvml" && dir != "pkg/gpu/nvmlsim" {
				t.Errorf("%s imports %s: cgo and go-nvml belong in the NVML packages (pkg/gpu/nvml, pkg/gpu/nvmlsim) only", dir, p)
			}
		}
	}
}

func TestOnlyTheMPSPackageRunsCommands(t *testing.T) {
	for dir, imps := range imports(t) {
		// Test harnesses (tests/, internal/testsupport/) start real programs.
		if imps["os/exec"] && dir != "pkg/mps" && !testSupport(dir) {
			t.Errorf("%s imports os/exec: running programs belongs in pkg/mps", dir)
		}
	}
}

// leaves are data and small helpers anything may import; they import
// nothing of ours but what is listed here. pkg/api (the REST types) and
// pkg/status (the daemon's /status) are the data every side reads, so the
// daemon, metrics, the status view and the CLI never go through each other
// (pkg/status is read only at the status edge, though: see
// TestOnlyTheStatusEdgeImportsStatus). pkg/clientreport is what the
// accounting reports of an MPS client, in the one type the accounting works
// with and /status carries; it imports pkg/gpu for gpu.UUID alone.
var leaves = map[string][]string{
	"pkg/api":          {},
	"pkg/status":       {"pkg/pci", "pkg/units", "pkg/clientreport"},
	"pkg/clientreport": {"pkg/gpu", "pkg/units"},
	"pkg/loopback":     {},
	"pkg/units":        {},
	"pkg/pci":          {},
	"pkg/atomicfile":   {},
	// restcall tells a refused TLS connection in words (webtls.Refusal);
	// webtls is TLS for every listener and client (exporter-toolkit's web
	// configuration, CA and client certificate files), and the listeners
	// themselves (webtls.Listener: mps-inventory's and the daemon's, the
	// daemon's served by cmd/mps-daemon, not by pkg/agent); it reads the
	// files an operator names through atomicfile's bounded reader.
	"pkg/restcall": {"pkg/webtls"},
	"pkg/webtls":   {"pkg/atomicfile"},
	"pkg/systemd":  {},
	"pkg/version":  {},
	"pkg/logging":  {},
}

func isLeaf(dir string) bool {
	_, ok := leaves[dir]
	return ok
}

func TestDependenciesPointOneWay(t *testing.T) {
	// Which of our packages each package may import besides the leaves.
	// cmd/* wires anything.
	allowed := map[string][]string{
		"pkg/gpu":              {},
		"pkg/gpu/nvml":         {"pkg/gpu"},
		"pkg/gpu/nvmlsim":      {"pkg/gpu", "pkg/gpu/nvml"},
		"pkg/config":           {},
		"pkg/vdev":             {"pkg/gpu"},
		"pkg/plan":             {"pkg/config", "pkg/gpu", "pkg/vdev"},
		"pkg/mps":              {},
		"pkg/mps/mpssim":       {"pkg/mps"},
		"pkg/inventory/store":  {},
		"pkg/inventory/server": {"pkg/inventory/store", "pkg/metrics"},
		"pkg/devsync":          {},
		"pkg/inventory/client": {"pkg/devsync"},
		"pkg/mpsctl":           {"pkg/config", "pkg/inventory/client"},
		"pkg/identity":         {"pkg/gpu", "pkg/vdev"},
		// Which Cloudpods pod a process is in, from its cgroup and
		// containerd's bundle (issue 45): files only, nothing of ours.
		"pkg/pod": {},
		// The NRI plugin: a Cloudpods pod's containers given their
		// slice's CDI edits (issue 45), as pkg/cdi builds them.
		"pkg/nri":        {"pkg/cdi", "pkg/gpu"},
		"pkg/accounting": {"pkg/config", "pkg/gpu", "pkg/vdev", "pkg/identity", "pkg/pod"},
		"pkg/view":       {"pkg/gpu", "pkg/vdev"},
		"pkg/cdi":        {"pkg/gpu", "pkg/vdev", "pkg/identity", "pkg/view"},
		"pkg/claim":      {"pkg/cdi", "pkg/vdev"},
		// The one entries step, for the agent's devices and the claims'
		// alike: identity file, view, then the CDI entry mounting both;
		// which views are the claims' is pkg/claim's.
		"pkg/entries": {"pkg/cdi", "pkg/claim", "pkg/identity", "pkg/vdev", "pkg/view"},
		// The one edge from the agent to every backend: what a reconcile
		// offers (the plan per GPU: its sharing, as config names it, and
		// its devices as the CDI spec makes their entries; where claims'
		// entries go) and what the backend answers (its holdings per
		// device, claims' own devices). Rows and their sync (pkg/devsync)
		// stay inside the rows backend (rows.go).
		"pkg/backend": {"pkg/cdi", "pkg/claim", "pkg/config", "pkg/devsync", "pkg/entries", "pkg/gpu", "pkg/vdev"},
		// The accounting's station: pkg/accounting's passes in a loop of
		// their own, the control logs followed (pkg/mps: clients as they
		// connect, commands another program sent, put back), the use
		// written into the views, Cloudpods' pods found (pkg/pod) and
		// billed to what their servers hold, its part of /status.
		"pkg/acctloop": {"pkg/accounting", "pkg/claim", "pkg/config", "pkg/gpu", "pkg/mps", "pkg/pod", "pkg/vdev", "pkg/view"},
		// The agent, a row of stations: the plan (and its config and GPUs),
		// MPS, the entries, the edge, the accounting's station (and the
		// Accountant it wires), the NRI plugin it hands the held slices'
		// entries (pkg/nri), its metrics. No row, no sync of rows, no view
		// or identity file of its own: those are the stations' packages'.
		"pkg/agent":      {"pkg/config", "pkg/gpu", "pkg/plan", "pkg/vdev", "pkg/mps", "pkg/accounting", "pkg/acctloop", "pkg/cdi", "pkg/metrics", "pkg/backend", "pkg/entries", "pkg/nri"},
		"pkg/metrics":    {},
		"pkg/statusview": {},
		"pkg/keystone":   {},
		"pkg/region":     {"pkg/keystone", "pkg/devsync"},
		// The ledger of prepared claims: plain Go (no Kubernetes, no rows),
		// the offer's GPUs in and holdings out, each claim's own device
		// made by pkg/claim and its entries written by pkg/entries as a
		// virtual device's are.
		"pkg/ledger": {"pkg/backend", "pkg/claim", "pkg/cdi", "pkg/entries", "pkg/gpu", "pkg/vdev"},
		// The Kubernetes DRA driver is a backend on the edge, the kubelet
		// plugin over the ledger; its sharing attribute's values are
		// config's.
		"pkg/dra": {"pkg/backend", "pkg/ledger", "pkg/cdi", "pkg/config", "pkg/gpu", "pkg/vdev"},
	}
	for leaf, deps := range leaves {
		allowed[leaf] = deps
	}
	for dir, imps := range imports(t) {
		if strings.HasPrefix(dir, "cmd/") || testSupport(dir) {
			continue
		}
		ok, known := allowed[dir]
		if !known {
			t.Errorf("package %s is not in the dependency map of tests/arch: add it with what it may import", dir)
			continue
		}
		for p := range imps {
			if !strings.HasPrefix(p, module) {
				continue
			}
			ours := strings.TrimPrefix(p, module)
			_, leaf := leaves[ours]
			found := leaf && !isLeaf(dir)
			for _, a := range ok {
				found = found || a == ours
			}
			if !found {
				t.Errorf("%s imports %s, against the direction of dependencies", dir, ours)
			}
		}
	}
}

// Status types only at the status edge: the packages that do the work hold
// their own types, and share with /status only the leaves (what the
// accounting reports of a client is pkg/clientreport's, which /status
// carries as it is). pkg/status is imported only where /status is set
// (pkg/agent, and pkg/acctloop, the accounting's station, which fills its
// part), or read (pkg/metrics, pkg/statusview), and by cmd/.
func TestOnlyTheStatusEdgeImportsStatus(t *testing.T) {
	edge := map[string]bool{"pkg/agent": true, "pkg/acctloop": true, "pkg/metrics": true, "pkg/statusview": true}
	for dir, imps := range imports(t) {
		if imps[module+"pkg/status"] && !edge[dir] && !strings.HasPrefix(dir, "cmd/") && !testSupport(dir) {
			t.Errorf("%s imports pkg/status: only the status edge (%v, cmd/) may; working types of its own, or a leaf shared with /status", dir, slices.Sorted(maps.Keys(edge)))
		}
	}
}

// What the accounting reports of an MPS client (an unknown process, a
// mismatch, a QoS escape, the QoS its environment asks for) is one type
// each, declared in pkg/clientreport: the accounting embeds them where it
// keeps more, /status carries them as they are, and no twin is copied
// field by field between the two. No other package declares a field with
// their JSON names.
func TestClientReportsDeclaredOnlyInClientReport(t *testing.T) {
	fields := []string{`json:"environment`, `json:"unreadable`, `json:"twice`, `json:"set"`}
	eachSource(t, []string{"pkg", "cmd"}, func(rel, src string) {
		if filepath.Dir(rel) == "pkg/clientreport" {
			return
		}
		for _, f := range fields {
			if strings.Contains(src, f) {
				t.Errorf("%s declares a field tagged %s...: what the accounting reports of a client is pkg/clientreport's (embed it)", rel, f)
			}
		}
	})
}

// Code that has no reason to know Kubernetes does not import it: the
// ledger of prepared claims, the edge and the agent are plain Go; only
// pkg/dra and the Kubernetes build's wiring (cmd/mps-daemon/dra.go) import
// k8s.io and gRPC.
func TestOnlyTheKubeletPluginImportsKubernetes(t *testing.T) {
	for file, imps := range fileImports(t) {
		dir := filepath.Dir(file)
		if dir == "pkg/dra" || file == "cmd/mps-daemon/dra.go" || testSupport(dir) {
			continue
		}
		for p := range imps {
			if strings.HasPrefix(p, "k8s.io/") || strings.HasPrefix(p, "google.golang.org/grpc") || strings.HasPrefix(p, "sigs.k8s.io/") {
				t.Errorf("%s imports %s: only the kubelet plugin (pkg/dra) and its wiring know Kubernetes", file, p)
			}
		}
	}
}

// The sync of a host's devices is written once, in pkg/devsync, over a
// port each backend implements: the agent drives the backends through the
// edge (pkg/backend: the rows backend alone turns the plan into rows) and
// no backend borrows another's code.
func TestBackendsShareOnlyTheSync(t *testing.T) {
	imps := imports(t)
	for _, dir := range []string{"pkg/agent", "pkg/region", "pkg/inventory/client"} {
		for _, other := range []string{"pkg/inventory/client", "pkg/region", "pkg/inventory/server", "pkg/inventory/store"} {
			if dir != other && imps[dir][module+other] {
				t.Errorf("%s imports %s: a backend is reached through pkg/devsync's port and the agent's edge (backend.Rows), wired in cmd/", dir, other)
			}
		}
		if dir != "pkg/agent" && !imps[dir][module+"pkg/devsync"] {
			t.Errorf("%s does not import pkg/devsync: its sync must be devsync.Sync over its port", dir)
		}
	}
	// Rows, and the rows' sync, stay behind the rows backend: the agent,
	// the ledger of claims and the kubelet plugin speak the plan and the
	// holdings.
	for _, dir := range []string{"pkg/agent", "pkg/ledger", "pkg/dra"} {
		for _, rows := range []string{"pkg/api", "pkg/devsync"} {
			if imps[dir][module+rows] {
				t.Errorf("%s imports %s: rows and their sync are the rows backend's (pkg/backend/rows.go); the edge speaks the plan and the holdings", dir, rows)
			}
		}
	}
}

// The device record is spelled once: only pkg/api declares struct fields
// with its JSON names (the record, api.IsolatedDevice, and the change to
// it, api.DevicePatch); the server decodes, the store applies, the clients
// send and the region reads those types, embedding them where they add
// fields of their own.
func TestDeviceRecordDeclaredOnlyInAPI(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	fields := []string{`json:"vendor_device_id`, `json:"mps_memory_limit`, `json:"mps_thread_percentage`, `json:"device_path`}
	err = filepath.WalkDir(filepath.Join(root, "pkg"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if filepath.Dir(rel) == "pkg/api" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, f := range fields {
			if strings.Contains(string(b), f) {
				t.Errorf("%s declares a field tagged %s...: the device record and its patch are pkg/api's (embed them)", rel, f)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// eachSource calls f with each non-test Go file under dirs (relative to
// the module root) and its content.
func eachSource(t *testing.T, dirs []string, f func(rel, src string)) {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range dirs {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			f(rel, string(b))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// A field of the device record needs no code of its own to reach the
// inventory's columns (a new one added at Open, no migration file), its
// PUTs, mpsctl's JSON and a region: a field the daemon reports, as
// Cloudpods' mps_memory_total, is spelled outside tests only in the record
// and its patch (pkg/api/api.go), where the daemon sets it
// (the rows backend, pkg/backend/rows.go), in the store's check of its value
// (validateDevice), and in the benchmark loader's rows.
func TestAddingARecordFieldTouchesThreeFiles(t *testing.T) {
	allowed := map[string]bool{"pkg/api/api.go": true, "pkg/backend/rows.go": true,
		"pkg/inventory/store/devices.go": true, "cmd/mps-inventory-bench/shape.go": true}
	eachSource(t, []string{"pkg", "cmd"}, func(rel, src string) {
		if (strings.Contains(src, "MPSMemoryTotal") || strings.Contains(src, "mps_memory_total")) && !allowed[rel] {
			t.Errorf("%s spells mps_memory_total: a record field reaches the backends through pkg/api's record and patch alone", rel)
		}
	})
}

// A GPU's UUID is a gpu.UUID wherever the daemon holds one, as a virtual
// device's name is a vdev.Name: the packages that work with GPUs declare
// no UUID (uuid, gpuUUID, UUID, GPU, uuids, gpus) as a string. It is a
// string only at the edges: the rows of pkg/api, /status (but for the
// clients the accounting reports: pkg/clientreport keeps the gpu.UUID, which
// JSON writes as the string it is), the MPS control's environment and
// arguments (pkg/mps, which imports no GPU package), the DRA driver's and
// metrics' labels.
func TestGPUUUIDsAreTyped(t *testing.T) {
	asString := regexp.MustCompile(`\b(uuid|gpuUUID|UUID|GPU|uuids|gpus)\s+(\[\])?string\b`)
	dirs := []string{"pkg/gpu", "pkg/vdev", "pkg/plan", "pkg/identity", "pkg/view", "pkg/accounting", "pkg/clientreport", "pkg/cdi", "pkg/claim", "pkg/entries", "pkg/backend", "pkg/acctloop", "pkg/agent"}
	eachSource(t, dirs, func(rel, src string) {
		for i, line := range strings.Split(src, "\n") {
			if m := asString.FindString(line); m != "" && !strings.HasPrefix(strings.TrimSpace(line), "//") && !strings.Contains(line, "type UUID string") {
				t.Errorf("%s:%d: %q: a GPU UUID is a gpu.UUID", rel, i+1, m)
			}
		}
	})
}

// simulators stand in for the GPU and MPS where there is none: tests use
// them, and the --simulate wiring of cmd/mps-daemon (wire.go), nothing else.
var simulators = []string{"pkg/mps/mpssim", "pkg/gpu/nvmlsim"}

const simulateWiring = "cmd/mps-daemon/wire.go"

func TestOnlyTheSimulateWiringImportsSimulators(t *testing.T) {
	for file, imps := range fileImports(t) {
		for _, sim := range simulators {
			if imps[module+sim] && file != simulateWiring && !testSupport(filepath.Dir(file)) && filepath.Dir(file) != sim {
				t.Errorf("%s imports the simulator %s: only tests and mps-daemon's --simulate wiring (%s) may", file, sim, simulateWiring)
			}
		}
	}
}

func TestMainsAreThin(t *testing.T) {
	entries, err := os.ReadDir("../../cmd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("../../cmd", e.Name(), "main.go"))
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(b), "\n"); n > 200 {
			t.Errorf("cmd/%s/main.go has %d lines: wiring only, logic belongs in pkg/", e.Name(), n)
		}
	}
}

// testSupport is code only tests use: tests/ and internal/testsupport/.
func testSupport(dir string) bool {
	return strings.HasPrefix(dir, "tests/") || strings.HasPrefix(dir, "internal/testsupport/")
}
