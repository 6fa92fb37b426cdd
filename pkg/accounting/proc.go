package accounting

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"yunion.io/x/mps-daemon/pkg/clientreport"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/identity"
	"yunion.io/x/mps-daemon/pkg/pod"
)

// ErrExited: the process is gone (no /proc entry) or a zombie.
var ErrExited = errors.New("process has exited")

// ErrNoIdentity: a process in a container (a mount namespace other than the
// host's) whose device cannot be established: no identity file of its GPU
// is reachable from it, from an ancestor in its cgroup or from any other
// process of its cgroup, or the processes of its cgroup see several
// devices. Its environment is not believed, and under enforce it is
// treated as over every cap it could be under (issue 23): a container
// reaches MPS only through the CDI spec, which always mounts the identity,
// so a client in one with no identity has hidden it.
var ErrNoIdentity = errors.New("in a container without a visible identity file")

// ErrUnverified: no identity file was found and the process is not known to
// be outside containers, but the host's identity files or mount namespace
// could not be read: the daemon cannot tell a hidden container process
// from a host process, so the process is reported and never terminated.
var ErrUnverified = errors.New("no identity file found, and the host's identity files or mount namespace could not be read")

// ErrHostSandbox: a process outside the host's mount namespace whose root
// directory is the host's, and whose cgroup shows no identity file: a host
// service in a mount namespace of its own (systemd's ProtectSystem,
// PrivateTmp), not a container, whose root is its image. Reported, never
// terminated, as host processes are.
var ErrHostSandbox = errors.New("outside the host's mount namespace, but its root directory is the host's")

// Where a process's device was learnt.
const (
	// SourceIdentity: the identity file its container was given, as the
	// process itself sees its mount namespace.
	SourceIdentity = "identity"
	// SourceAncestor: the process's own view hides its identity file
	// (chroot, mounts over it, new namespaces); an ancestor in the same
	// cgroup, which the process cannot leave, still sees it.
	SourceAncestor = "ancestor"
	// SourceCgroup: neither the process nor an ancestor sees its identity
	// file (started by the runtime's exec, or its container's first process
	// hid itself after starting others), but the other processes of its
	// cgroup, which it cannot leave, see one device of the GPU.
	SourceCgroup = "cgroup"
	// SourceEnviron: YUNION_MPS_VIRTUAL_DEVICE; believed only for processes
	// in the host's mount namespace, that is outside containers.
	SourceEnviron = "environ"
	// SourceUnknown counts the clients billed to no device (status and
	// metrics; no Client carries it).
	SourceUnknown = "unknown"
)

// Sources lists every source a count of clients is kept for.
func Sources() []string {
	return []string{SourceIdentity, SourceAncestor, SourceCgroup, SourceEnviron, SourcePod, SourceUnknown}
}

// Limits on what is read from /proc: a process controls the size of its
// environment, and nothing here may cost more than a bounded read.
const (
	maxStat   = 4 << 10
	maxCgroup = 64 << 10
	// maxAncestors bounds the walk up a process's parents.
	maxAncestors = 32
	// maxPeers bounds how many processes of one cgroup are looked at for
	// an identity file.
	maxPeers = 256
)

// Identity is what the Mapper knows of one process.
type Identity struct {
	// Device is the virtual device it is billed to (see vdev.Name); set
	// only with a nil error.
	Device string
	// Source says how Device was learnt (SourceIdentity, SourceAncestor,
	// SourceEnviron).
	Source string
	// StartTicks is field 22 of /proc/<pid>/stat, the start time in clock
	// ticks after boot: larger is newer, and a PID with another start time
	// is another process.
	StartTicks uint64
	// Environment is what YUNION_MPS_VIRTUAL_DEVICE says in the process's
	// environment: "" when unset, the value, or "invalid: ..." when it
	// cannot name a device.
	Environment string
	// Detail says, for SourceAncestor, whose identity file was used, and
	// describes any decoy found where the identity file belongs.
	Detail string
	// QoSEnv is what its environment says of its QoS (qos.go).
	QoSEnv clientreport.QoSEnv
	// Pod is the Cloudpods pod it is in (Source SourcePod): the Mapper
	// leaves Device to the Accountant, which knows what its server holds
	// (pods.go).
	Pod pod.Pod
}

// Mismatch reports whether a process billed by its identity file shows
// another device (or none) in its environment, or had its identity hidden
// from its own view.
func (id Identity) Mismatch() bool {
	return id.Device != "" && id.Source != SourceEnviron && id.Source != SourcePod && (id.Environment != id.Device || id.Source == SourceAncestor || id.Source == SourceCgroup)
}

