package view

import (
	"errors"
	"math"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

const gpuA gpu.UUID = "GPU-4baeae3a-899f-8852-bd11-2e4ce3171eb0"

func TestContentIsWhatTheLibraryReads(t *testing.T) {
	m := Memory{Total: 35942 << 20, Used: 1168 << 20}
	b, err := Content(m)
	if err != nil {
		t.Fatal(err)
	}
	if want := "total_bytes 37687918592\nused_bytes 1224736768\n"; string(b) != want {
		t.Errorf("content %q, want %q", b, want)
	}
	got, err := Parse(b)
	if err != nil || got != m {
		t.Errorf("Parse(Content(m)) = %+v, %v; want %+v", got, err, m)
	}
	if b, err := Content(Memory{Total: math.MaxUint64, Used: math.MaxUint64}); err != nil || len(b) > MaxFileBytes {
		t.Errorf("the largest view: %q, %v", b, err)
	}
}

func TestACapOfZeroOrOverflowIsNoView(t *testing.T) {
	for _, c := range []units.MiB{0, -1, maxCap + 1, math.MaxInt} {
		if b, err := TotalOf(c); !errors.Is(err, ErrInvalid) {
			t.Errorf("TotalOf(%d) = %d, %v; want ErrInvalid", c, b, err)
		}
	}
	if b, err := TotalOf(maxCap); err != nil || uint64(b) != uint64(maxCap)<<20 {
		t.Errorf("TotalOf(the largest cap) = %d, %v", b, err)
	}
	if b, err := Content(Memory{Used: 5}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a total of 0 gave %q, %v; want ErrInvalid", b, err)
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     Memory
		err      string
	}{
		{"keys in any order", "used_bytes 2\ntotal_bytes 10\n", Memory{Total: 10, Used: 2}, ""},
		{"unknown keys ignored", "version 2\ntotal_bytes 10\nnote a b c\n", Memory{Total: 10}, ""},
		{"no total", "used_bytes 2\n", Memory{}, "no total_bytes"},
		{"total 0", "total_bytes 0\n", Memory{}, "no total_bytes"},
		{"negative", "total_bytes -1\n", Memory{}, "not a decimal"},
		{"leading zero", "total_bytes 010\n", Memory{}, "not a decimal"},
		{"plus sign", "total_bytes +10\n", Memory{}, "not a decimal"},
		{"overflow", "total_bytes 18446744073709551616\n", Memory{}, "not a decimal"},
		{"twice", "total_bytes 1\ntotal_bytes 2\n", Memory{}, "twice"},
		{"no newline", "total_bytes 1", Memory{}, "no newline"},
		{"no value", "total_bytes\n", Memory{}, "not a key and a value"},
		{"too large", "total_bytes 1\n" + strings.Repeat("x y\n", MaxFileBytes), Memory{}, "more than 4096"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %+v, %v; want an error with %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestPaths(t *testing.T) {
	s := Store{Dir: "/var/lib/yunion-mps/view"}
	p, err := s.Path(vdev.NameOf(gpuA, 3))
	if err != nil || p != "/var/lib/yunion-mps/view/"+string(gpuA)+".3" {
		t.Errorf("Path = %q, %v", p, err)
	}
	if s.PreloadPath() != "/var/lib/yunion-mps/view/ld.so.preload" {
		t.Errorf("PreloadPath = %q", s.PreloadPath())
	}
	if got := ContainerDir(gpuA); got != "/run/yunion-mps/view/"+string(gpuA) {
		t.Errorf("ContainerDir = %q", got)
	}
	if string(PreloadContent()) != "/run/yunion-mps/lib/libyunion-mps-view.so\n" {
		t.Errorf("PreloadContent = %q", PreloadContent())
	}
	for _, bad := range []vdev.Name{"", "GPU-x", "a/b::1", "..::1", ".::0", "GPU-x::-1", "GPU-x::01"} {
		if p, err := s.Path(bad); !errors.Is(err, vdev.ErrBadName) {
			t.Errorf("Path(%q) = %q, %v; want ErrBadName", bad, p, err)
		}
	}
	for _, dir := range []string{string(gpuA) + ".0", string(gpuA) + ".1003", "x.7"} {
		n, ok := nameOf(dir)
		if d, err := dirName(n); !ok || err != nil || d != dir {
			t.Errorf("nameOf(%q) = %q, %v; its dirName %q, %v", dir, n, ok, d, err)
		}
	}
	for _, other := range []string{PreloadFile, ".x.tmp", string(gpuA), string(gpuA) + ".01", string(gpuA) + ".-1", ".3", "..3"} {
		if n, ok := nameOf(other); ok {
			t.Errorf("nameOf(%q) = %q: not a device's directory", other, n)
		}
	}
}
