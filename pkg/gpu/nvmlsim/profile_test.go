package nvmlsim

import (
	"strings"
	"testing"
)

func TestParseProfile(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
	}{
		{"8xH100", "8xH100"},
		{"8xh100", "8xH100"},
		{" 4XP40 ", "4xP40"},
		{"1xb200", "1xB200"},
		{"16xA30", "16xA30"},
		{"2xa100", "2xA100"},
		{"3xH200", "3xH200"},
		{"8xH100:scrambled", "8xH100:scrambled"},
		{"8XH100:SCRAMBLED", "8xH100:scrambled"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			p, err := parseProfile(tc.in)
			if err != nil {
				t.Fatalf("parseProfile(%q): %v", tc.in, err)
			}
			if got := p.String(); got != tc.want {
				t.Fatalf("parseProfile(%q) = %s, want %s", tc.in, got, tc.want)
			}
		})
	}
}

func TestParseProfileRejects(t *testing.T) {
	for _, in := range []string{"", "H100", "8x", "xH100", "0xH100", "17xH100", "-1xH100", "8xV100", "8xH100x", "eightxH100", "8xH100:", "8xH100:shuffled", ":scrambled"} {
		t.Run(in, func(t *testing.T) {
			_, err := parseProfile(in)
			if err == nil {
				t.Fatalf("parseProfile(%q) succeeded", in)
			}
			// The user is told what would have worked.
			for _, want := range []string{"H100", "H200", "A100", "B200", "A30", "P40", "8xH100"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %s", err, want)
				}
			}
		})
	}
}

func TestSimProfilesParse(t *testing.T) {
	for _, s := range Profiles() {
		if _, err := parseProfile(s); err != nil {
			t.Errorf("example profile %q does not parse: %v", s, err)
		}
	}
}

func TestSimAddressesAscendAndDiffer(t *testing.T) {
	// NVML numbers GPUs in bus order; a simulated host must too, or index and
	// sorted order would disagree.
	for i := 1; i < maxSimGPUs; i++ {
		if !simAddress(i - 1).Less(simAddress(i)) {
			t.Errorf("simAddress(%d) = %s is not after simAddress(%d) = %s", i, simAddress(i), i-1, simAddress(i-1))
		}
	}
}

func TestSimNUMANode(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want []int
	}{
		{1, []int{0}},
		{2, []int{0, 1}},
		{3, []int{0, 0, 1}},
		{8, []int{0, 0, 0, 0, 1, 1, 1, 1}},
	} {
		for i, want := range tc.want {
			if got := simNUMANode(i, tc.n); got != want {
				t.Errorf("simNUMANode(%d, %d) = %d, want %d", i, tc.n, got, want)
			}
		}
	}
}
