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

// GPUSlots is what the picker needs of one GPU (one device_path) of a
// (host, dev_type, model): how many of its slices the guest holds, and how
// many are free and qualify (healthy, not pending removal, on the NUMA node
// asked for). Which of its free slices a pick takes is decided after the
// GPU is chosen (the lowest seq first), so the store can read this summary
// from counters instead of every free row (see pickread.go).
type GPUSlots struct {
	Path string
	Held int
	Free int
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
//
// Pick is Summarize, then PickGPUs, then the lowest seq free rows of the
// GPUs chosen: the store runs the same PickGPUs on a summary it reads.
func Pick(rows []Candidate, guest string, count, numaNode int) (ids []string, free int) {
	gpus, freeIDs := Summarize(rows, guest, numaNode)
	picks, free := PickGPUs(gpus, count)
	if picks == nil {
		return nil, free
	}
	return takeInOrder(picks, freeIDs), free
}

// Summarize is the per-GPU summary of rows for guest (see Pick for which
// rows qualify), the GPUs in no particular order, and for each its free
// ids in seq order (then id).
func Summarize(rows []Candidate, guest string, numaNode int) ([]GPUSlots, [][]string) {
	index := map[string]int{}
	var gpus []GPUSlots
	var free [][]Candidate
	gpuOf := func(path string) int {
		i, ok := index[path]
		if !ok {
			i = len(gpus)
			index[path] = i
			gpus = append(gpus, GPUSlots{Path: path})
			free = append(free, nil)
		}
		return i
	}
	for _, r := range rows {
		switch {
		case r.GuestID != "":
			if guest != "" && r.GuestID == guest {
				gpus[gpuOf(r.DevicePath)].Held++
			}
		case r.Unhealthy, r.PendingRemoval:
		case numaNode != AnyNUMANode && r.NUMANode != numaNode:
		default:
			i := gpuOf(r.DevicePath)
			free[i] = append(free[i], r)
		}
	}
	ids := make([][]string, len(gpus))
	for i, f := range free {
		slices.SortFunc(f, func(a, b Candidate) int {
			return cmp.Or(cmp.Compare(a.Seq, b.Seq), cmp.Compare(a.ID, b.ID))
		})
		gpus[i].Free = len(f)
		for _, c := range f {
			ids[i] = append(ids[i], c.ID)
		}
	}
	return gpus, ids
}

// PickGPUs chooses, by Pick's rules, the GPU of each of count picks: the
// index in gpus of each, in pick order, and how many slices are free in
// all. When fewer than count are free it returns no picks at all.
func PickGPUs(gpus []GPUSlots, count int) (picks []int, free int) {
	type gpuState struct {
		i          int
		free, held int // as they stand after the picks so far
	}
	states := make([]gpuState, 0, len(gpus))
	for i, g := range gpus {
		free += g.Free
		if g.Free > 0 {
			states = append(states, gpuState{i: i, free: g.Free, held: g.Held})
		}
	}
	if count <= 0 || free < count {
		return nil, free
	}
	// better reports whether a GPU should take the next pick before b.
	better := func(a, b *gpuState) bool {
		if a.held != b.held {
			return a.held < b.held
		}
		if a.free != b.free {
			return a.free > b.free
		}
		return gpus[a.i].Path < gpus[b.i].Path
	}
	picks = make([]int, 0, count)
	for range count {
		var best *gpuState
		for k := range states {
			g := &states[k]
			if g.free > 0 && (best == nil || better(g, best)) {
				best = g
			}
		}
		picks = append(picks, best.i)
		best.free--
		best.held++
	}
	return picks, free
}

// taken counts the picks of each GPU: how many of its free slices (the
// lowest seq ones) the pick takes.
func taken(picks []int, gpus int) []int {
	n := make([]int, gpus)
	for _, i := range picks {
		n[i]++
	}
	return n
}

// takeInOrder turns picks into ids in pick order: the k-th pick of a GPU
// takes the k-th of its free ids (which hold at least as many as it was
// picked, in seq order).
func takeInOrder(picks []int, freeIDs [][]string) []string {
	next := make([]int, len(freeIDs))
	ids := make([]string, 0, len(picks))
	for _, i := range picks {
		ids = append(ids, freeIDs[i][next[i]])
		next[i]++
	}
	return ids
}
