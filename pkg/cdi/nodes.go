package cdi

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// controlNodes are the driver's nodes every CUDA process opens besides its
// GPU's /dev/nvidiaN.
var controlNodes = [...]string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}

// nodeSet is which /dev/nvidia* nodes exist as character devices under the
// dev root, by name ("nvidia0", "nvidiactl").
type nodeSet map[string]bool

// findNodes looks for the control nodes and /dev/nvidiaN of each minor.
// Nodes that are absent, or are not character devices (the simulated host
// has plain files), are left out: the container then depends on the NVIDIA
// container toolkit (NVIDIA_VISIBLE_DEVICES) for them. Lstat, as the CDI
// library does when it injects them: a symlink would not inject.
func findNodes(devRoot string, minors []int) (nodeSet, error) {
	names := append([]string(nil), controlNodes[:]...)
	for _, m := range minors {
		names = append(names, "nvidia"+strconv.Itoa(m))
	}
	set := nodeSet{}
	for _, n := range names {
		fi, err := os.Lstat(filepath.Join(devRoot, n))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return nil, fmt.Errorf("looking for device node %s: %w", n, err)
		}
		if fi.Mode()&fs.ModeCharDevice != 0 {
			set[n] = true
		}
	}
	return set, nil
}

func minorsOf(devs []Device) []int {
	seen := map[int]bool{}
	var out []int
	for _, d := range devs {
		if !seen[d.GPU.Minor] {
			seen[d.GPU.Minor] = true
			out = append(out, d.GPU.Minor)
		}
	}
	return out
}
