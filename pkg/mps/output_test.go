package mps

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/pkg/units"
)

// The answers below are the texts of docs/gpu-runs/mps-probe*.txt.

func TestCheckOutput(t *testing.T) {
	cases := []struct {
		command string
		out     Output
		want    error // nil: not a failure
	}{
		{"get_server_list", Output{Stderr: "Cannot find MPS control daemon process\n", ExitCode: 1}, ErrNoDaemon},
		{"nosuchcommand", Output{Stdout: "Unknown command \"nosuchcommand\"\n"}, ErrUnknownCommand},
		{"get_server_status", Output{Stdout: "A server PID is required\n"}, ErrPIDRequired},
		{"get_server_status 999999", Output{Stdout: "Server 999999 not found\n"}, ErrServerNotFound},
		{"get_client_list", Output{Stdout: "Server 0 not found\n"}, ErrServerNotFound},
		{"ps", Output{Stdout: "Server not found\n"}, ErrServerNotFound},
		{"terminate_client 999999", Output{Stdout: "Server 999999 not found\nServer 999999 not found!\n1\n"}, ErrServerNotFound},
		{"get_device_pinned_mem_limit 0", Output{Stdout: "Invalid command format.\n"}, ErrInvalidCommand},
		{"get_server_list", Output{}, nil},
		{"get_server_list", Output{Stdout: "1066\n"}, nil},
		{"get_default_active_thread_percentage", Output{Stdout: "100.0\n"}, nil},
		{"get_server_status 1066", Output{Stdout: "ACTIVE\n"}, nil},
		{"terminate_client 1066 981", Output{Stdout: "0\n"}, nil},
		{"get_device_client_list", Output{Stdout: "[0] 00:00.0, NVIDIA H200\n981.1\n"}, nil},
		{"ps", Output{Stdout: "PID       ID        SERVER         DEVICE                    NAMESPACE      COMMAND        \n"}, nil},
	}
	for _, c := range cases {
		t.Run(c.command+"/"+strings.TrimSpace(c.out.Stdout+c.out.Stderr), func(t *testing.T) {
			err := checkOutput(c.command, c.out)
			if c.want == nil {
				if err != nil {
					t.Fatalf("checkOutput = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("checkOutput = %v, want %v", err, c.want)
			}
			if !strings.Contains(err.Error(), c.command) {
				t.Fatalf("error %q does not name the command", err)
			}
		})
	}
}

func TestCheckOutputOtherExit(t *testing.T) {
	err := checkOutput("get_server_list", Output{Stderr: "permission denied\n", ExitCode: 2})
	if err == nil || errors.Is(err, ErrNoDaemon) || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("checkOutput = %v, want an error carrying stderr", err)
	}
}

func TestParseThreadPercentage(t *testing.T) {
	for _, c := range []struct {
		in   string
		want float64
	}{{"100.0\n", 100}, {"25.0\n", 25}, {"33.5\n", 33.5}, {"50.0", 50}} {
		t.Run(c.in, func(t *testing.T) {
			got, err := ParseThreadPercentage(c.in)
			if err != nil || got != c.want {
				t.Fatalf("ParseThreadPercentage(%q) = %v, %v; want %v", c.in, got, err, c.want)
			}
		})
	}
	for _, in := range []string{"", "Server 0 not found\n", "25.0\n50.0\n", "NaN", "abc"} {
		t.Run("rejects "+in, func(t *testing.T) {
			if got, err := ParseThreadPercentage(in); err == nil {
				t.Fatalf("ParseThreadPercentage(%q) = %v, want an error", in, got)
			}
		})
	}
}

// memLimitReadBack is mps-probe2.txt: the value set (in MiB) and what
// get_default_device_pinned_mem_limit printed afterwards.
var memLimitReadBack = []struct {
	setMiB  units.MiB
	printed string
}{
	{512, "512M"}, {1023, "1023M"}, {1024, "1G"}, {1536, "1G"}, {2047, "1G"},
	{2048, "2G"}, {20389, "19G"}, {35942, "35G"}, {1048576, "1024G"}, {100, "100M"}, {1, "1M"},
}

func TestDisplayMemLimitMatchesTheControl(t *testing.T) {
	for _, c := range memLimitReadBack {
		t.Run(c.printed, func(t *testing.T) {
			if got := DisplayMemLimit(c.setMiB); got != c.printed {
				t.Fatalf("DisplayMemLimit(%d) = %q, the control printed %q", c.setMiB, got, c.printed)
			}
		})
	}
	if got := DisplayMemLimit(0); got != "" {
		t.Fatalf("DisplayMemLimit(0) = %q, want nothing (no limit)", got)
	}
}

func TestParseMemLimit(t *testing.T) {
	cases := []struct {
		in       string
		wantMiB  units.MiB
		wantSet  bool
		wantFail bool
	}{
		{"", 0, false, false},
		{"19G\n", 19456, true, false},
		{"512M\n", 512, true, false},
		{"1024G\n", 1048576, true, false},
		{"8G", 8192, true, false},
		{"Server 1066 not found\n", 0, false, true},
		{"19", 0, false, true},
		{"G", 0, false, true},
		{"-1G", 0, false, true},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			mib, set, err := ParseMemLimit(c.in)
			if (err != nil) != c.wantFail || mib != c.wantMiB || set != c.wantSet {
				t.Fatalf("ParseMemLimit(%q) = %d, %v, %v; want %d, %v, fail=%v", c.in, mib, set, err, c.wantMiB, c.wantSet, c.wantFail)
			}
		})
	}
	// What is printed parses back to a value that prints the same.
	for _, c := range memLimitReadBack {
		mib, _, err := ParseMemLimit(c.printed)
		if err != nil || DisplayMemLimit(mib) != c.printed {
			t.Errorf("%q parses to %d (%v), which displays as %q", c.printed, mib, err, DisplayMemLimit(mib))
		}
	}
}

func TestFormatMemLimitIsExact(t *testing.T) {
	if got := FormatMemLimit(20389); got != "20389M" {
		t.Fatalf("FormatMemLimit(20389) = %q, want 20389M", got)
	}
}

func TestParsePIDList(t *testing.T) {
	cases := []struct {
		in   string
		want []int
		fail bool
	}{
		{"", nil, false},
		{"1066\n", []int{1066}, false},
		{"673\n1066\n", []int{673, 1066}, false},
		{"Server not found\n", nil, true},
		{"0\n", nil, true},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			got, err := ParsePIDList(c.in)
			if (err != nil) != c.fail || !slices.Equal(got, c.want) {
				t.Fatalf("ParsePIDList(%q) = %v, %v; want %v, fail=%v", c.in, got, err, c.want, c.fail)
			}
		})
	}
}
