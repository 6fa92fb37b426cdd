# Prints, as NAME=VALUE lines, the environment the host's CDI spec gives one
# device (the spec's common edits plus the device's), so a plain process can
# be started exactly as a container runtime would set it up.
import sys, yaml
spec, device = yaml.safe_load(open(sys.argv[1])), sys.argv[2]
env = list(spec.get("containerEdits", {}).get("env", []))
for d in spec["devices"]:
    if d["name"] == device:
        env += d.get("containerEdits", {}).get("env", [])
        break
else:
    sys.exit("no device " + device)
print("\n".join(env))
