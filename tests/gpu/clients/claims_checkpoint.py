# Writes the DRA driver's checkpoint (pkg/ledger/checkpoint.go, version 2)
# holding prepared claims on one GPU shared by claims of any size, as the
# driver would have written it after preparing them: the daemon started in
# its Kubernetes mode reads it back (as after a restart), makes each
# claim's CDI entry and identity file, and its accounting bills each
# claim's processes to the claim. No kube-apiserver is needed for that.
#   claims_checkpoint.py OUT GPU_UUID NODE MAX_CLAIMS MEMORY_TOTAL_MIB NAME:MIB...
# Claim i (from 0) gets device index 1000 + i: <GPU_UUID>::<1000+i>; the
# GPU's device minor (its /dev/nvidiaN) is $GPU_MINOR, 0 when unset.
import json, os, re, sys, uuid

out, gpu, node, max_claims, total = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
label = re.sub(r"[^a-z0-9]", "-", gpu.lower()).strip("-")
device = {"name": label[: 63 - len("-sized")].rstrip("-") + "-sized", "gpuUUID": gpu, "gpuAddr": "", "index": 0,
          "productName": "", "memoryLimitMiB": total, "threadPercentage": 100, "healthy": True,
          "sized": True, "maxClaims": max_claims}
claims = {}
for i, arg in enumerate(sys.argv[6:]):
    name, mib = arg.split(":")
    uid = str(uuid.uuid4())
    claims[uid] = {"uid": uid, "namespace": "gpu-claims", "name": name, "devices": [{
        "request": "gpu", "pool": node, "device": device,
        "share": {"id": str(uuid.uuid4()), "index": 1000 + i, "memoryLimitMiB": int(mib), "threadPercentage": 100,
                  "cdiName": "yunion.io/mps-claim=%s::%d" % (gpu, 1000 + i), "minor": int(os.environ.get("GPU_MINOR", "0")), "pipeDir": "", "clientPriority": 0}}]}
with open(out, "w") as f:
    json.dump({"version": 2, "claims": claims}, f, indent=1)
