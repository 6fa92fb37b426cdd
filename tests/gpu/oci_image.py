# Writes an OCI image archive (what `ctr images import` reads) of one
# uncompressed layer: a static busybox at /bin with its applets, the
# directories a pod's mounts land on, and /lib, /lib64 as links into /usr
# (as on a merged-/usr host, so that binding the host's /usr brings its
# programs and libraries whole). The image's command sleeps: it is the
# pods' sandbox too.
#   python3 oci_image.py BUSYBOX ARCHIVE NAME
import hashlib, io, json, platform, sys, tarfile

busybox, archive, name = sys.argv[1:4]
arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


def add(t, info, data=None):
    t.addfile(info, io.BytesIO(data) if data is not None else None)


layer = io.BytesIO()
with tarfile.open(fileobj=layer, mode="w", format=tarfile.PAX_FORMAT) as t:
    for d in ["bin", "dev", "proc", "sys", "run", "tmp", "etc", "usr", "opt", "root", "var"]:
        i = tarfile.TarInfo(d); i.type = tarfile.DIRTYPE; i.mode = 0o755; add(t, i)
    for link, target in [("lib", "usr/lib"), ("lib64", "usr/lib64")]:
        i = tarfile.TarInfo(link); i.type = tarfile.SYMTYPE; i.linkname = target; add(t, i)
    bb = open(busybox, "rb").read()
    i = tarfile.TarInfo("bin/busybox"); i.mode = 0o755; i.size = len(bb); add(t, i, bb)
    for a in ["sh", "cat", "echo", "env", "grep", "kill", "ls", "sleep", "stat", "test", "true", "touch", "tr", "wc", "ps", "pgrep"]:
        i = tarfile.TarInfo("bin/" + a); i.type = tarfile.SYMTYPE; i.linkname = "busybox"; add(t, i)
layer = layer.getvalue()


def digest(b):
    return "sha256:" + hashlib.sha256(b).hexdigest()


config = json.dumps({"architecture": arch, "os": "linux",
                     "config": {"Cmd": ["/bin/sleep", "2147483647"], "Env": ["PATH=/usr/bin:/bin"]},
                     "rootfs": {"type": "layers", "diff_ids": [digest(layer)]}}).encode()
manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest(config), "size": len(config)},
                       "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": digest(layer), "size": len(layer)}]}).encode()
index = json.dumps({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": digest(manifest), "size": len(manifest), "platform": {"architecture": arch, "os": "linux"},
                    "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1]}}]}).encode()
with tarfile.open(archive, "w") as t:
    for d in ["blobs", "blobs/sha256"]:
        i = tarfile.TarInfo(d); i.type = tarfile.DIRTYPE; i.mode = 0o755; add(t, i)
    for b in (layer, config, manifest):
        i = tarfile.TarInfo("blobs/sha256/" + digest(b)[7:]); i.size = len(b); add(t, i, b)
    for n, b in (("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'), ("index.json", index)):
        i = tarfile.TarInfo(n); i.size = len(b); add(t, i, b)