// Mapper maps PIDs (in the PID namespace of ProcRoot) to virtual devices.
// A process in a container is billed by the identity file mounted there
// (pkg/identity), found through /proc/<pid>/root; the environment is the
// source only for processes in the host's mount namespace (PID 1's), where
// no container runtime put them. Use it from one goroutine.
type Mapper struct {
	// ProcRoot is where procfs is mounted; "" means /proc. Tests point it at
	// a fake tree.
	ProcRoot string
	// Identities lists the host's identity files (identity.Store.Table).
	// Nil: there are none, and only host processes can be billed.
	Identities func() (identity.Table, error)
	// Pods finds the Cloudpods pod of a process's cgroup (pkg/pod); nil:
	// none is looked for.
	Pods PodFinder

	table  identity.Table
	hostNS string
	// hostRoot is the host's root directory (PID 1's, or the daemon's own).
	hostRoot devIno
	// sure: the identity files and the host's root directory were read, so
	// a process in a container without an identity has hidden it
	// (ErrNoIdentity), and is not one the daemon cannot place
	// (ErrUnverified).
	sure bool
	// peers caches, for one sample, what the processes of a cgroup see.
	peers map[peerKey]peerView
}

type peerKey struct {
	cgroup string
	gpu    gpu.UUID
}

// devIno names a directory: its file system and inode.
type devIno struct{ dev, ino uint64 }

// rootOf is the directory file (an open directory, or a /proc/<pid>/root
// link, followed) names; false when it cannot be read.
func rootOf(dirfd int, file string) (devIno, bool) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, file, &st, 0); err != nil {
		return devIno{}, false
	}
	return devIno{uint64(st.Dev), st.Ino}, true
}

// peerView is what the processes of one cgroup see of one GPU: the
// devices, at most two (two are already too many), and a process that saw
// each.
type peerView struct {
	devices []string
	pids    []int
}

// ErrOwnNamespace: PID 1's mount namespace could not be read (the daemon
// runs in a user namespace of its own, or without the right to look at
// PID 1), so the daemon's own is taken for the host's. Under systemd the
// daemon's own is private (ProtectSystem), which is why PID 1's comes first.
var ErrOwnNamespace = errors.New("the host's mount namespace (PID 1's) cannot be read; the daemon's own stands for it")

// Refresh reads what the lookups of one sample share: the host's identity
// files and the host's mount namespace. Until it finds a namespace, no
// process is taken to be outside containers. An error wrapping
// ErrOwnNamespace is a warning: the lookups go on with the daemon's own.
func (m *Mapper) Refresh() error {
	var errs []error
	m.table, m.sure, m.peers = nil, true, map[peerKey]peerView{}
	if m.Identities != nil {
		t, err := m.Identities()
		if err != nil {
			errs = append(errs, err)
			m.sure = false
		}
		m.table = t
	}
	root, ok := rootOf(unix.AT_FDCWD, m.path(1, "root"))
	if !ok {
		root, ok = rootOf(unix.AT_FDCWD, "/")
	}
	m.hostRoot, m.sure = root, m.sure && ok
	ns, err := os.Readlink(m.path(1, "ns/mnt"))
	if err != nil {
		own, ownErr := os.Readlink(m.path(os.Getpid(), "ns/mnt"))
		if ownErr == nil {
			ns, err = own, fmt.Errorf("%w: %w", ErrOwnNamespace, err)
		} else {
			err = fmt.Errorf("reading the host's mount namespace: %w", err)
		}
		errs = append(errs, err)
	}
	m.hostNS = ns
	return errors.Join(errs...)
}

func (m *Mapper) procRoot() string {
	if m.ProcRoot == "" {
		return "/proc"
	}
	return m.ProcRoot
}

func (m *Mapper) path(pid int, file string) string {
	return filepath.Join(m.procRoot(), strconv.Itoa(pid), file)
}

