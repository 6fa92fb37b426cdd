package store

import (
	"fmt"
	"slices"
	"testing"
)

// gpuRows is n slices of the GPU named gpu ("A" gives ids A0, A1, ...), on
// numa node numa, created in order from seq.
func gpuRows(gpu string, n, numa int, seq int64) []Candidate {
	out := make([]Candidate, n)
	for i := range out {
		out[i] = Candidate{ID: fmt.Sprintf("%s%d", gpu, i), DevicePath: "GPU-" + gpu, NUMANode: numa, Seq: seq + int64(i)}
	}
	return out
}

// with applies edit to the rows whose id is listed.
func with(rows []Candidate, edit func(*Candidate), ids ...string) []Candidate {
	rows = slices.Clone(rows)
	for i := range rows {
		if slices.Contains(ids, rows[i].ID) {
			edit(&rows[i])
		}
	}
	return rows
}

func heldBy(guest string) func(*Candidate) { return func(c *Candidate) { c.GuestID = guest } }

func TestPick(t *testing.T) {
	twoGPUs := slices.Concat(gpuRows("A", 4, 0, 0), gpuRows("B", 4, 1, 100))
	unhealthy := func(c *Candidate) { c.Unhealthy = true }
	pending := func(c *Candidate) { c.PendingRemoval = true }
	tests := []struct {
		name     string
		rows     []Candidate
		count    int
		numa     int
		want     []string
		wantFree int
	}{
		{
			name: "the GPU with the most free slices first",
			rows: with(twoGPUs, heldBy("other"), "A0", "A1"),
			// A has 2 free, B 4: B first, then spread to A (the guest now
			// holds one on B), then back to B (tie on held, B has more free).
			count: 3, numa: AnyNUMANode, want: []string{"B0", "A2", "B1"}, wantFree: 6,
		},
		{
			name:  "one guest's slices spread across GPUs",
			rows:  slices.Concat(gpuRows("A", 4, 0, 0), gpuRows("B", 4, 0, 10), gpuRows("C", 4, 0, 20)),
			count: 4, numa: AnyNUMANode, want: []string{"A0", "B0", "C0", "A1"}, wantFree: 12,
		},
		{
			name: "slices the guest already holds steer the spread",
			rows: with(twoGPUs, heldBy("g"), "B0", "B1"),
			// g holds two on B: both picks go to A (g holds 0, then 1 there).
			count: 2, numa: AnyNUMANode, want: []string{"A0", "A1"}, wantFree: 6,
		},
		{
			name: "held slices beat most free",
			rows: with(slices.Concat(gpuRows("A", 5, 0, 0), gpuRows("B", 2, 0, 10)), heldBy("g"), "A0"),
			// A has 4 free, B 2, but g holds one on A: B first; then a tie
			// on held (1 each), and A has more free.
			count: 2, numa: AnyNUMANode, want: []string{"B0", "A1"}, wantFree: 6,
		},
		{
			name:  "NUMA node honoured",
			rows:  twoGPUs,
			count: 2, numa: 1, want: []string{"B0", "B1"}, wantFree: 4,
		},
		{
			name:  "NUMA node without enough devices gives nothing",
			rows:  twoGPUs,
			count: 5, numa: 0, want: nil, wantFree: 4,
		},
		{
			name:  "unhealthy and pending removal are skipped",
			rows:  with(with(twoGPUs, unhealthy, "B0", "B1", "B2", "B3", "A0"), pending, "A1"),
			count: 2, numa: AnyNUMANode, want: []string{"A2", "A3"}, wantFree: 2,
		},
		{
			name:  "not enough free: nothing, and how many are",
			rows:  with(twoGPUs, heldBy("other"), "A0", "A1", "A2", "A3", "B0", "B1"),
			count: 3, numa: AnyNUMANode, want: nil, wantFree: 2,
		},
		{
			name:  "lowest seq within a GPU, whatever the row order",
			rows:  []Candidate{{ID: "x9", DevicePath: "GPU-X", Seq: 9}, {ID: "x2", DevicePath: "GPU-X", Seq: 2}, {ID: "x5", DevicePath: "GPU-X", Seq: 5}},
			count: 2, numa: AnyNUMANode, want: []string{"x2", "x5"}, wantFree: 3,
		},
		{
			name:  "ties on held and free go to the lowest device_path",
			rows:  slices.Concat(gpuRows("C", 2, 0, 0), gpuRows("A", 2, 0, 10), gpuRows("B", 2, 0, 20)),
			count: 3, numa: AnyNUMANode, want: []string{"A0", "B0", "C0"}, wantFree: 6,
		},
		{
			name:  "all of them",
			rows:  gpuRows("A", 3, 0, 0),
			count: 3, numa: AnyNUMANode, want: []string{"A0", "A1", "A2"}, wantFree: 3,
		},
		{
			name:  "no rows",
			count: 1, numa: AnyNUMANode, want: nil, wantFree: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, free := Pick(tt.rows, "g", tt.count, tt.numa)
			if !slices.Equal(got, tt.want) || free != tt.wantFree {
				t.Errorf("Pick = %q, %d free; want %q, %d free", got, free, tt.want, tt.wantFree)
			}
			if len(got) != 0 && len(got) != tt.count {
				t.Errorf("picked %d of %d: all or nothing", len(got), tt.count)
			}
		})
	}
}

// However the rows come, Pick never returns a device twice or one that is
// not free, and always exactly count or none.
func TestPickInvariants(t *testing.T) {
	var rows []Candidate
	for g := range 4 {
		rows = append(rows, gpuRows(string(rune('A'+g)), 8, g%2, int64(g*8))...)
	}
	for i := range rows {
		switch i % 7 {
		case 1:
			rows[i].GuestID = "g"
		case 3:
			rows[i].GuestID = "other"
		case 5:
			rows[i].Unhealthy = i%2 == 0
			rows[i].PendingRemoval = i%2 == 1
		}
	}
	for count := 1; count <= len(rows)+1; count++ {
		for _, numa := range []int{AnyNUMANode, 0, 1, 2} {
			ids, free := Pick(rows, "g", count, numa)
			if (count <= free) != (len(ids) == count) || (count > free && ids != nil) {
				t.Fatalf("count %d numa %d: %d ids, %d free", count, numa, len(ids), free)
			}
			seen := map[string]bool{}
			for _, id := range ids {
				i := slices.IndexFunc(rows, func(c Candidate) bool { return c.ID == id })
				c := rows[i]
				if seen[id] || c.GuestID != "" || c.Unhealthy || c.PendingRemoval || (numa != AnyNUMANode && c.NUMANode != numa) {
					t.Fatalf("count %d numa %d: picked %+v (twice: %v)", count, numa, c, seen[id])
				}
				seen[id] = true
			}
		}
	}
}
