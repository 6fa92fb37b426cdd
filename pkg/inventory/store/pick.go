package store

import (
	"cmp"
	"slices"
)

// Candidate is one device row of a (host, dev_type, model) as the picker
// sees it: free rows it may choose, and the rows the guest already holds,
// which steer where its new slices go.
type Candidate struct {
	ID string
	// DevicePath is the physical GPU (its UUID for MPS): free capacity and
	// spreading are counted per GPU.
	DevicePath string
	NUMANode   int
	// Seq is the row's creation order: within a GPU the oldest slice goes
	// first, so picks are deterministic.
	Seq            int64
	GuestID        string
	Unhealthy      bool
	PendingRemoval bool
	// SharingMode is the row's sharing_mode (AttachRequest.SharingMode
	// keeps the rows of one).
	SharingMode string
}

// AnyNUMANode asks Pick for devices on any NUMA node.
const AnyNUMANode = -1

// Pick chooses count devices of rows for guest, as Cloudpods places GPU
// slices:
//
//   - only free rows qualify: no guest, not unhealthy, not pending removal,
//     and on numaNode unless that is AnyNUMANode;
//   - each pick goes to the GPU where guest holds the fewest slices, so one
//     guest's slices spread across GPUs (a GPU fault then costs it the
//     least); ties go to the GPU with the most free slices (the least
//     loaded one, Cloudpods' rule), then to the lowest device_path;
//   - within a GPU, the free slice with the lowest seq.
//
// It returns the chosen ids in pick order, and how many rows qualify. When
// fewer than count qualify, it returns no ids at all: a request gets all its
// devices or none. Rows the guest holds count on their GPU whatever their
// health and NUMA node.
func Pick(rows []Candidate, guest string, count, numaNode int) (ids []string, free int) {
	type gpuState struct {
		path string
		free []Candidate // sorted by seq; picked from the front
		held int
	}
	byPath := map[string]*gpuState{}
	gpuOf := func(path string) *gpuState {
		g := byPath[path]
		if g == nil {
			g = &gpuState{path: path}
			byPath[path] = g
		}
		return g
	}
	for _, r := range rows {
		switch {
		case r.GuestID != "":
			if guest != "" && r.GuestID == guest {
				gpuOf(r.DevicePath).held++
			}
		case r.Unhealthy, r.PendingRemoval:
		case numaNode != AnyNUMANode && r.NUMANode != numaNode:
		default:
			g := gpuOf(r.DevicePath)
			g.free = append(g.free, r)
			free++
		}
	}
	if count <= 0 || free < count {
		return nil, free
	}
	var gpus []*gpuState
	for _, g := range byPath {
		if len(g.free) > 0 {
			slices.SortFunc(g.free, func(a, b Candidate) int {
				return cmp.Or(cmp.Compare(a.Seq, b.Seq), cmp.Compare(a.ID, b.ID))
			})
			gpus = append(gpus, g)
		}
	}
	// better reports whether a GPU should take the next pick before b.
	better := func(a, b *gpuState) bool {
		if a.held != b.held {
			return a.held < b.held
		}
		if len(a.free) != len(b.free) {
			return len(a.free) > len(b.free)
		}
		return a.path < b.path
	}
	ids = make([]string, 0, count)
	for range count {
		var best *gpuState
		for _, g := range gpus {
			if len(g.free) > 0 && (best == nil || better(g, best)) {
				best = g
			}
		}
		ids = append(ids, best.free[0].ID)
		best.free = best.free[1:]
		best.held++
	}
	return ids, free
}
