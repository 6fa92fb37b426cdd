package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"yunion.io/x/mps-daemon/pkg/config"
)

// Config is one consistent reading of both files: host.conf and the device
// YAML it names.
type Config struct {
	Host    *config.HostConf
	Devices *config.DeviceFile // nil when host.conf names no device file
}

// LoadConfig reads host.conf and the device YAML it names. A device file that
// host.conf names but that does not exist is an error: the operator meant one.
// Every error names the file (and line, where there is one).
func LoadConfig(hostConfPath string) (*Config, error) {
	hc, err := config.LoadHostConf(hostConfPath)
	if err != nil {
		return nil, err
	}
	c := &Config{Host: hc}
	if hc.ContainerDeviceConfigFile == "" {
		return c, nil
	}
	df, err := config.LoadDevices(hc.ContainerDeviceConfigFile)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: container_device_config_file names %s, which does not exist", hostConfPath, hc.ContainerDeviceConfigFile)
		}
		return nil, err
	}
	c.Devices = df
	return c, nil
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
