package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Every path an operator can name is read without hanging and without
// reading more than the limit: the daemon's main loop reads these files.
func TestReadFileRefusesWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "devices.yml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	regular := filepath.Join(dir, "host.conf")
	if err := os.WriteFile(regular, []byte("enable_cuda_mps: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.conf")
	if err := os.Symlink(regular, link); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.yml")
	if err := os.WriteFile(big, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, 200<<20); err != nil { // sparse: 200 MB of zeros, no disk used
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path, want string
	}{
		{"fifo", fifo, fifo + ": is a FIFO (named pipe), not a regular file"},
		{"directory", dir, dir + ": is a directory, not a regular file"},
		{"dev zero", "/dev/zero", "/dev/zero: is a character device, not a regular file"},
		{"too big", big, big + ": is 209715200 bytes, more than the 1 MiB a configuration file may have"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { _, err := ReadFile(tc.path, MaxConfigBytes); done <- err }()
			select {
			case err := <-done:
				var ce *Error
				if !errors.As(err, &ce) || err.Error() != tc.want {
					t.Errorf("got %v, want the *Error %q", err, tc.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("ReadFile hangs")
			}
		})
	}
	for _, p := range []string{regular, link} {
		if b, err := ReadFile(p, MaxConfigBytes); err != nil || string(b) != "enable_cuda_mps: true\n" {
			t.Errorf("%s: %q, %v", p, b, err)
		}
	}
	if _, err := ReadFile(filepath.Join(dir, "nope"), MaxConfigBytes); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: %v, want fs.ErrNotExist", err)
	}
	if _, err := ReadFile(regular, 4); err == nil || !strings.Contains(err.Error(), "more than the 4 bytes") {
		t.Errorf("limit: %v", err)
	}
}

func TestLoadersUseTheBoundedRead(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadHostConf(fifo); err == nil || !strings.Contains(err.Error(), fifo+": is a FIFO") {
		t.Errorf("LoadHostConf: %v", err)
	}
	if _, err := LoadDevices(fifo); err == nil || !strings.Contains(err.Error(), fifo+": is a FIFO") {
		t.Errorf("LoadDevices: %v", err)
	}
	hc, err := ParseHostConf("/etc/yunion/host.conf", []byte("mps_inventory_token_file: "+fifo))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hc.TokenValue(); err == nil || !strings.Contains(err.Error(), "mps_inventory_token_file") || !strings.Contains(err.Error(), "FIFO") {
		t.Errorf("TokenValue: %v", err)
	}
}
