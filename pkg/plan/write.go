package plan

import (
	"fmt"
	"io"
	"text/tabwriter"

	"yunion.io/x/mps-daemon/pkg/vdev"
)

// Write prints the plan for people, as `mps-daemon check-config` shows it:
// one row per shared GPU, a total, then the GPUs left whole. Entries of other
// agents are not repeated here: the caller knows the file and prints them.
func (p *Plan) Write(w io.Writer) error {
	if !p.Enabled {
		if _, err := fmt.Fprintln(w, "enable_cuda_mps is false: no GPU is shared"); err != nil {
			return fmt.Errorf("writing plan: %w", err)
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PCI ADDRESS\tUUID\tMODEL\tMEMORY MiB\tN\tMiB EACH\tTHREAD %\tQOS\tSOURCE")
	for _, g := range p.GPUs {
		if g.Sharing.Claims() {
			// N claims at most, each of any size up to the whole GPU.
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%d\t%s\t%s\n", g.GPU.PCI, g.GPU.UUID, g.GPU.Name,
				g.GPU.MemoryTotal.MiB(), g.VirtualNumber, "claims", p.Threads.Percentage(1), "-", g.Source)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", g.GPU.PCI, g.GPU.UUID, g.GPU.Name,
			g.GPU.MemoryTotal.MiB(), g.VirtualNumber, vdev.MemoryLimit(g.GPU.MemoryTotal.MiB(), g.VirtualNumber), p.Threads.Percentage(g.VirtualNumber),
			g.QoS.Describe(g.VirtualNumber, p.Threads.Percentage(g.VirtualNumber)), g.Source)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing plan: %w", err)
	}
	if _, err := fmt.Fprintf(w, "%s, %s; thread policy %s\n", count(len(p.GPUs), "GPU"), count(p.VirtualDevices(), "virtual device"), p.Threads); err != nil {
		return fmt.Errorf("writing plan: %w", err)
	}
	for _, g := range p.Unshared {
		if _, err := fmt.Fprintf(w, "not shared: %s %s (no NVIDIA_MPS entry names it)\n", g.PCI, g.Name); err != nil {
			return fmt.Errorf("writing plan: %w", err)
		}
	}
	return nil
}

// count writes "1 GPU", "2 GPUs".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
