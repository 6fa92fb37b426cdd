package view

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
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

// TestViewFileCases: view.Parse against the table of cases the library's
// parser is tested against too (tenant/test/viewfiles.txt), so that the
// daemon reads a view file as the library does.
func TestViewFileCases(t *testing.T) {
	cases, err := readCases("../../tenant/test/viewfiles.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) < 30 {
		t.Fatalf("%d cases read; the table has more", len(cases))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := Parse(c.in)
			got := "invalid"
			if err == nil {
				got = fmt.Sprintf("%d %d", m.Total, m.Used)
			}
			if got != c.want {
				t.Errorf("Parse(%q) = %s (%v), want %s", c.in, got, err, c.want)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "view file") {
				t.Errorf("error %q does not say what it is about", err)
			}
		})
	}
}

type viewFileCase struct {
	name, want string
	in         []byte
}

// readCases reads the table (its head says the format).
func readCases(path string) ([]viewFileCase, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []viewFileCase
	var cur *viewFileCase
	for i, line := range strings.Split(string(b), "\n") {
		where := fmt.Sprintf("%s:%d", path, i+1)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "case "):
			out = append(out, viewFileCase{name: line[len("case "):], in: []byte{}})
			cur = &out[len(out)-1]
		case cur == nil:
			return nil, fmt.Errorf("%s: %q before the first case", where, line)
		case strings.HasPrefix(line, "in "):
			q, times := line[len("in "):], 1
			if k := strings.LastIndex(q, `" *`); k >= 0 {
				if times, err = strconv.Atoi(q[k+3:]); err != nil {
					return nil, fmt.Errorf("%s: %v", where, err)
				}
				q = q[:k+1]
			}
			s, err := strconv.Unquote(q)
			if err != nil {
				return nil, fmt.Errorf("%s: %q: %v", where, q, err)
			}
			cur.in = append(cur.in, strings.Repeat(s, times)...)
		case strings.HasPrefix(line, "want "):
			cur.want = line[len("want "):]
		default:
			return nil, fmt.Errorf("%s: not a case, in or want line: %q", where, line)
		}
	}
	return out, nil
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
	if string(PreloadContent()) != "/run/yunion-mps/lib/p/$PLATFORM/libyunion-mps-view.so\n" {
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
