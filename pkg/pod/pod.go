// Package pod tells which Cloudpods pod a process is in (issue 45), from
// what the tenant cannot change: its cgroup, and what the container
// runtime wrote of the container before the process started.
//
// Cloudpods' host agent creates a pod through CRI with the cgroup parent
// "/cloudpods" and the cgroupfs driver (pkg/hostman/guestman/pod.go,
// getCgroupParent), so containerd's runc puts each container's processes
// in the cgroup /cloudpods/<containerd container id>. The sandbox's
// Metadata.Uid is the Cloudpods server's id and its Metadata.Name the
// server's name. containerd's CRI writes both into the OCI bundle of every
// container of the pod, as the annotations io.kubernetes.cri.sandbox-uid
// and io.kubernetes.cri.sandbox-name (internal/cri/annotations in 2.2.9 to
// 2.4.2, pkg/cri/annotations in 1.6.20 to 1.7.35, DefaultCRIAnnotations),
// in <state>/io.containerd.runtime.v2.task/<namespace>/<container id>/
// config.json. So a process's server is read from its cgroup's line in
// /proc/<pid>/cgroup (the host's view: the daemon reads it, not the
// process), the container id there, and that container's config.json.
//
// What this covers: pods started before the daemon (nothing here is an
// event), processes added with exec (runc puts them in the container's
// cgroup), processes that unshare or mount over files (their cgroup is the
// same; the bundle is on the host). A process that makes a sub-cgroup
// stays under its container's. Where containerd's state cannot be read
// (another state directory, a runtime that keeps no bundle), Cloudpods'
// host agent's own record is the fallback: <servers_path>/<server id>/
// containers, a JSON object whose values hold each container's `cri_id`.
// What cannot be established is an error saying why, never a guess.
//
// Every file is read bounded and without following a link at its last
// component (pkg/atomicfile); the container id is checked before it is
// joined into a path; what was read is cached by container id (ids are
// never reused).
package pod

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"yunion.io/x/mps-daemon/pkg/atomicfile"
)

// Pod is the Cloudpods pod a process is in.
type Pod struct {
	// Server is the Cloudpods server's id: the CRI sandbox's Metadata.Uid.
	Server string
	// Name is the server's name (the sandbox's Metadata.Name), which the
	// region lists a GPU row's holders by; "" when not known.
	Name string
	// Container is the containerd container id its cgroup names.
	Container string
	// Source says where Server was read: SourceCRI or SourceHostAgent.
	Source string
}

// Where a pod's server was read.
const (
	// SourceCRI: the annotations containerd's CRI wrote in the container's
	// OCI bundle.
	SourceCRI = "cri"
	// SourceHostAgent: Cloudpods' host agent's record of the server's
	// containers.
	SourceHostAgent = "host_agent"
)

// The CRI annotations read from a container's bundle (containerd's
// internal/cri/annotations).
const (
	AnnotationSandboxUID    = "io.kubernetes.cri.sandbox-uid"
	AnnotationSandboxName   = "io.kubernetes.cri.sandbox-name"
	AnnotationSandboxID     = "io.kubernetes.cri.sandbox-id"
	AnnotationContainerType = "io.kubernetes.cri.container-type"
)

// Defaults: Cloudpods' cgroup parent, containerd's state directory and
// CRI's namespace, Cloudpods' servers_path.
const (
	DefaultCgroupParent = "/cloudpods"
	DefaultStateDir     = "/run/containerd"
	DefaultNamespace    = "k8s.io"
	DefaultServersPath  = "/opt/cloud/workspace/servers"
)

// ErrNotPod: the process's cgroup is not a container's under the cgroup
// parent, so it is not in a Cloudpods pod at all.
var ErrNotPod = errors.New("not in a Cloudpods pod's cgroup")

// ErrUnknown: the process is in a pod's cgroup, but neither containerd's
// state nor the host agent's record says whose.
var ErrUnknown = errors.New("in a Cloudpods pod's cgroup, but its server cannot be established")

// Limits on what is read: a bundle holds the container's whole
// environment and mounts, which a tenant's image and the operator's
// container spec make large; a host agent's containers file is a few ids.
const (
	maxBundle     = 8 << 20
	maxContainers = 1 << 20
	maxDesc       = 8 << 20
	// maxServers bounds the host agent's directories looked at.
	maxServers = 4096
	// maxCache bounds the containers remembered.
	maxCache = 8192
	// rescanAfter is how soon the host agent's record is read again for a
	// container it did not hold.
	rescanAfter = 5 * time.Second
)

