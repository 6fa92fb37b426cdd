package mpssim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/units"
)

const (
	gpuA = "GPU-6f63702a-74e5-3c6a-73cf-fa81fee82a9f"
	gpuB = "GPU-27771d49-33aa-a84b-baff-7e69ee768833"
)

// TestClientDevices is docs/gpu-runs/mps-probe-multi.txt's tables: which
// GPUs a client sees of its server, by its CUDA_VISIBLE_DEVICES.
func TestClientDevices(t *testing.T) {
	perGPU, single := []string{gpuB}, []string{gpuA, gpuB}
	for _, c := range []struct {
		name    string
		visible string
		set     bool
		server  []string
		want    []string
	}{
		{"unset: the server's one GPU", "", false, perGPU, perGPU},
		{"unset: every GPU of the single daemon", "", false, single, single},
		{"its UUID", gpuB, true, perGPU, perGPU},
		{"its UUID, hex in upper case", "GPU-27771D49-33AA-A84B-BAFF-7E69EE768833", true, perGPU, perGPU},
		{"gpu- in lower case names nothing", "gpu-27771d49-33aa-a84b-baff-7e69ee768833", true, perGPU, nil},
		{"ordinal 0 is the server's first", "0", true, perGPU, perGPU},
		{"ordinal 1 of a one-GPU server", "1", true, perGPU, nil},
		{"a GPU the server does not serve", gpuA, true, perGPU, nil},
		{"its GPU then another: the list ends at the other", gpuB + "," + gpuA, true, perGPU, perGPU},
		{"another then its GPU: nothing", gpuA + "," + gpuB, true, perGPU, nil},
		{"a UUID of no GPU", "GPU-00000000-0000-0000-0000-000000000000", true, perGPU, nil},
		{"empty", "", true, perGPU, nil},
		{"single: B alone", gpuB, true, single, []string{gpuB}},
		{"single: B then A", gpuB + "," + gpuA, true, single, []string{gpuB, gpuA}},
		{"single: ordinal 1 is B", "1", true, single, []string{gpuB}},
		{"a GPU twice ends the list (not measured)", gpuB + "," + gpuB, true, perGPU, perGPU},
		{"a signed ordinal (not measured)", "+0", true, perGPU, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := ClientDevices(c.visible, c.set, c.server); !slices.Equal(got, c.want) {
				t.Errorf("ClientDevices(%q, %v, %v) = %v, want %v", c.visible, c.set, c.server, got, c.want)
			}
		})
	}
}

// TestClientMemoryLimits is docs/gpu-runs/mps-probe-limits.txt's table: a
// client's own list lowers its server's limits, and one MPS cannot take
// lifts them all.
func TestClientMemoryLimits(t *testing.T) {
	one := []string{gpuB}
	six := []units.MiB{6144}
	for _, c := range []struct {
		name  string
		value string
		set   bool
		devs  []string
		base  []units.MiB
		want  []units.MiB
	}{
		{"unset: the server's", "", false, one, six, six},
		{"empty: the server's", "", true, one, six, six},
		{"lower, by ordinal", "0=2048M", true, one, six, []units.MiB{2048}},
		{"lower, by UUID", gpuB + "=2048M", true, one, six, []units.MiB{2048}},
		{"above the server's: the server's", "0=16G", true, one, six, six},
		{"an ordinal it does not see: none", "1=2048M", true, one, six, []units.MiB{0}},
		{"another GPU's UUID: none", gpuA + "=2048M", true, one, six, []units.MiB{0}},
		{"garbage: none", "x", true, one, six, []units.MiB{0}},
		{"0=0: none", "0=0", true, one, six, []units.MiB{0}},
		{"no ordinal: none", "2048M", true, one, six, []units.MiB{0}},
		{"its own, then one it does not see: none", "0=2048M,1=1M", true, one, six, []units.MiB{0}},
		{"one it does not see first: none", "1=1M,0=2048M", true, one, six, []units.MiB{0}},
		{"a server without a limit: the client's", "0=2048M", true, one, []units.MiB{0}, []units.MiB{2048}},
		{"two GPUs: only the named one lowered", "0=1024M", true, []string{gpuB, gpuA}, []units.MiB{8192, 4096}, []units.MiB{1024, 4096}},
		{"K is not taken (not measured)", "0=2048K", true, one, six, []units.MiB{0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := ClientMemoryLimits(c.value, c.set, c.devs, c.base); !slices.Equal(got, c.want) {
				t.Errorf("ClientMemoryLimits(%q, %v) = %v, want %v", c.value, c.set, got, c.want)
			}
		})
	}
}

