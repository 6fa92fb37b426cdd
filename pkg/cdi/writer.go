package cdi

import (
	"bytes"
	"maps"
	"slices"
	"sort"
)

// Writer is Sync with a memory of the last spec it encoded and of
// everything that spec was built from: the options, the devices and which
// device nodes exist under DevRoot (looked at on every Sync, as Build
// does). When none of them changed, Sync reuses the bytes instead of
// building, validating and encoding the spec again (most of a reconcile's
// work on an idle host), and still compares them with the file, which it
// rewrites when the file differs (edited or removed by hand). The spec
// therefore always is what Build and Write would make of the inputs now.
// When they changed, the device entries' edits it encoded last time are
// reused where they are the same (encodeEntries).
//
// The zero Writer is ready. It is not safe for concurrent use: the agent
// keeps one in its loop.
type Writer struct {
	opts  settled
	devs  []Device // as the spec was built from them: keyOf
	nodes nodeSet
	data  []byte // nil: nothing remembered
	// blocks are the device entries' edits as that spec encoded them
	// (encode.go): a spec built anew encodes only the edits it does not
	// share with it (a start's second spec: none, only the ids' names).
	blocks editBlocks
	// builds counts the specs encoded (the tests see the cache work).
	builds int
}

// Sync makes the spec file match devs, as the package's Sync does.
func (w *Writer) Sync(opts Options, devs []Device) (path string, changed bool, err error) {
	o := opts.settle()
	if len(devs) == 0 {
		w.data = nil
		if path, err = specPath(o); err != nil {
			return "", false, err
		}
		changed, err = remove(o, path)
		return path, changed, err
	}
	data, err := w.encoded(o, devs)
	if err != nil {
		return "", false, err
	}
	path, err = specPath(o)
	if err != nil {
		return "", false, err
	}
	// Not loaded back by the CDI library: build made the spec from
	// validated devices and validateSpec ran the loader's checks on it
	// (only Write, given any spec, loads the file). Loading 32 devices'
	// spec back cost a start as much as encoding it.
	changed, err = writeData(o, path, data, false)
	if err != nil {
		return "", false, err
	}
	return path, changed, nil
}

// encoded is the file's bytes for devs: the remembered ones when the
// inputs are the same, else Build's spec (with its checks, in its order)
// encoded, and remembered. Nothing is remembered of a failure.
func (w *Writer) encoded(o settled, devs []Device) ([]byte, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	key := keyOf(devs)
	nodes, nodesErr := findNodes(o.DevRoot, minorsOf(key))
	if nodesErr == nil && w.data != nil && w.opts == o && maps.Equal(w.nodes, nodes) && slices.Equal(w.devs, key) {
		return w.data, nil
	}
	w.data = nil
	if err := validateDevices(o, devs); err != nil {
		return nil, err
	}
	if nodesErr != nil {
		return nil, nodesErr
	}
	s := build(o, key, nodes)
	if err := validateSpec(s); err != nil {
		return nil, err
	}
	data, blocks, err := encodeEntries(s, w.blocks)
	if err != nil {
		return nil, err
	}
	// Cloned: the encoder's buffer has room to spare, kept for as long
	// as the bytes are.
	w.opts, w.devs, w.nodes, w.data, w.blocks = o, key, nodes, bytes.Clone(data), blocks
	w.builds++
	return data, nil
}

// keyOf is devs as a spec is built from them: sorted as build sorts them,
// and without what no spec shows but changes between reconciles (the
// memory NVML saw in use when it listed the GPU, its compute mode, which
// the daemon sets after the first listing), so that a spec is not encoded
// again for them. build reads only what is left.
func keyOf(devs []Device) []Device {
	key := slices.Clone(devs)
	for i := range key {
		key[i].GPU.MemoryUsed, key[i].GPU.ComputeMode = 0, 0
	}
	sort.SliceStable(key, func(i, j int) bool { return byGPUIndex(key[i], key[j]) < 0 })
	return key
}
