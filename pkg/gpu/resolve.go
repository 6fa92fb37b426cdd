package gpu

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"yunion.io/x/mps-daemon/pkg/pci"
)

// ErrNoGPU is wrapped by every Resolve error: the configured path names no
// GPU that NVML sees.
var ErrNoGPU = errors.New("no such GPU")

// Resolver finds the GPU a device YAML `path` names. Cloudpods operators
// write render nodes (/dev/dri/renderD128) there, which NVML knows nothing
// of, so the link from render node to PCI device is read from sysfs. Both
// roots come from host.conf so tests run on fake trees.
type Resolver struct {
	SysfsRoot string
	DevRoot   string
}

var (
	nvidiaNode = regexp.MustCompile(`^nvidia([0-9]+)$`)
	drmNode    = regexp.MustCompile(`^dri/((?:renderD|card)[0-9]+)$`)
	byPathNode = regexp.MustCompile(`^dri/by-path/pci-(.+)-(?:render|card)$`)
	drmName    = regexp.MustCompile(`^(?:renderD|card)[0-9]+$`)
)

// Resolve returns the GPU among gpus that path names. path may be a GPU UUID
// (any case), a PCI address (any case, with or without domain),
// /dev/nvidiaN (the GPU whose Minor is N), a DRM node /dev/dri/renderDN (or
// cardN), or its /dev/dri/by-path/pci-<address>-render link. Addresses are
// compared as numbers, never as strings (Cloudpods issue 24931). Errors say
// what was tried and wrap ErrNoGPU.
func (r Resolver) Resolve(path string, gpus []Info) (Info, error) {
	p := strings.TrimSpace(path)
	switch {
	case p == "":
		return Info{}, notFound(nil, "empty path")
	case len(p) > 4 && strings.EqualFold(p[:4], "GPU-"):
		for _, g := range gpus {
			if strings.EqualFold(string(g.UUID), p) {
				return g, nil
			}
		}
		return Info{}, notFound(nil, "GPU UUID %s is not a GPU seen by NVML (%s)", p,
			listGPUs(gpus, "GPUs", func(g Info) string { return string(g.UUID) }))
	case strings.HasPrefix(p, "/dev/"):
		return r.resolveDev(p, gpus)
	case pci.LooksLike(p):
		a, err := pci.Parse(p)
		if err != nil {
			return Info{}, notFound(err, "%v", err)
		}
		return byAddress(gpus, a, "PCI address "+a.String())
	}
	return Info{}, notFound(nil, "%q is not a GPU UUID, a PCI address or a /dev path "+
		"(want GPU-..., 0000:1a:00.0, /dev/nvidiaN, /dev/dri/renderDN or /dev/dri/by-path/pci-<address>-render)", p)
}

// resolveDev handles the /dev/... forms.
func (r Resolver) resolveDev(p string, gpus []Info) (Info, error) {
	p = path.Clean(p)
	rel := strings.TrimPrefix(p, "/dev/")
	if m := nvidiaNode.FindStringSubmatch(rel); m != nil {
		minor, err := strconv.Atoi(m[1])
		if err != nil {
			return Info{}, notFound(err, "%s: bad minor number", p)
		}
		for _, g := range gpus {
			if g.Minor == minor {
				return g, nil
			}
		}
		return Info{}, notFound(nil, "%s: no GPU seen by NVML has minor number %d (%s)", p, minor,
			listGPUs(gpus, "minor numbers", func(g Info) string { return strconv.Itoa(g.Minor) }))
	}
	if m := drmNode.FindStringSubmatch(rel); m != nil {
		what := "render node " + p
		if strings.HasPrefix(m[1], "card") {
			what = "card node " + p
		}
		a, err := r.drmDevice(what, m[1])
		if err != nil {
			return Info{}, err
		}
		return byAddress(gpus, a, fmt.Sprintf("%s is PCI device %s, which", what, a))
	}
	if m := byPathNode.FindStringSubmatch(rel); m != nil {
		return r.resolveByPath(p, m[1], gpus)
	}
	return Info{}, notFound(nil, "%s: not a device path this daemon understands "+
		"(want /dev/nvidiaN, /dev/dri/renderDN or /dev/dri/by-path/pci-<address>-render)", p)
}