// TestConnectSingleDaemon: a client of the single daemon that sees only
// GPU B is held to ordinal 0's limit, as measured, not to the limit the
// daemon holds for B's ordinal.
func TestConnectSingleDaemon(t *testing.T) {
	s := New(nil)
	env := mps.Env{PipeDir: filepath.Join(t.TempDir(), "p"), VisibleDevices: gpuA + "," + gpuB, Single: true}
	if err := s.Start(t.Context(), env); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"set_default_device_pinned_mem_limit 0 8G", "set_default_device_pinned_mem_limit 1 4G"} {
		if _, err := s.Run(t.Context(), env, cmd); err != nil {
			t.Fatal(err)
		}
	}
	pipe := "CUDA_MPS_PIPE_DIRECTORY=" + env.PipeDir
	v, err := s.Connect(101, []string{pipe, "CUDA_VISIBLE_DEVICES=" + gpuB})
	if err != nil || !slices.Equal(v.Devices, []string{gpuB}) || !slices.Equal(v.MemoryLimits, []units.MiB{8192}) {
		t.Fatalf("client of B alone = %+v, %v; want B under ordinal 0's 8 GiB", v, err)
	}
	v, err = s.Connect(102, []string{pipe})
	if err != nil || !slices.Equal(v.Devices, []string{gpuA, gpuB}) || !slices.Equal(v.MemoryLimits, []units.MiB{8192, 4096}) {
		t.Fatalf("client without CUDA_VISIBLE_DEVICES = %+v, %v; want both, each under its ordinal's limit", v, err)
	}
	if out, err := s.Run(t.Context(), env, "get_server_list"); err != nil || out.Stdout != fmt.Sprintf("%d\n", v.ServerPID) {
		t.Fatalf("get_server_list = %q, %v; want the one server both connected to, %d", out.Stdout, err, v.ServerPID)
	}
	if _, err := s.Connect(103, []string{pipe, "CUDA_VISIBLE_DEVICES=2"}); !errors.Is(err, ErrNoDevice) {
		t.Fatalf("client of ordinal 2 = %v, want ErrNoDevice", err)
	}
	if _, err := s.Connect(104, []string{"CUDA_VISIBLE_DEVICES=" + gpuB}); !errors.Is(err, mps.ErrNoDaemon) {
		t.Fatalf("client without a pipe directory = %v, want ErrNoDaemon", err)
	}
}

// A connecting client is logged in its daemon's control.log as the real
// one logs it (docs/gpu-runs/mps-probe-escape.txt): two NEW CLIENT lines
// each, the first of the client that starts the server saying so, which
// pkg/mps reads as the real daemon's.
func TestConnectLogsNewClientLines(t *testing.T) {
	dir := t.TempDir()
	s := New(nil)
	env := mps.Env{PipeDir: filepath.Join(dir, "p"), LogDir: filepath.Join(dir, "l"), VisibleDevices: gpuB}
	if err := s.Start(t.Context(), env); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Connect(7001, []string{"CUDA_MPS_PIPE_DIRECTORY=" + env.PipeDir}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddClient(env.PipeDir, 7002); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(mps.ControlLog(env))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range strings.Split(string(raw), "\n") {
		nc, err := mps.ParseNewClient([]byte(l), nil)
		if errors.Is(err, mps.ErrNotNewClient) {
			continue
		}
		if err != nil || time.Since(nc.At) > time.Minute || time.Since(nc.At) < -time.Second {
			t.Fatalf("line %q: %+v, %v", l, nc, err)
		}
		_, msg, _ := strings.Cut(l, ": ")
		got = append(got, fmt.Sprintf("%d %d %s", nc.PID, nc.UID, msg))
	}
	want := []string{
		"7001 0 Server is not ready, push client to pending list", "7001 0 Server already exists",
		"7002 0 Server already exists", "7002 0 Server already exists",
	}
	if !slices.Equal(got, want) {
		t.Errorf("NEW CLIENT lines %q, want %q", got, want)
	}
}