// Lookup names the device pid is billed to on GPU gpuUUID: by the identity
// file its own view shows, by its environment in the host's mount
// namespace, else by the identity an ancestor in its cgroup sees, else by
// the one device the other processes of its cgroup see. Errors:
// ErrExited when it is gone; ErrNoIdentity for a process in a container
// whose device cannot be established that way (ErrUnverified instead when
// the host's identity files or mount namespace could not be read); for a host process, ErrNoDevice when its
// environment names none and vdev.ErrBadName for a malformed name; other
// errors when /proc could not be read. Only a nil error gives a Device;
// StartTicks and Environment are filled in whenever they were read.
func (m *Mapper) Lookup(pid int, gpuUUID gpu.UUID) (Identity, error) {
	p, err := m.open(pid)
	if err != nil {
		return Identity{}, err
	}
	defer p.Close()
	st, err := p.stat()
	if err != nil {
		return Identity{}, err
	}
	id := Identity{StartTicks: st.StartTicks}
	envDevice, qosEnv, envErr := p.environ()
	id.QoSEnv = qosEnv
	switch {
	case envErr == nil:
		id.Environment = envDevice
	case errors.Is(envErr, ErrExited):
		return id, envErr
	case !errors.Is(envErr, ErrNoDevice):
		id.Environment = envDisplay("invalid: " + envErr.Error())
	}
	if m.Pods != nil {
		cg, err := p.cgroup()
		if err != nil {
			return id, err
		}
		pd, err := m.Pods.Find(cg)
		switch {
		case err == nil:
			id.Source, id.Pod = SourcePod, pd
			return id, p.stillThere()
		case !errors.Is(err, pod.ErrNotPod):
			// In a pod's cgroup, its server not known: what follows may
			// still bill it (an identity file NRI mounted); if not, it
			// says why.
			id.Detail = err.Error()
		}
	}
	name, decoy, err := identity.Find(p.fd(), gpuUUID, m.table)
	if err != nil && !errors.Is(err, identity.ErrNotFound) {
		return id, p.gone(fmt.Errorf("PID %d: %w", pid, err))
	}
	if decoy != "" {
		id.Detail = join(id.Detail, "decoy at "+decoy)
	}
	if err == nil {
		id.Device, id.Source = name, SourceIdentity
		return id, p.stillThere()
	}
	ns, err := p.mountNS()
	if err != nil {
		return id, err
	}
	if m.hostNS != "" && ns == m.hostNS {
		if envErr != nil {
			return id, fmt.Errorf("PID %d: %w", pid, envErr)
		}
		id.Device, id.Source = envDevice, SourceEnviron
		return id, p.stillThere()
	}
	if m.hostNS == "" {
		return id, p.gone(fmt.Errorf("PID %d (mount namespace %s): %w", pid, ns, ErrUnverified))
	}
	cg, err := p.cgroup()
	if err != nil {
		return id, err
	}
	anc, ancName := m.ancestor(cg, st.PPID, gpuUUID)
	if ancName != "" {
		id.Device, id.Source = ancName, SourceAncestor
		id.Detail = join(fmt.Sprintf("identity file seen by PID %d, its ancestor in the same cgroup", anc), id.Detail)
		return id, p.stillThere()
	}
	view := m.peerView(cg, gpuUUID, pid)
	switch len(view.devices) {
	case 1:
		id.Device, id.Source = view.devices[0], SourceCgroup
		id.Detail = join(fmt.Sprintf("identity file seen by PID %d, a process of the same cgroup", view.pids[0]), id.Detail)
		return id, p.stillThere()
	case 0:
		id.Detail = join("neither it, its ancestors in its cgroup nor the other processes of its cgroup see an identity file", id.Detail)
		if root, ok := rootOf(p.fd(), "root"); ok && root == m.hostRoot {
			return id, p.gone(fmt.Errorf("PID %d (mount namespace %s): %w", pid, ns, ErrHostSandbox))
		}
	default:
		id.Detail = join(fmt.Sprintf("the processes of its cgroup see several devices (%s by PID %d, %s by PID %d)",
			view.devices[0], view.pids[0], view.devices[1], view.pids[1]), id.Detail)
	}
	if !m.sure {
		return id, p.gone(fmt.Errorf("PID %d (mount namespace %s): %w", pid, ns, ErrUnverified))
	}
	return id, p.gone(fmt.Errorf("PID %d (mount namespace %s): %w", pid, ns, ErrNoIdentity))
}

// ancestor walks up from ppid while the parents share the process's cgroup
// cg (which no process can leave on its own) and stay out of the host's
// mount namespace, and returns the first one that sees an identity file of
// the GPU. So the processes of a container are only ever billed through
// their own container's processes: the walk ends at the runtime (conmon, a
// shim), which lives in the host's namespace or in another cgroup.
func (m *Mapper) ancestor(cg []byte, ppid int, gpuUUID gpu.UUID) (int, string) {
	for hops := 0; hops < maxAncestors && ppid > 1; hops++ {
		name, next, ok := m.tryAncestor(ppid, cg, gpuUUID)
		if name != "" {
			return ppid, name
		}
		if !ok {
			break
		}
		ppid = next
	}
	return 0, ""
}

