package cdi

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"yunion.io/x/mps-daemon/pkg/gpu"
)

// syncedBytes is what a Writer's Sync left in the spec file.
func syncedBytes(t *testing.T, w *Writer, o Options, devs []Device) ([]byte, bool) {
	t.Helper()
	path, changed, err := w.Sync(o, devs)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b, changed
}

// freshBytes is what the package's Sync, with nothing remembered, writes
// for the same inputs in a directory of its own.
func freshBytes(t *testing.T, o Options, devs []Device) []byte {
	t.Helper()
	o.Dir = t.TempDir()
	path, _, err := Sync(o, devs)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestWriterReusesSpec: the same devices, in another order and with other
// memory in use on their GPUs and another compute mode, are not encoded again, and the file is what
// a fresh Sync writes.
func TestWriterReusesSpec(t *testing.T) {
	o := testOptions(t)
	var w Writer
	devs := hostDevices()
	first, changed := syncedBytes(t, &w, o, devs)
	if !changed {
		t.Fatal("first Sync wrote nothing")
	}
	again := append([]Device(nil), devs[3:]...)
	again = append(again, devs[:3]...)
	for i := range again {
		again[i].GPU.MemoryUsed, again[i].GPU.ComputeMode = 1<<30, gpu.ComputeModeExclusiveProcess
	}
	b, changed := syncedBytes(t, &w, o, again)
	if changed || !bytes.Equal(b, first) || w.builds != 1 {
		t.Fatalf("second Sync: changed %v, same bytes %v, %d specs encoded; want false, true, 1", changed, bytes.Equal(b, first), w.builds)
	}
	if !bytes.Equal(b, freshBytes(t, o, again)) {
		t.Fatal("the remembered spec differs from a fresh one")
	}

	// A device changed (an id given): encoded again.
	devs[3].ID = "5d3c1e0b-7f1a-4c55-9a0e-2b8f7c6d5e41"
	b, changed = syncedBytes(t, &w, o, devs)
	if !changed || w.builds != 2 || !bytes.Contains(b, []byte(devs[3].ID)) {
		t.Fatalf("after an id was given: changed %v, %d specs encoded, id in the spec %v", changed, w.builds, bytes.Contains(b, []byte(devs[3].ID)))
	}
	if !bytes.Equal(b, freshBytes(t, o, devs)) {
		t.Fatal("the rebuilt spec differs from a fresh one")
	}
}

// TestWriterRebuildsWhenNodesChange: a device node that appears under the
// dev root (the driver loaded), or goes, changes the spec at the next Sync
// though the devices did not change.
func TestWriterRebuildsWhenNodesChange(t *testing.T) {
	root := charDevRoot(t, "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")
	o := Options{Dir: t.TempDir(), DevRoot: root}
	var w Writer
	devs := hostDevices()
	b, _ := syncedBytes(t, &w, o, devs)
	if bytes.Contains(b, []byte("/dev/nvidia0")) {
		t.Fatal("the spec names /dev/nvidia0 before it exists")
	}
	if err := syscall.Mknod(filepath.Join(root, "nvidia0"), syscall.S_IFCHR|0o666, 195<<8); err != nil {
		t.Fatal(err)
	}
	b, changed := syncedBytes(t, &w, o, devs)
	if !changed || !bytes.Contains(b, []byte("path: /dev/nvidia0")) {
		t.Fatalf("after /dev/nvidia0 appeared: changed %v, spec names it %v; want both", changed, bytes.Contains(b, []byte("/dev/nvidia0")))
	}
	if !bytes.Equal(b, freshBytes(t, o, devs)) {
		t.Fatal("the rebuilt spec differs from a fresh one")
	}
	// Replaced by a plain file: no device node any more.
	if err := os.Remove(filepath.Join(root, "nvidia0")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "nvidia0"), nil, 0o666); err != nil {
		t.Fatal(err)
	}
	b, changed = syncedBytes(t, &w, o, devs)
	if !changed || bytes.Contains(b, []byte("/dev/nvidia0")) {
		t.Fatalf("after /dev/nvidia0 went: changed %v, spec names it %v; want true, false", changed, bytes.Contains(b, []byte("/dev/nvidia0")))
	}
	if w.builds != 3 {
		t.Errorf("%d specs encoded, want 3", w.builds)
	}
}

// TestWriterRepairsFile: a spec file edited or removed by hand is written
// again from the remembered bytes.
func TestWriterRepairsFile(t *testing.T) {
	o := testOptions(t)
	var w Writer
	devs := hostDevices()
	want, _ := syncedBytes(t, &w, o, devs)
	path, err := SpecPath(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, damage := range []func() error{
		func() error { return os.WriteFile(path, append(bytes.Clone(want), "# edited\n"...), 0o644) },
		func() error { return os.Remove(path) },
	} {
		if err := damage(); err != nil {
			t.Fatal(err)
		}
		b, changed := syncedBytes(t, &w, o, devs)
		if !changed || !bytes.Equal(b, want) {
			t.Fatalf("after damage: changed %v, restored %v; want both", changed, bytes.Equal(b, want))
		}
	}
	if w.builds != 1 {
		t.Errorf("%d specs encoded, want 1", w.builds)
	}
	// No devices: the file goes, and nothing is remembered.
	if _, changed, err := w.Sync(o, nil); err != nil || !changed {
		t.Fatalf("Sync(no devices) = %v, %v; want the file removed", changed, err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("spec still there: %v", err)
	}
	if b, _ := syncedBytes(t, &w, o, devs); !bytes.Equal(b, want) || w.builds != 2 {
		t.Fatalf("after the devices came back: restored %v, %d specs encoded; want true, 2", bytes.Equal(b, want), w.builds)
	}
}

// TestWriterRefusesAsBuild: invalid devices are refused with Build's
// error, before and after a good spec was remembered, and the file stays.
func TestWriterRefusesAsBuild(t *testing.T) {
	o := testOptions(t)
	var w Writer
	devs := hostDevices()
	bad := hostDevices()
	bad[1].Index = -1
	_, buildErr := Build(o, bad)
	if buildErr == nil {
		t.Fatal("test: Build took a negative slice index")
	}
	if _, _, err := w.Sync(o, bad); err == nil || err.Error() != buildErr.Error() {
		t.Fatalf("Sync(bad) = %v, want Build's %v", err, buildErr)
	}
	want, _ := syncedBytes(t, &w, o, devs)
	if _, _, err := w.Sync(o, bad); err == nil || err.Error() != buildErr.Error() {
		t.Fatalf("Sync(bad) after a good one = %v, want Build's %v", err, buildErr)
	}
	path, _ := SpecPath(o)
	if b, err := os.ReadFile(path); err != nil || !bytes.Equal(b, want) {
		t.Fatalf("the good spec did not stay: %v", err)
	}
}
