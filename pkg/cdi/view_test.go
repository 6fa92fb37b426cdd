package cdi

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"

	"yunion.io/x/mps-daemon/internal/testsupport/golden"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/vdev"
	"yunion.io/x/mps-daemon/pkg/version"
	"yunion.io/x/mps-daemon/pkg/view"
)

// The host's view as the daemon's defaults put it.
const (
	viewLibrary   = "/usr/lib/yunion-mps/libyunion-mps-view.so"
	viewPreload   = "/var/lib/yunion-mps/view/ld.so.preload"
	viewPlatforms = "/var/lib/yunion-mps/view/platforms"
)

func viewOn(o *Options) {
	o.View = View{Library: viewLibrary, Platforms: viewPlatforms, Preload: viewPreload}
}

// viewDir is where the daemon's default state directory keeps a device's
// view (view.Store); Build never reads it.
func viewDir(uuid gpu.UUID, i int) string {
	p, err := view.Store{Dir: "/var/lib/yunion-mps/view"}.Path(vdev.NameOf(uuid, i))
	if err != nil {
		panic(err)
	}
	return p
}

// withViews gives each device its view directory.
func withViews(devs []Device) []Device {
	for i := range devs {
		devs[i].ViewDir = viewDir(devs[i].GPU.UUID, devs[i].Index)
	}
	return devs
}

// TestViewGolden pins the spec with the view on; the CDI library loads
// it, at the version the spec without the view has (the view adds only
// mounts, which 0.3.0 has): Debian 12's Podman takes it.
func TestViewGolden(t *testing.T) {
	defer func(v string) { version.Version = v }(version.Version)
	version.Version = "dev"
	o := testOptions(t)
	viewOn(&o)
	path, _, err := Sync(o, withViews(hostDevices()))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "spec-view.golden.yaml", got)
	loadCache(t, o.Dir)
	on := mustBuild(t, o, withViews(hostDevices()))
	off := mustBuild(t, testOptions(t), hostDevices())
	if on.Version != off.Version || on.Version != "0.5.0" {
		t.Errorf("cdiVersion %s with the view, %s without; want both 0.5.0", on.Version, off.Version)
	}
}

// TestViewOffIsTodaysSpec: with the view off the spec is byte for byte
// the one without it, whatever directories the devices carry.
func TestViewOffIsTodaysSpec(t *testing.T) {
	o := testOptions(t)
	plain, _, err := Sync(o, hostDevices())
	if err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(plain)
	o2 := testOptions(t)
	path, _, err := Sync(o2, withViews(hostDevices()))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if !bytes.Equal(got, want) {
		t.Errorf("with the view off the spec changed:\n%s", got)
	}
}

// TestInjectView: a container of a device gets the library (read-only,
// executable), the preload list over its /etc/ld.so.preload and its
// device's view directory; given devices of two GPUs, the library and the
// list once, each GPU's directory.
func TestInjectView(t *testing.T) {
	o := testOptions(t)
	viewOn(&o)
	devs := withViews(hostDevices())
	writeAndLoad(t, o, devs)
	c := loadCache(t, o.Dir)
	ro := []string{"ro", "nosuid", "nodev", "noexec", "bind"}
	library := oci.Mount{Destination: "/run/yunion-mps/lib/libyunion-mps-view.so", Source: viewLibrary, Type: "bind", Options: []string{"ro", "nosuid", "nodev", "bind"}}
	preload := oci.Mount{Destination: "/etc/ld.so.preload", Source: viewPreload, Type: "bind", Options: ro}
	platforms := oci.Mount{Destination: "/run/yunion-mps/lib/p", Source: viewPlatforms, Type: "bind", Options: []string{"ro", "nosuid", "nodev", "bind"}}
	dirOf := func(d Device) oci.Mount {
		return oci.Mount{Destination: "/run/yunion-mps/view/" + d.GPU.UUID.String(), Source: d.ViewDir, Type: "bind", Options: ro}
	}
	has := func(ms []oci.Mount, m oci.Mount) int {
		n := 0
		for _, x := range ms {
			if fmt.Sprint(x) == fmt.Sprint(m) {
				n++
			}
		}
		return n
	}
	for _, d := range devs {
		for _, name := range deviceNames(d) {
			s := container()
			if _, err := c.InjectDevices(s, QualifiedName(DefaultKind, name)); err != nil {
				t.Fatal(err)
			}
			for _, m := range []oci.Mount{library, platforms, preload, dirOf(d)} {
				if has(s.Mounts, m) != 1 {
					t.Errorf("%s: mounts %+v; want %+v once", name, s.Mounts, m)
				}
			}
			if len(s.Mounts) != 8 {
				t.Errorf("%s: %d mounts, want the 4 without the view and 4 for it", name, len(s.Mounts))
			}
		}
	}
	// devs[0] is on GPU B, devs[1] on GPU A.
	s := container()
	if _, err := c.InjectDevices(s, QualifiedName(DefaultKind, devs[0].Name().String()), QualifiedName(DefaultKind, devs[1].Name().String())); err != nil {
		t.Fatal(err)
	}
	if has(s.Mounts, library) != 1 || has(s.Mounts, platforms) != 1 || has(s.Mounts, preload) != 1 || has(s.Mounts, dirOf(devs[0])) != 1 || has(s.Mounts, dirOf(devs[1])) != 1 {
		t.Errorf("two GPUs' devices: mounts %+v", s.Mounts)
	}
	if i := slices.IndexFunc(s.Mounts, func(m oci.Mount) bool { return m.Destination == library.Destination }); i < 0 || slices.Contains(s.Mounts[i].Options, "noexec") {
		t.Errorf("the library is not mounted executable: %+v", s.Mounts)
	}
}