// containerID is what containerd accepts as an identifier
// (pkg/identifiers), at most 76 characters: nothing that could leave the
// directory it is joined to.
var containerID = regexp.MustCompile(`^[A-Za-z0-9]+(?:[._-][A-Za-z0-9]+)*$`)

// Options says where a host keeps what this package reads.
type Options struct {
	// CgroupParent is the cgroup the pods' containers are made under
	// (Cloudpods: "/cloudpods"); "" turns pods off.
	CgroupParent string
	// StateDir is containerd's state directory, Namespace CRI's.
	StateDir, Namespace string
	// ServersPath is Cloudpods' host agent's servers_path; "" reads no
	// host agent record.
	ServersPath string
	// Now is the clock (rescans); nil is time.Now.
	Now func() time.Time
}

// Finder finds the pod of a process's cgroup. It is safe for concurrent
// use.
type Finder struct {
	o  Options
	mu sync.Mutex
	// cache holds what was established of each container.
	cache map[string]Pod
	// agent is the host agent's record, container id -> server id, as last
	// read at agentAt.
	agent   map[string]string
	agentAt time.Time
}

// NewFinder makes a Finder; nil when o.CgroupParent is "" (pods off).
func NewFinder(o Options) *Finder {
	if o.CgroupParent == "" {
		return nil
	}
	o.CgroupParent = "/" + strings.Trim(o.CgroupParent, "/")
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Finder{o: o, cache: map[string]Pod{}}
}

// CgroupParent is the parent the Finder looks under.
func (f *Finder) CgroupParent() string { return f.o.CgroupParent }

// ContainerOf is the container id of the cgroup file cg (the content of
// /proc/<pid>/cgroup, as the reader's cgroup namespace shows it) under
// parent: the first path component below parent, on the cgroup v2 line
// ("0::/cloudpods/<id>[/...]") or any v1 hierarchy's
// ("4:memory:/cloudpods/<id>"). Every line under parent must name the
// same one. ErrNotPod when no line is under parent; an error for an id
// that cannot be a container's, or lines that disagree.
func ContainerOf(cg []byte, parent string) (string, error) {
	parent = "/" + strings.Trim(parent, "/")
	if parent == "/" {
		return "", ErrNotPod
	}
	id := ""
	for line := range bytes.SplitSeq(cg, []byte{'\n'}) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		// hierarchy-ID:controllers:path; the path may hold colons.
		_, rest, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			return "", fmt.Errorf("cgroup line %q: want id:controllers:path", clip(line))
		}
		_, path, ok := bytes.Cut(rest, []byte{':'})
		if !ok {
			return "", fmt.Errorf("cgroup line %q: want id:controllers:path", clip(line))
		}
		below, ok := strings.CutPrefix(string(path), parent+"/")
		if !ok {
			continue
		}
		first, _, _ := strings.Cut(below, "/")
		if !containerID.MatchString(first) || len(first) > 76 {
			return "", fmt.Errorf("cgroup %q: %q is not a container id", clip(path), clip([]byte(first)))
		}
		if id != "" && id != first {
			return "", fmt.Errorf("cgroup lines name two containers under %s (%s and %s)", parent, id, first)
		}
		id = first
	}
	if id == "" {
		return "", ErrNotPod
	}
	return id, nil
}

// Find is the pod of the process whose cgroup file is cg: ErrNotPod when
// it is in none; otherwise the pod, or an error wrapping ErrUnknown that
// says what could not be read.
func (f *Finder) Find(cg []byte) (Pod, error) {
	id, err := ContainerOf(cg, f.o.CgroupParent)
	if err != nil {
		if errors.Is(err, ErrNotPod) {
			return Pod{}, err
		}
		return Pod{}, fmt.Errorf("%w: %w", ErrUnknown, err)
	}
	return f.Container(id)
}

// Container is the pod of container id (a valid id, as ContainerOf
// gives).
func (f *Finder) Container(id string) (Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p, ok := f.cache[id]; ok {
		return p, nil
	}
	p, criErr := f.fromBundle(id)
	if criErr != nil {
		var agentErr error
		p, agentErr = f.fromHostAgent(id)
		if agentErr != nil {
			return Pod{}, fmt.Errorf("%w: container %s: %w; %w", ErrUnknown, id, criErr, agentErr)
		}
	}
	if len(f.cache) >= maxCache {
		clear(f.cache)
	}
	f.cache[id] = p
	return p, nil
}

// BundlePath is where containerd keeps container id's OCI spec.
func (f *Finder) BundlePath(id string) string {
	return filepath.Join(f.o.StateDir, "io.containerd.runtime.v2.task", f.o.Namespace, id, "config.json")
}

