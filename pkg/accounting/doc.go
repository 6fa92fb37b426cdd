// Package accounting closes the gap MPS leaves open: MPS caps each client
// PROCESS, so a container given one virtual device and running several CUDA
// processes gets one cap per process (measured with two processes, each of
// which got its own cap: the project's reference, mps-facts.md).
// This package sums NVML's per-process usage per virtual device, finds the
// devices over their cap and, under the enforce policy, terminates the client
// that pushed a device over.
//
// The pieces, each usable and tested alone:
//
//   - Mapper tells which virtual device a PID belongs to: inside a
//     container, from the identity file the CDI spec mounts there
//     (pkg/identity), found through /proc/<pid>/root, or through an
//     ancestor in the same cgroup or another process of the cgroup when
//     the process hid its own view; outside
//     containers (the host's mount namespace), from the
//     YUNION_MPS_VIRTUAL_DEVICE=<GPU UUID>::<i> variable in
//     /proc/<pid>/environ.
//   - Account sums NVML's MPS client list per device (pure).
//   - Decide picks who to terminate (pure).
//   - Enforcer carries the picks out: terminate_client through the GPU's MPS
//     control, then SIGTERM and SIGKILL for a process that does not go,
//     without ever waiting inside the caller's loop.
//   - Accountant strings them together for one pass of the agent's
//     accounting loop: Tick (every GPU, on the health tick), Poll (the GPUs
//     that have clients, every 100 ms) and Connected (clients as they
//     connect, before they can allocate: connect.go), with one set of rules.
//
// What holds and what does not. The cap that cannot be escaped is MPS's own
// per-process cap, which the control daemon sets on the server: a client can
// lower it through CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, never raise it. This
// package adds the per-device sum. A process in a container cannot change
// which identity file its container was given (read-only, mounted by the
// runtime; changing the mount needs CAP_SYS_ADMIN), so rewriting or
// dropping its environment changes nothing: it is billed by its identity
// and the disagreement is reported (Usage.Mismatches). The environment of a
// process in a container is never believed. A process that can make its
// own user and mount namespaces (the runtime's seccomp profile allows it)
// can hide the file from its own view; it is then billed through an
// ancestor in its cgroup or the other processes of its cgroup, and when
// nothing in its cgroup shows one device, under enforce it is terminated
// as over every cap (issue 23; DecideHidden): a container reaches MPS only
// through the CDI edits, which always mount the file. Host processes, and a
// host service in a mount namespace of its own (the host's root
// directory), are never terminated for want of an identity.
// docs/containers.md has the threat model.
package accounting
