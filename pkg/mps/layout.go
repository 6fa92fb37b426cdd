package mps

import "strings"

// The two pipe layouts (host.conf mps_pipe_layout, docs/cloudpods.md):
//
//   - per GPU: one control daemon per GPU in <root>/<uuid>, started with
//     CUDA_VISIBLE_DEVICES=<uuid>, so it sees one device, ordinal 0; a fault
//     on one GPU cannot reach another's clients.
//   - single: one control daemon for every GPU in <root> itself, the
//     directory Cloudpods' host agent hands its pods as
//     CUDA_MPS_PIPE_DIRECTORY. Its servers number devices in the order of
//     its CUDA_VISIBLE_DEVICES, and the memory limit of a GPU is set on that
//     ordinal. CUDA's own order (fastest first) differs from nvidia-smi's
//     PCI order on mixed hosts, which is why the daemon is started with the
//     GPUs' UUIDs listed in a chosen order instead of none.

// VisibleList is CUDA_VISIBLE_DEVICES for a daemon serving uuids: ordinal i
// is uuids[i].
func VisibleList(uuids []string) string { return strings.Join(uuids, ",") }

// Ordinal is uuid's device ordinal in a daemon started with
// CUDA_VISIBLE_DEVICES=visible; ok is false when it is not among them.
func Ordinal(visible, uuid string) (int, bool) {
	if visible == "" {
		return 0, false
	}
	for i, u := range strings.Split(visible, ",") {
		if strings.EqualFold(strings.TrimSpace(u), uuid) {
			return i, true
		}
	}
	return 0, false
}
