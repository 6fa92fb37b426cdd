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
//   - Mapper tells which virtual device a PID belongs to, from the
//     YUNION_MPS_VIRTUAL_DEVICE=<GPU UUID>::<i> variable the CDI spec gives
//     every container (/proc/<pid>/environ), or from its cgroup through a
//     caller-supplied function.
//   - Account sums NVML's MPS client list per device (pure).
//   - Decide picks who to terminate (pure).
//   - Enforcer carries the picks out: terminate_client through the GPU's MPS
//     control, then SIGTERM and SIGKILL for a process that does not go,
//     without ever waiting inside the caller's loop.
//   - Accountant strings them together for one tick of the agent's loop.
//
// What holds and what does not. The cap that cannot be escaped is MPS's own
// per-process cap, which the control daemon sets on the server: a client can
// lower it through CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, never raise it. This
// package adds the per-device sum for processes that cooperate, that is,
// that keep the environment their container was started with.
// /proc/<pid>/environ is the environment the process was exec'd with; a
// process cannot change what it shows except by overwriting its own stack
// area or exec'ing itself (or a child) with another value, which moves its
// usage to another device's name or to none. A process naming no device is
// reported, never killed. A process naming ANOTHER device of its GPU is
// billed there: it escapes its own device's sum and can push the other
// device over, where the rule "who grew most" may then pick a victim that
// merely grew later. So with environ as the source, the per-device cap binds
// containers that do not tamper with their environment, and every process
// stays bound by its per-process MPS cap whatever it does.
// The tamper-proof source is the cgroup: a process cannot leave its
// container's cgroup; Mapper.Cgroup is the hook for it, and when it names a
// device it wins over environ.
package accounting