// peerView is what the other processes of cgroup cg, outside the host's
// mount namespace, see of the GPU: the process itself (self) may have
// hidden its view, but it cannot leave its cgroup, and a container's cgroup
// holds only that container's processes. Cached for the sample, so many
// hidden processes of one container cost one scan of /proc. The root
// cgroup (every process not placed in one) is no container's.
func (m *Mapper) peerView(cg []byte, gpuUUID gpu.UUID, self int) peerView {
	key := peerKey{string(cg), gpuUUID}
	if v, ok := m.peers[key]; ok {
		return v
	}
	if m.peers == nil {
		m.peers = map[peerKey]peerView{}
	}
	var v peerView
	defer func() { m.peers[key] = v }()
	if isRootCgroup(cg) {
		return v
	}
	d, err := os.Open(m.procRoot())
	if err != nil {
		return v
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return v
	}
	pids := make([]int, 0, len(names))
	for _, n := range names {
		if pid, err := strconv.Atoi(n); err == nil && pid != self && pid > 1 {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids) // the container's first processes first
	seen := 0
	for _, pid := range pids {
		name, same := m.tryPeer(pid, cg, gpuUUID)
		if !same {
			continue
		}
		if seen++; seen > maxPeers {
			break
		}
		if name != "" && !slices.Contains(v.devices, name) {
			v.devices, v.pids = append(v.devices, name), append(v.pids, pid)
			if len(v.devices) == 2 {
				break
			}
		}
	}
	return v
}

// tryPeer says whether pid is in cgroup cg and outside the host's mount
// namespace, and which device of the GPU its view shows ("" none).
func (m *Mapper) tryPeer(pid int, cg []byte, gpuUUID gpu.UUID) (name string, same bool) {
	a, err := m.open(pid)
	if err != nil {
		return "", false
	}
	defer a.Close()
	acg, err := a.cgroup()
	if err != nil || !bytes.Equal(acg, cg) {
		return "", false
	}
	if ns, err := a.mountNS(); err != nil || ns == m.hostNS {
		return "", false
	}
	if name, _, err := identity.Find(a.fd(), gpuUUID, m.table); err == nil {
		return name, true
	}
	return "", true
}

// isRootCgroup: every line of /proc/<pid>/cgroup names the root ("/").
func isRootCgroup(cg []byte) bool {
	for line := range bytes.SplitSeq(bytes.TrimSpace(cg), []byte{'\n'}) {
		if i := bytes.LastIndexByte(line, ':'); i < 0 || string(line[i+1:]) != "/" {
			return false
		}
	}
	return true
}

// tryAncestor looks at one ancestor: the name its view gives, or its own
// parent and whether the walk may go on.
func (m *Mapper) tryAncestor(pid int, cg []byte, gpuUUID gpu.UUID) (name string, ppid int, ok bool) {
	a, err := m.open(pid)
	if err != nil {
		return "", 0, false
	}
	defer a.Close()
	st, err := a.stat()
	if err != nil {
		return "", 0, false
	}
	acg, err := a.cgroup()
	if err != nil || !bytes.Equal(acg, cg) {
		return "", 0, false
	}
	if ns, err := a.mountNS(); err != nil || m.hostNS == "" || ns == m.hostNS {
		return "", 0, false
	}
	if name, _, err := identity.Find(a.fd(), gpuUUID, m.table); err == nil {
		return name, 0, false
	}
	return "", st.PPID, true
}

// StartTicks reads the start time of pid; ErrExited for a process that is
// gone or a zombie (which holds no GPU memory and cannot be signalled away).
func (m *Mapper) StartTicks(pid int) (uint64, error) {
	p, err := m.open(pid)
	if err != nil {
		return 0, err
	}
	defer p.Close()
	st, err := p.stat()
	if err != nil {
		return 0, err
	}
	return st.StartTicks, nil
}

// procDir is one process's /proc directory, held open: every file is read
// relative to it, so a PID reused while it is read cannot stand in for it
// (the old directory's files fail once its process is gone).
type procDir struct {
	*os.File
	pid int
}

func (m *Mapper) open(pid int) (*procDir, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("PID %d is not a process", pid)
	}
	f, err := os.Open(m.path(pid, ""))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("PID %d: %w", pid, ErrExited)
	}
	if err != nil {
		return nil, fmt.Errorf("PID %d: %w", pid, err)
	}
	return &procDir{File: f, pid: pid}, nil
}

func (p *procDir) fd() int { return int(p.File.Fd()) }

