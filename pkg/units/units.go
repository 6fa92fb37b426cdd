// Package units types the memory sizes that travel from the plan to the
// JSON edges: a virtual device's cap is a MiB from vdev's division to MPS's
// limit, the CDI environment and the inventory row, and Bytes where NVML,
// the accounting and /status count in bytes. Conversions are explicit and
// in one place. It imports nothing.
package units

import "strconv"

// MiB is a size in mebibytes: the unit of MPS's pinned memory limits, of
// nvidia-smi's memory.total and of Cloudpods' mps_memory_limit.
type MiB int

// Bytes is a size in bytes: NVML's memory figures, the accounting's sums.
type Bytes uint64

// Bytes is m in bytes; a negative m is 0.
func (m MiB) Bytes() Bytes {
	if m < 0 {
		return 0
	}
	return Bytes(m) << 20
}

// String is "35942 MiB".
func (m MiB) String() string { return strconv.Itoa(int(m)) + " MiB" }

// MiB is b in whole mebibytes, rounded down (as nvidia-smi prints them).
func (b Bytes) MiB() MiB { return MiB(b >> 20) }
