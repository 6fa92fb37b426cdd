# Prints "HOST_PATH CONTAINER_PATH" of the identity file the host's CDI spec
# mounts for one device (the mount whose container path is under
# /run/yunion-mps/devices/), so a plain process can be given it as a
# container runtime would.
import sys, yaml
spec, device = yaml.safe_load(open(sys.argv[1])), sys.argv[2]
for d in spec["devices"]:
    if d["name"] == device:
        for m in d.get("containerEdits", {}).get("mounts", []):
            if m["containerPath"].startswith("/run/yunion-mps/devices/"):
                print(m["hostPath"], m["containerPath"])
                sys.exit(0)
        sys.exit("device %s mounts no identity file" % device)
sys.exit("no device " + device)