// openFile opens one file of the process's directory for reading, never
// following a link and never blocking on open.
func (p *procDir) openFile(file string) (*os.File, error) {
	fd, err := unix.Openat(p.fd(), file, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, p.readErr(file, err)
	}
	return os.NewFile(uintptr(fd), file), nil
}

// read reads at most limit bytes of one file; more is an error.
func (p *procDir) read(file string, limit int64) ([]byte, error) {
	f, err := p.openFile(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, p.readErr(file, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("PID %d: %s is larger than %d bytes", p.pid, file, limit)
	}
	return b, nil
}

// readErr turns "the process went away" into ErrExited: ENOENT, and ESRCH,
// which Linux's procfs gives for a file opened in a held /proc/<pid>
// directory once its process was reaped (TestExitRaceOnRealProc; 6.18).
func (p *procDir) readErr(file string, err error) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("PID %d: %w", p.pid, ErrExited)
	}
	return fmt.Errorf("PID %d: reading %s: %w", p.pid, file, err)
}

func (p *procDir) stat() (Stat, error) {
	b, err := p.read("stat", maxStat)
	if err != nil {
		return Stat{}, err
	}
	st, err := ParseStat(b)
	if err != nil {
		return Stat{}, fmt.Errorf("PID %d: %w", p.pid, err)
	}
	if st.State == 'Z' || st.State == 'X' {
		return Stat{}, fmt.Errorf("PID %d is a zombie: %w", p.pid, ErrExited)
	}
	return st, nil
}

// environ is the device the environment names (ParseEnviron's answer) and
// its QoS variables, read as a stream (environ.go): its size alone never
// makes it unreadable. One that cannot be read has its QoS marked
// unreadable (a tenant must not hide its variables from the check).
func (p *procDir) environ() (string, clientreport.QoSEnv, error) {
	f, err := p.openFile("environ")
	if err != nil {
		return "", clientreport.QoSEnv{Unreadable: err.Error()}, err
	}
	defer f.Close()
	v, err := scanEnviron(f)
	if err != nil {
		err = p.readErr("environ", err)
		return "", clientreport.QoSEnv{Unreadable: err.Error()}, err
	}
	dev, err := v.deviceOf()
	return dev, v.qosOf(), err
}

func (p *procDir) cgroup() ([]byte, error) { return p.read("cgroup", maxCgroup) }

func (p *procDir) mountNS() (string, error) {
	buf := make([]byte, 128)
	n, err := unix.Readlinkat(p.fd(), "ns/mnt", buf)
	if err != nil {
		return "", p.readErr("ns/mnt", err)
	}
	return string(buf[:n]), nil
}

// stillThere is nil while the process lives: what was read belongs to it.
func (p *procDir) stillThere() error {
	_, err := p.stat()
	return err
}

// gone prefers ErrExited to err when the process went away meanwhile.
func (p *procDir) gone(err error) error {
	if e := p.stillThere(); errors.Is(e, ErrExited) {
		return e
	}
	return err
}

func join(a, b string) string {
	if a == "" || b == "" {
		return a + b
	}
	return a + "; " + b
}

// Stat is what the accounting reads of /proc/<pid>/stat.
type Stat struct {
	State byte
	PPID  int
	// StartTicks is the start time (see Identity.StartTicks).
	StartTicks uint64
}

// ParseStat reads the state (field 3), parent (field 4) and start time
// (field 22) from the contents of /proc/<pid>/stat. The command name
// (field 2) is in parentheses and may hold spaces and parentheses itself,
// so fields are counted from the LAST ')'.
func ParseStat(stat []byte) (Stat, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return Stat{}, fmt.Errorf("parsing /proc stat %.40q: no command name", stat)
	}
	rest := bytes.Fields(stat[i+1:])
	// rest[0] is field 3 (state), so field 22 is rest[19].
	if len(rest) < 20 || len(rest[0]) != 1 {
		return Stat{}, fmt.Errorf("parsing /proc stat %.40q: too few fields", stat)
	}
	ppid, err := strconv.Atoi(string(rest[1]))
	if err != nil {
		return Stat{}, fmt.Errorf("parsing /proc stat: parent %q: %w", rest[1], err)
	}
	start, err := strconv.ParseUint(string(rest[19]), 10, 64)
	if err != nil {
		return Stat{}, fmt.Errorf("parsing /proc stat: start time %q: %w", rest[19], err)
	}
	return Stat{State: rest[0][0], PPID: ppid, StartTicks: start}, nil
}

// envDisplay keeps a value read from a process short enough for a log line.
func envDisplay(s string) string {
	const max = 120
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}
