# Runs a command as a container given one device of the host's CDI spec
# would run, without a container runtime (the GPU host has none):
#   python3 cdi_run.py SPEC DEVICE [VAR=VALUE...] [--without=PATH...] -- CMD [ARGS...]
# In a mount namespace of its own (unshare --mount, private propagation):
#   - /dev is a fresh tmpfs holding only what a runtime gives every
#     container (null, zero, full, random, urandom, tty) and the spec's
#     device nodes for DEVICE: the container's GPU node and the driver's
#     control nodes, no other GPU's;
#   - the spec's mounts, as a runtime applies them (shallower paths first,
#     then remounted with the entry's ro, nosuid, nodev and noexec): the
#     pipe directory, /dev/null over its privileged socket, the identity
#     file and the view's library and directory (under a tmpfs at
#     /run/yunion-mps, as a container's own /run), /dev/shm, and the view's
#     preload list over /etc/ld.so.preload, mounted last: from then on
#     every dynamically linked program started here loads the library, so
#     it must be in place first. Where the host has no /etc/ld.so.preload
#     the mount needs a file to cover: an empty one is created on the host
#     (an empty list preloads nothing), and the caller says so;
#   - the environment is the spec's, the image's PATH and HOME, and nothing
#     else: CMD inherits none of this shell's variables.
# VAR=VALUE arguments before "--" are added after the spec's (an image's or
# a tenant's own, overriding the spec's): a test of what a container may do
# to itself, never needed to make a client work. --without=PATH leaves out
# the spec's mount at container path PATH (a container whose runtime lost
# the view's library, say).
# Prints nothing of its own; CMD's output and exit status are the result.
import os
import shlex
import sys

import yaml


def device_edits(spec, name):
    env = list(spec.get("containerEdits", {}).get("env", []) or [])
    mounts = list(spec.get("containerEdits", {}).get("mounts", []) or [])
    nodes = list(spec.get("containerEdits", {}).get("deviceNodes", []) or [])
    for d in spec["devices"]:
        if d["name"] == name:
            e = d.get("containerEdits", {})
            return env + (e.get("env") or []), mounts + (e.get("mounts") or []), nodes + (e.get("deviceNodes") or [])
    sys.exit("cdi_run: no device %s in the spec" % name)


def main(argv):
    if "--" not in argv:
        sys.exit("usage: cdi_run.py SPEC DEVICE [VAR=VALUE...] -- CMD...")
    sep = argv.index("--")
    spec_path, device, args, cmd = argv[1], argv[2], argv[3:sep], argv[sep + 1:]
    without = {a[len("--without="):] for a in args if a.startswith("--without=")}
    extra = [a for a in args if not a.startswith("--without=")]
    env, mounts, nodes = device_edits(yaml.safe_load(open(spec_path)), device)
    mounts = [m for m in mounts if m["containerPath"] not in without]
    host_dev = "/tmp/cdi-run-hostdev-%d" % os.getpid()

    def host(path):  # a host path, as seen once /dev is replaced
        return host_dev + path[len("/dev"):] if path == "/dev" or path.startswith("/dev/") else path

    q = shlex.quote
    steps = [
        "mkdir -p /run/yunion-mps %s" % q(host_dev),
        "mount -t tmpfs -o mode=755 tmpfs /run/yunion-mps",
        "mount --rbind /dev %s" % q(host_dev),
        "mount -t tmpfs -o mode=755,nosuid tmpfs /dev",
    ]
    for n in ["null", "zero", "full", "random", "urandom", "tty"]:
        steps.append("touch /dev/%s && mount --bind %s/%s /dev/%s" % (n, q(host_dev), n, n))
    for n in nodes:
        path = n["path"]
        steps.append("mkdir -p %s && touch %s && mount --bind %s %s" % (
            q(os.path.dirname(path)), q(path), q(host(n.get("hostPath") or path)), q(path)))
    preload = "/etc/ld.so.preload"
    for m in sorted(mounts, key=lambda m: (m["containerPath"] == preload, m["containerPath"].count("/"))):
        src, dst = host(m["hostPath"]), m["containerPath"]
        make = "mkdir -p %s" % q(dst) if os.path.isdir(m["hostPath"]) else "mkdir -p %s && { [ -e %s ] || touch %s; }" % (
            q(os.path.dirname(dst)), q(dst), q(dst))
        steps.append("%s && mount --bind %s %s" % (make, q(src), q(dst)))
        flags = [o for o in (m.get("options") or []) if o in ("ro", "nosuid", "nodev", "noexec")]
        if flags:
            steps.append("mount -o remount,bind,%s %s" % (",".join(flags), q(dst)))
    steps.append("umount -l %s && rmdir %s" % (q(host_dev), q(host_dev)))
    image = ["PATH=" + os.environ.get("PATH", "/usr/bin:/bin"), "HOME=/root"]
    if os.environ.get("LD_LIBRARY_PATH"):
        image.append("LD_LIBRARY_PATH=" + os.environ["LD_LIBRARY_PATH"])
    if os.environ.get("PYTHONPATH"):
        image.append("PYTHONPATH=" + os.environ["PYTHONPATH"])
    script = " && ".join(steps) + ' && exec env -i "$@"'
    os.execvp("unshare", ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"] + image + env + extra + cmd)


main(sys.argv)
