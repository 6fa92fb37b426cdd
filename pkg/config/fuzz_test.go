package config

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The parsers take whatever an operator, an editor caught mid-save or an
// attacker leaves in the files. Whatever the input: no panic, the same
// answer twice, every error an *Error naming the file, and what is accepted
// holds what the daemon relies on. The seed corpus (testdata/fuzz) holds the
// malformed inputs of issue 12: files cut mid-write, duplicate keys, merge
// keys, near misses of NVIDIA_MPS, intervals of 1ns, a 0-byte host.conf.
// `make fuzz` runs each target for a few seconds; `go test` runs the seeds.

func FuzzParseDevices(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		df, err := ParseDevices("dev.yml", data)
		df2, err2 := ParseDevices("dev.yml", data)
		if !reflect.DeepEqual(df, df2) || errString(err) != errString(err2) {
			t.Fatalf("two answers for one input: %+v %v / %+v %v", df, err, df2, err2)
		}
		if err != nil {
			checkErrors(t, err, "dev.yml")
			return
		}
		for i, e := range df.Entries {
			if e.Type != TypeNvidiaMPS || e.VirtualNumber < 1 || e.Path == "" || strings.TrimSpace(e.Path) != e.Path || e.Line < 1 {
				t.Fatalf("accepted a bad entry %d: %+v", i, e)
			}
			if i > 0 && e.Index <= df.Entries[i-1].Index {
				t.Fatalf("entries out of order: %+v", df.Entries)
			}
		}
		for _, e := range df.Skipped {
			if e.Type == TypeNvidiaMPS || nearMiss(e.Type) {
				t.Fatalf("an entry of ours (or meant to be) was skipped as another agent's: %+v", e)
			}
		}
	})
}

func FuzzParseHostConf(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		const path = "/etc/yunion/host.conf"
		hc, err := ParseHostConf(path, data)
		hc2, err2 := ParseHostConf(path, data)
		if !reflect.DeepEqual(hc, hc2) || errString(err) != errString(err2) {
			t.Fatalf("two answers for one input")
		}
		if err != nil {
			checkErrors(t, err, path)
			return
		}
		for key, d := range map[string]int64{
			"mps_sync_interval": int64(hc.SyncInterval), "mps_health_interval": int64(hc.HealthInterval),
			"mps_control_timeout": int64(hc.ControlTimeout), "mps_inventory_timeout": int64(hc.InventoryTimeout),
			"mps_reload_hold_time": int64(hc.ReloadHoldTime),
		} {
			b, _ := DurationBounds(key)
			if d < int64(b.Min) || d > int64(b.Max) {
				t.Fatalf("%s = %d accepted outside %v", key, d, b)
			}
		}
		if hc.CudaMPSReplicas < 1 {
			t.Fatalf("cuda_mps_replicas %d accepted", hc.CudaMPSReplicas)
		}
		for _, p := range []string{hc.CudaMPSPipeDirectory, hc.CudaMPSLogDirectory, hc.StateDirectory, hc.SysfsRoot, hc.DevRoot, hc.ProcRoot, hc.CDIDirectory} {
			if !filepath.IsAbs(p) {
				t.Fatalf("relative directory %q accepted", p)
			}
		}
		if f := hc.ContainerDeviceConfigFile; f != "" && !filepath.IsAbs(f) {
			t.Fatalf("device file %q not made absolute", f)
		}
	})
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// checkErrors requires every error joined in err to be an *Error of file
// with a message.
func checkErrors(t *testing.T, err error, file string) {
	t.Helper()
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		var ce *Error
		if !errors.As(e, &ce) || ce.File != file || ce.Msg == "" || ce.Line < 0 {
			t.Fatalf("error %q (%T) does not name %s", e, e, file)
		}
	}
}
