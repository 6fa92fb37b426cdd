package claim

import (
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

const uuid = gpu.UUID("GPU-81df1fb7-5946-da34-7f70-c730b0456642")

func base(pipe string) cdi.Device {
	return cdi.FromVirtual(vdev.Device{GPU: gpu.Info{UUID: uuid, Minor: 3}, MemoryLimit: 81559, ThreadPercentage: 60}, "", pipe)
}

// A claim's device is its GPU's with the claim's caps, at IndexBase plus
// its slot; what a client could not be given is refused.
func TestDevice(t *testing.T) {
	b := base("/run/pipe")
	d, err := NewDevice(b, 2, 20480, 0)
	if err != nil {
		t.Fatal(err)
	}
	if d.Name() != vdev.NameOf(uuid, 1002) || d.MemoryLimit != 20480 || d.ThreadPercentage != 60 || d.PipeDir != "/run/pipe" || d.GPU.Minor != 3 {
		t.Errorf("device %+v", d)
	}
	if slot, ok := IsClaim(d.Index); !ok || slot != 2 {
		t.Errorf("IsClaim(%d) = %d %v", d.Index, slot, ok)
	}
	if _, ok := IsClaim(47); ok {
		t.Error("a fixed slice's index taken for a claim's")
	}
	if d, err := NewDevice(b, 0, 81559, 25); err != nil || d.ThreadPercentage != 25 {
		t.Errorf("the whole GPU at 25%%: %+v %v", d, err)
	}
	for _, tc := range []struct {
		slot, threads int
		mem           int
		want          string
	}{
		{-1, 0, 1, "slot -1"},
		{0, 0, 0, "claim of 0 MiB: want more than 0"},
		{0, 0, -5, "claim of -5 MiB"},
		{0, 0, 81560, "offers 81559 MiB at most"},
		{0, 61, 1024, "offers 1 to 60%"},
		{0, -1, 1024, "offers 1 to 60%"},
	} {
		if _, err := NewDevice(b, tc.slot, unitsMiB(tc.mem), tc.threads); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewDevice(slot %d, %d MiB, %d%%): %v, want %q", tc.slot, tc.mem, tc.threads, err, tc.want)
		}
	}
}

func unitsMiB(v int) units.MiB { return units.MiB(v) }
