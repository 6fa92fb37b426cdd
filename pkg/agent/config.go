package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"yunion.io/x/mps-daemon/pkg/config"
)

// Config is one consistent reading of both files: host.conf and the device
// YAML it names.
type Config struct {
	Host    *config.HostConf
	Devices *config.DeviceFile // nil when host.conf names no device file
	// digest identifies the bytes both files held when read (empty for a
	// Config built in memory): a reload of the same bytes changes nothing,
	// and a held-back change is applied only if the files still hold it.
	digest string
}

// LoadConfig reads host.conf and the device YAML it names. A device file that
// host.conf names but that does not exist is an error: the operator meant one.
// Every error names the file (and line, where there is one).
func LoadConfig(hostConfPath string) (*Config, error) {
	raw, err := config.ReadFile(hostConfPath, config.MaxConfigBytes)
	if err != nil {
		return nil, fmt.Errorf("reading host config: %w", err)
	}
	hc, err := config.ParseHostConf(hostConfPath, raw)
	if err != nil {
		return nil, err
	}
	sum := sha256.New()
	writeFileDigest(sum, hostConfPath, raw)
	c := &Config{Host: hc}
	if f := hc.ContainerDeviceConfigFile; f != "" {
		raw, err := config.ReadFile(f, config.MaxConfigBytes)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: container_device_config_file names %s, which does not exist", hostConfPath, f)
		}
		if err != nil {
			return nil, fmt.Errorf("reading container device config: %w", err)
		}
		if c.Devices, err = config.ParseDevices(f, raw); err != nil {
			return nil, err
		}
		writeFileDigest(sum, f, raw)
	}
	c.digest = hex.EncodeToString(sum.Sum(nil))
	return c, nil
}

// writeFileDigest adds one file, name and length first, to a digest.
func writeFileDigest(h io.Writer, name string, data []byte) {
	fmt.Fprintf(h, "%s\x00%d\x00", name, len(data))
	_, _ = h.Write(data)
}

// HostName is the name the host registers under: mps_host_name, else the
// kernel's host name.
func HostName(hc *config.HostConf) (string, error) {
	if hc.HostName != "" {
		return hc.HostName, nil
	}
	name, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("reading the host name (set mps_host_name in host.conf): %w", err)
	}
	return name, nil
}
