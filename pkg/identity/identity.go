// Package identity tells which virtual device a process belongs to from
// something the process cannot change: a small read-only file that the CDI
// spec bind-mounts into every container given a device, and that the daemon
// finds again through /proc/<pid>/root.
//
// The host side (Store) keeps one file per virtual device in a directory
// only root can enter (<state directory>/identity, mode 0700): created once,
// never replaced or removed, so the inode a running container holds stays
// the one the daemon knows. The container side is ContainerPath: one file per
// GPU, so a container given devices of two GPUs has both.
//
// Find never trusts what it reads in the container: it walks the path
// component by component without following any symbolic link, opens nothing
// (O_PATH: a FIFO cannot block it, a device node's driver is never called,
// a huge file is never read), and accepts a file only when its device and
// inode are those of one of the Store's files. A tenant can create a file at
// that path in a container without the mount, but not one with that inode:
// the Store's directory is not reachable from any container, and a bind
// mount is the only way to give a file's inode a second path. What that
// leaves open, and to whom, is in docs/containers.md ("Which device a
// process belongs to").
package identity

import (
	"path"
	"strings"

	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// ContainerDir holds the identity files inside a container.
const ContainerDir = "/run/yunion-mps/devices"

// ContainerPath is where a container given a virtual device of GPU gpuUUID
// finds the file naming it; its content is the device's name (vdev.Name)
// and a newline.
func ContainerPath(gpuUUID gpu.UUID) string { return path.Join(ContainerDir, string(gpuUUID)) }

// content is what an identity file holds.
func content(name string) []byte { return []byte(name + "\n") }

// validName accepts only what vdev.NameOf makes, with a GPU UUID fit for a
// file name (no slash, no dot-only name).
func validName(name string) bool {
	uuid, _, err := vdev.ParseName(name)
	return err == nil && uuid != "." && uuid != ".." && !strings.ContainsAny(string(uuid), "/\x00")
}
