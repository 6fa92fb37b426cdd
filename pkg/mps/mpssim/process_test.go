package mpssim

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"

	"yunion.io/x/mps-daemon/pkg/mps"
)

// TestMain doubles as the helper process of TestSimSharedAcrossProcesses: run
// with MPS_SIM_HELPER_PIPE_DIR set, the test binary adds simulated clients
// to that pipe directory and exits.
func TestMain(m *testing.M) {
	if dir := os.Getenv("MPS_SIM_HELPER_PIPE_DIR"); dir != "" {
		os.Exit(simHelper(dir, os.Getenv("MPS_SIM_HELPER_FIRST_PID")))
	}
	os.Exit(m.Run())
}

const helperClients = 25

func simHelper(dir, first string) int {
	base, err := strconv.Atoi(first)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	s := New(nil)
	for i := range helperClients {
		if _, err := s.AddClient(dir, base+i); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

// TestSimSharedAcrossProcesses has several processes (and goroutines here)
// add clients to one simulated daemon at once: the file lock must keep every
// one of them.
func TestSimSharedAcrossProcesses(t *testing.T) {
	s, env := startSim(t)
	const processes = 3
	var wg sync.WaitGroup
	errs := make(chan error, processes+1)
	for p := range processes {
		wg.Go(func() {
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "MPS_SIM_HELPER_PIPE_DIR="+env.PipeDir,
				"MPS_SIM_HELPER_FIRST_PID="+strconv.Itoa(100000+p*1000))
			if out, err := cmd.CombinedOutput(); err != nil {
				errs <- fmt.Errorf("helper %d: %v: %s", p, err, out)
			}
		})
	}
	wg.Go(func() {
		other := New(nil) // a second runner in this process, too
		for i := range helperClients {
			if _, err := other.AddClient(env.PipeDir, 200000+i); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	servers, err := s.Run(t.Context(), env, "get_server_list")
	if err != nil {
		t.Fatal(err)
	}
	pids, err := mps.ParsePIDList(servers.Stdout)
	if err != nil || len(pids) != 1 {
		t.Fatalf("servers %v (%v), want exactly one lazy server", pids, err)
	}
	out, err := s.Run(t.Context(), env, "get_client_list "+strconv.Itoa(pids[0]))
	if err != nil {
		t.Fatal(err)
	}
	clients, err := mps.ParsePIDList(out.Stdout)
	if err != nil {
		t.Fatal(err)
	}
	if want := (processes + 1) * helperClients; len(clients) != want {
		t.Fatalf("server has %d clients, want %d: concurrent updates were lost", len(clients), want)
	}
}
