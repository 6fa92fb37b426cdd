package cdi

import (
	"bytes"
	"testing"

	specs "tags.cncf.io/container-device-interface/specs-go"
)

// wholeEncode is the spec file as one yaml.v3 encode of the whole spec.
func wholeEncode(t *testing.T, s *specs.Spec) []byte {
	t.Helper()
	var b bytes.Buffer
	b.WriteString(header())
	if err := encodeYAML(&b, s); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestEncodeEntriesAsWhole: the spec encoded entry by entry, with edits
// blocks new or reused, is byte for byte the whole spec's one encode; specs
// with what build never writes (annotations, edits for the whole spec) are
// encoded whole.
func TestEncodeEntriesAsWhole(t *testing.T) {
	o := testOptions(t)
	noShm := testOptions(t)
	noShm.ShmPath = NoShm
	withNodes := func(s *specs.Spec) {
		s.Devices[0].ContainerEdits.DeviceNodes = []*specs.DeviceNode{
			{Path: "/dev/nvidia0", HostPath: "/host/dev/nvidia0", Permissions: "rw"},
			{Path: "/dev/nvidiactl", Permissions: "rw"},
		}
	}
	tests := []struct {
		name  string
		o     Options
		edit  func(*specs.Spec)
		whole bool
	}{
		{"host devices", o, func(*specs.Spec) {}, false},
		{"no shm", noShm, func(*specs.Spec) {}, false},
		{"device nodes", o, withNodes, false},
		{"odd strings", o, func(s *specs.Spec) {
			s.Devices[1].ContainerEdits.Env = append(s.Devices[1].ContainerEdits.Env, "A=yes", "B=: x", "C=#", "D=0x10", "E= lead")
		}, false},
		{"spec annotations", o, func(s *specs.Spec) { s.Version, s.Annotations = "0.6.0", map[string]string{"a.b/c": "d"} }, true},
		{"device annotations", o, func(s *specs.Spec) { s.Version, s.Devices[2].Annotations = "0.6.0", map[string]string{"a.b/c": "d"} }, true},
		{"edits for the whole spec", o, func(s *specs.Spec) { s.ContainerEdits.Env = []string{"A=B"} }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Build(tt.o, hostDevices())
			if err != nil {
				t.Fatal(err)
			}
			tt.edit(s)
			want := wholeEncode(t, s)
			got, blocks, err := encodeEntries(s, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("entry by entry:\n%s\nwhole:\n%s", got, want)
			}
			if (blocks == nil) != tt.whole {
				t.Fatalf("blocks %v, want the spec encoded whole: %v", blocks, tt.whole)
			}
			again, _, err := encodeEntries(s, blocks)
			if err != nil || !bytes.Equal(again, want) {
				t.Fatalf("with the blocks of the first encode: %v\n%s", err, again)
			}
		})
	}
}

// TestEncodeReusesEdits: a start's second spec (the same devices, now with
// their inventory ids) encodes no edits again: each block is the first
// spec's, and the bytes are the whole encode's.
func TestEncodeReusesEdits(t *testing.T) {
	o := testOptions(t)
	devs := hostDevices()
	for i := range devs {
		devs[i].ID = ""
	}
	first := mustBuild(t, o, devs)
	_, known, err := encodeEntries(first, nil)
	if err != nil {
		t.Fatal(err)
	}
	second := mustBuild(t, o, hostDevices())
	got, used, err := encodeEntries(second, known)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, wholeEncode(t, second)) {
		t.Fatalf("second spec differs from its whole encode:\n%s", got)
	}
	if len(used) != len(known) || len(used) != len(devs) {
		t.Fatalf("%d blocks used, %d known, want %d each", len(used), len(known), len(devs))
	}
	for k, b := range used {
		if have, ok := known[k]; !ok || &have.data[0] != &b.data[0] {
			t.Errorf("the edits of %s were encoded again", k)
		}
	}
}
