package config

import (
	"strings"
	"testing"
)

func TestThreadPolicies(t *testing.T) {
	// Percentage for N = 1, 2, 3, 4, 8, 48.
	ns := []int{1, 2, 3, 4, 8, 48}
	for _, tc := range []struct {
		in   string
		name string
		want []int
	}{
		{"even", "even (100/N)", []int{100, 50, 33, 25, 12, 2}}, // Cloudpods' rule
		{"none", "none (100)", []int{100, 100, 100, 100, 100, 100}},
		{"auto", "auto (400/N)", []int{100, 100, 100, 100, 50, 8}},
		{"", "auto (400/N)", []int{100, 100, 100, 100, 50, 8}},
		{"300/n", "300/N", []int{100, 100, 100, 75, 37, 6}},
		{"1/N", "1/N", []int{1, 1, 1, 1, 1, 1}}, // never 0: MPS refuses it
		{"40", "40", []int{40, 40, 40, 40, 40, 40}},
	} {
		t.Run(tc.in, func(t *testing.T) {
			p, err := ParseThreadPolicy(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if p.String() != tc.name {
				t.Errorf("name %q, want %q", p.String(), tc.name)
			}
			for i, n := range ns {
				if got := p.Percentage(n); got != tc.want[i] {
					t.Errorf("N=%d: %d%%, want %d%%", n, got, tc.want[i])
				}
			}
		})
	}
	for _, bad := range []string{"0", "101", "-5", "fast", "0/N", "N", "50%", "100/M"} {
		if _, err := ParseThreadPolicy(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("ParseThreadPolicy(%q) = %v, want an error naming the value", bad, err)
		}
	}
}
