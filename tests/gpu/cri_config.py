# Prints the CRI configuration crictl takes for a pod or a container, as
# Cloudpods' host agent makes them (pkg/hostman/guestman/pod.go: _startPod,
# createContainer; its MPS device: nvidia_mps.go GetContainerExtraConfigures),
# tests/e2e/containerd_test.go's cloudpodsPod for the GPU host:
#   python3 cri_config.py pod SERVER NAME LOGDIR
#   python3 cri_config.py container SERVER PODNAME CTRNAME IMAGE PIPE GPU [--env K=V]... [--mount HOST[:ro]]... [--device PATH]... -- CMD...
# The pods keep the host's network (no CNI here; Cloudpods' CNI gives its
# pods one of their own); everything else is Cloudpods': cgroup parent
# /cloudpods, IPC per pod and PID per container, seccomp and AppArmor
# unconfined, the labels, CUDA_MPS_PIPE_DIRECTORY, NVIDIA_VISIBLE_DEVICES,
# NVIDIA_DRIVER_CAPABILITIES, /dev/shm and the pipe root bound read-write.
# The GPU's device nodes are what the nvidia runtime adds to Cloudpods'
# pods (--device here).
import json, sys

NS = {"ipc": 0, "network": 2, "pid": 1}  # POD, NODE, CONTAINER
UNCONFINED = {"profile_type": 1}
kind = sys.argv[1]
if kind == "pod":
    server, name, logdir = sys.argv[2:5]
    print(json.dumps({"metadata": {"name": name, "uid": server, "namespace": "project-gpu", "attempt": 1},
                      "log_directory": logdir, "labels": {"io.yunion.pod.uid": server},
                      "linux": {"cgroup_parent": "/cloudpods", "security_context": {
                          "namespace_options": NS, "privileged": False, "seccomp": UNCONFINED, "apparmor": UNCONFINED}}}))
    sys.exit(0)
server, pod, ctr, image, pipe, gpu = sys.argv[2:8]
args = sys.argv[8:]
cmd = args[args.index("--") + 1:]
opts = args[:args.index("--")]
envs, mounts, devices = [], [{"container_path": "/dev/shm", "host_path": "/dev/shm"}, {"container_path": pipe, "host_path": pipe}], []
for flag, val in zip(opts[::2], opts[1::2]):
    if flag == "--env":
        k, v = val.split("=", 1)
        envs.append({"key": k, "value": v})
    elif flag == "--mount":
        path, _, ro = val.partition(":")
        mounts.append({"container_path": path, "host_path": path, "readonly": ro == "ro"})
    elif flag == "--device":
        devices.append({"container_path": val, "host_path": val, "permissions": "rwm"})
envs += [{"key": "CUDA_MPS_PIPE_DIRECTORY", "value": pipe}, {"key": "NVIDIA_VISIBLE_DEVICES", "value": gpu},
         {"key": "NVIDIA_DRIVER_CAPABILITIES", "value": "all"}]
print(json.dumps({"metadata": {"name": ctr, "attempt": 0},
                  "labels": {"io.yunion.pod.name": pod, "io.yunion.pod.uid": server, "io.yunion.container.name": ctr,
                             "io.yunion.container.restart_count": "0"},
                  "annotations": {"io.yunion.container.restart_count": "0"},
                  "image": {"image": image}, "command": cmd, "log_path": ctr + ".log", "envs": envs,
                  "mounts": mounts, "devices": devices,
                  "linux": {"security_context": {"capabilities": {}, "namespace_options": NS, "no_new_privs": True,
                                                 "seccomp": UNCONFINED, "apparmor": UNCONFINED}}}))
