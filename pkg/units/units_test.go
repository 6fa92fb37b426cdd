package units

import "testing"

func TestConversions(t *testing.T) {
	for _, tc := range []struct {
		mib   MiB
		bytes Bytes
	}{{0, 0}, {1, 1 << 20}, {35942, 35942 << 20}} {
		if got := tc.mib.Bytes(); got != tc.bytes {
			t.Errorf("%v.Bytes() = %d, want %d", tc.mib, got, tc.bytes)
		}
		if got := tc.bytes.MiB(); got != tc.mib {
			t.Errorf("%d.MiB() = %v, want %v", tc.bytes, got, tc.mib)
		}
	}
	// What NVML reports rounds down to whole MiB, as nvidia-smi prints it.
	if got := Bytes(81559<<20 + 1023).MiB(); got != 81559 {
		t.Errorf("got %v, want 81559 MiB", got)
	}
	if got := MiB(-1).Bytes(); got != 0 {
		t.Errorf("a negative size is %d bytes, want 0", got)
	}
}
