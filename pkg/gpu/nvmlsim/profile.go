// Package nvmlsim is the simulated host of `mps-daemon --simulate` and the
// tests: go-nvml's mock machines made to look like a real host (stable
// UUIDs, DGX-like PCI bus ids with hex letters, a fake sys/ and dev/ tree
// for the resolver to walk, MPS clients listed from a file another process
// can write), read through pkg/gpu/nvml's adapter like a real GPU. Only
// tests and the --simulate wiring of cmd/mps-daemon import it. It needs
// cgo (go-nvml's mocks); without cgo New returns nvml.ErrNoCgo.
package nvmlsim

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"yunion.io/x/mps-daemon/pkg/pci"
)

// maxSimGPUs is the most GPUs a simulated host has: 16, as on the largest
// HGX boards.
const maxSimGPUs = 16

// simUUIDNamespace seeds the simulated GPUs' UUIDs. It is fixed so that the
// same profile gives the same UUIDs on every start: the inventory sync then
// sees the same devices and changes nothing.
const simUUIDNamespace = "6b0f3c2e-8f5d-4a51-9d0e-2c7a4be1f6a3"

// simModelKeys are the GPU models a simulated host can have, as written in a
// profile.
func simModelKeys() []string {
	return []string{"H100", "H200", "A100", "B200", "A30", "P40"}
}

// Profiles lists example profiles for New, one per model, for
// help text. Any count from 1 to 16 works with any model, and any profile
// may end in ScrambledSuffix.
func Profiles() []string {
	return []string{"8xH100", "8xH200", "8xA100", "8xB200", "4xA30", "4xP40", "8xH100" + ScrambledSuffix}
}

// ScrambledSuffix ends a profile whose GPUs have NVML indexes, device minors
// (/dev/nvidiaN) and PCI addresses in three different orders, as real
// servers can: on a host of 8, no GPU has the same place in any two of them
// (simOrders). Without it the three orders are one.
const ScrambledSuffix = ":scrambled"

// simProfile is a parsed profile: count GPUs of one model.
type simProfile struct {
	count     int
	model     string // one of simModelKeys, upper case
	scrambled bool
}

// String is the canonical spelling, "8xH100" or "8xH100:scrambled",
// whatever case it was given in.
func (p simProfile) String() string {
	s := fmt.Sprintf("%dx%s", p.count, p.model)
	if p.scrambled {
		s += ScrambledSuffix
	}
	return s
}

// simOrders are the NVML index and the device minor of the GPU at place
// slot of n in PCI order. Plain: slot, slot. Scrambled: the index is the
// slot rotated by half the host, the minor the slot reversed, so that
// index, minor and slot differ for every GPU of an even host of 4 or more.
func simOrders(slot, n int, scrambled bool) (index, minor int) {
	if !scrambled {
		return slot, slot
	}
	return (slot + n/2) % n, n - 1 - slot
}

// parseProfile reads "<count>x<model>[:scrambled]" in any case: "8xH100",
// "4xp40", "8xH100:scrambled".
func parseProfile(s string) (simProfile, error) {
	body, scrambled := strings.CutSuffix(strings.ToLower(strings.TrimSpace(s)), ScrambledSuffix)
	p, err := parseCountModel(body)
	if err != nil {
		return simProfile{}, profileError(s, err.Error())
	}
	p.scrambled = scrambled
	return p, nil
}

// parseCountModel reads "<count>x<model>".
func parseCountModel(s string) (simProfile, error) {
	countStr, model, ok := strings.Cut(strings.ToUpper(s), "X")
	if !ok {
		return simProfile{}, errors.New("want <count>x<model>")
	}
	count, err := strconv.Atoi(countStr)
	if err != nil || count < 1 || count > maxSimGPUs {
		return simProfile{}, fmt.Errorf("count must be 1 to %d", maxSimGPUs)
	}
	for _, k := range simModelKeys() {
		if model == k {
			return simProfile{count: count, model: k}, nil
		}
	}
	return simProfile{}, fmt.Errorf("unknown model %q", model)
}

func profileError(s, why string) error {
	return fmt.Errorf("simulated GPU profile %q: %s; valid profiles are <count>x<model>[%s] with count 1 to %d and model one of %s (e.g. %s)",
		s, why, ScrambledSuffix, maxSimGPUs, strings.Join(simModelKeys(), ", "), strings.Join(Profiles(), ", "))
}

// simAddress is the PCI address of simulated GPU i. The first eight are a
// DGX H100's GPU buses; half of them have hex letters, which is what broke
// string comparison of NVML's upper-case ids with sysfs's lower-case ones
// (Cloudpods issue 24931). Buses ascend with i, as NVML numbers GPUs in bus
// order.
func simAddress(i int) pci.Address {
	buses := [maxSimGPUs]uint8{
		0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb,
		0xe0, 0xe4, 0xe8, 0xec, 0xf0, 0xf4, 0xf8, 0xfc,
	}
	return pci.Address{Bus: buses[i]}
}

// simNUMANode puts the first half of n GPUs on node 0 and the rest on node 1,
// as a two-socket host has them.
func simNUMANode(i, n int) int {
	if 2*i < n {
		return 0
	}
	return 1
}

// simUUID is GPU i's UUID in NVML's form ("GPU-" and a lower-case UUID),
// derived from the canonical profile so that it is stable across restarts.
func simUUID(p simProfile, i int) string {
	ns := uuid.MustParse(simUUIDNamespace)
	return "GPU-" + uuid.NewSHA1(ns, fmt.Appendf(nil, "%s/%d", p, i)).String()
}
