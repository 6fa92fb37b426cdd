//go:build cgo

package nvml

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestDriverVersion(t *testing.T) {
	lib := fakeLibrary()
	a, err := NewWithLibrary(lib, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := a.DriverVersion(); err != nil || v != "580.159.04" {
		t.Errorf("DriverVersion() = %q, %v", v, err)
	}
	lib.SystemGetDriverVersionFunc = func() (string, nvml.Return) { return "", nvml.ERROR_UNKNOWN }
	if _, err := a.DriverVersion(); err == nil {
		t.Error("an NVML error was not reported")
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.DriverVersion(); err == nil {
		t.Error("a closed adapter answered")
	}
}
