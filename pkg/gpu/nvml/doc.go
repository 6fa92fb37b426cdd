// Package nvml is the daemon's door to NVML, and with pkg/gpu/nvmlsim its
// only cgo. It adapts github.com/NVIDIA/go-nvml to gpu.Backend for two kinds
// of machine:
//
//   - a real host, where libnvidia-ml.so.1 is loaded at run time (New), and
//   - a simulated host built from go-nvml's mock machines (pkg/gpu/nvmlsim,
//     through NewWithLibrary).
//
// Both go through the same adapter code, so what the simulation tests is what
// runs on a GPU host. A build without cgo (CGO_ENABLED=0) keeps the exported
// names but every constructor returns ErrNoCgo, so the rest of the module
// still builds and tests without a C toolchain.
package nvml

import "errors"

// ErrNoCgo is returned by every constructor of a build without cgo.
var ErrNoCgo = errors.New("built without cgo: NVML and the simulated GPUs need a cgo build")

// ErrLibraryNotFound means libnvidia-ml.so.1 could not be loaded: no NVIDIA
// driver on this host (or not in the loader's path).
var ErrLibraryNotFound = errors.New("NVML library libnvidia-ml.so.1 not found")

// ErrClosed is returned by an adapter used after Close.
var ErrClosed = errors.New("nvml adapter closed")