// fromBundle reads the container's OCI spec.
func (f *Finder) fromBundle(id string) (Pod, error) {
	if f.o.StateDir == "" {
		return Pod{}, errors.New("no containerd state directory")
	}
	path := f.BundlePath(id)
	b, err := atomicfile.Read(path, maxBundle, false)
	if err != nil {
		return Pod{}, fmt.Errorf("containerd's bundle: %w", err)
	}
	p, err := ParseBundle(b, f.o.CgroupParent+"/"+id)
	if err != nil {
		return Pod{}, fmt.Errorf("%s: %w", path, err)
	}
	p.Container = id
	return p, nil
}

// bundle is what is read of an OCI spec.
type bundle struct {
	Annotations map[string]string `json:"annotations"`
	Linux       struct {
		CgroupsPath string `json:"cgroupsPath"`
	} `json:"linux"`
}

// ParseBundle reads a pod from a container's OCI spec (config.json): CRI's
// sandbox uid and name. cgroup is the cgroup its process was found in
// (<parent>/<id>): the spec must say the same, or the spec is not the
// process's container's.
func ParseBundle(b []byte, cgroup string) (Pod, error) {
	var s bundle
	if err := json.Unmarshal(b, &s); err != nil {
		return Pod{}, fmt.Errorf("not an OCI spec: %w", err)
	}
	if got := "/" + strings.Trim(s.Linux.CgroupsPath, "/"); got != cgroup {
		return Pod{}, fmt.Errorf("its cgroupsPath is %q, not %q", clip([]byte(s.Linux.CgroupsPath)), cgroup)
	}
	uid := s.Annotations[AnnotationSandboxUID]
	if uid == "" {
		return Pod{}, fmt.Errorf("no %s annotation: not a container made through CRI", AnnotationSandboxUID)
	}
	if !validName(uid) {
		return Pod{}, fmt.Errorf("%s %q is not a server id", AnnotationSandboxUID, clip([]byte(uid)))
	}
	name := s.Annotations[AnnotationSandboxName]
	if !validName(name) {
		name = ""
	}
	return Pod{Server: uid, Name: name, Source: SourceCRI}, nil
}

// validName: printable, one line, at most 256 bytes.
func validName(s string) bool {
	if len(s) > 256 {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// fromHostAgent finds the container in Cloudpods' host agent's record,
// read again at most every rescanAfter.
func (f *Finder) fromHostAgent(id string) (Pod, error) {
	if f.o.ServersPath == "" {
		return Pod{}, errors.New("no host agent servers_path")
	}
	server, ok := f.agent[id]
	if !ok && (f.agent == nil || f.o.Now().Sub(f.agentAt) >= rescanAfter) {
		idx, err := readHostAgent(f.o.ServersPath)
		if err != nil {
			return Pod{}, err
		}
		f.agent, f.agentAt = idx, f.o.Now()
		server, ok = idx[id]
	}
	if !ok {
		return Pod{}, fmt.Errorf("no server under %s lists container %s", f.o.ServersPath, id)
	}
	return Pod{Server: server, Name: serverName(filepath.Join(f.o.ServersPath, server, "desc")), Container: id, Source: SourceHostAgent}, nil
}

// readHostAgent reads every server's containers file under dir: each
// container's cri_id -> the server (its directory's name).
func readHostAgent(dir string) (map[string]string, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("host agent's servers: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(maxServers)
	if err != nil && len(names) == 0 {
		return map[string]string{}, nil
	}
	out := map[string]string{}
	for _, server := range names {
		if !containerID.MatchString(server) {
			continue
		}
		b, err := atomicfile.Read(filepath.Join(dir, server, "containers"), maxContainers, false)
		if err != nil {
			continue // a server without containers (a VM), or not readable
		}
		var ctrs map[string]struct {
			CRIID string `json:"cri_id"`
		}
		if json.Unmarshal(b, &ctrs) != nil {
			continue
		}
		for _, c := range ctrs {
			if c.CRIID != "" {
				out[c.CRIID] = server
			}
		}
	}
	return out, nil
}

// serverName is the name in a server's desc file, "" when it cannot be
// read.
func serverName(path string) string {
	b, err := atomicfile.Read(path, maxDesc, false)
	if err != nil {
		return ""
	}
	var d struct {
		Name string `json:"name"`
	}
	if json.Unmarshal(b, &d) != nil || !validName(d.Name) {
		return ""
	}
	return d.Name
}

// clip keeps a value read from a file short enough for an error.
func clip(b []byte) string {
	const max = 120
	if len(b) > max {
		return string(b[:max]) + "..."
	}
	return string(b)
}