// resolveByPath follows a udev by-path link to its DRM node and that node to
// its PCI device. udev derives the link's name from the same PCI device, so
// when the link cannot be followed (a copied config, a host without
// nvidia-drm) the address in the name is used instead.
func (r Resolver) resolveByPath(p, nameAddr string, gpus []Info) (Info, error) {
	what := "by-path link " + p
	link := filepath.Join(r.DevRoot, strings.TrimPrefix(p, "/dev/"))
	var linkErr error
	target, err := os.Readlink(link)
	switch {
	case err != nil:
		linkErr = fmt.Errorf("%s: %s", link, reason(err))
	case !drmName.MatchString(filepath.Base(target)):
		linkErr = fmt.Errorf("%s points to %s, not a DRM node", link, target)
	default:
		a, err := r.drmDevice(what, filepath.Base(target))
		if err == nil {
			return byAddress(gpus, a, fmt.Sprintf("%s is PCI device %s, which", what, a))
		}
		linkErr = err
	}
	a, err := pci.Parse(nameAddr)
	if err != nil {
		return Info{}, notFound(errors.Join(linkErr, err), "%s: cannot follow it (%v) and its name holds no PCI address: %v", p, linkErr, err)
	}
	return byAddress(gpus, a, fmt.Sprintf("%s names PCI device %s, which", what, a))
}

// drmDevice reads the PCI address of a DRM node from the kernel's
// <sysfs>/class/drm/<name>/device link, whose last element is the address.
func (r Resolver) drmDevice(what, name string) (pci.Address, error) {
	link := filepath.Join(r.SysfsRoot, "class", "drm", name, "device")
	target, err := os.Readlink(link)
	if err != nil {
		return pci.Address{}, notFound(err, "%s: %s: %s", what, link, reason(err))
	}
	a, err := pci.Parse(filepath.Base(target))
	if err != nil {
		return pci.Address{}, notFound(err, "%s: %s points to %s, not a PCI device", what, link, target)
	}
	return a, nil
}

// byAddress finds the GPU at a; subject starts the message when none is.
func byAddress(gpus []Info, a pci.Address, subject string) (Info, error) {
	for _, g := range gpus {
		if g.PCI == a {
			return g, nil
		}
	}
	return Info{}, notFound(nil, "%s is not an NVIDIA GPU seen by NVML (%s)", subject,
		listGPUs(gpus, "GPUs", func(g Info) string { return g.PCI.String() }))
}

// listGPUs ends a "not found" message with what NVML does see: label and
// each GPU's field, or that it sees none.
func listGPUs(gpus []Info, label string, field func(Info) string) string {
	if len(gpus) == 0 {
		return "NVML sees no GPU"
	}
	s := make([]string, len(gpus))
	for i, g := range gpus {
		s[i] = field(g)
	}
	return label + ": " + strings.Join(s, ", ")
}

// reason says briefly why a link could not be read.
func reason(err error) string {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "no such file"
	case errors.Is(err, syscall.EINVAL):
		return "not a symbolic link"
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// resolveError carries a message of its own while wrapping ErrNoGPU and the
// underlying cause, so callers can errors.Is either.
type resolveError struct {
	msg   string
	cause error
}

func (e *resolveError) Error() string { return e.msg }

func (e *resolveError) Unwrap() []error {
	if e.cause == nil {
		return []error{ErrNoGPU}
	}
	return []error{ErrNoGPU, e.cause}
}

func notFound(cause error, format string, args ...any) error {
	return &resolveError{msg: fmt.Sprintf(format, args...), cause: cause}
}
