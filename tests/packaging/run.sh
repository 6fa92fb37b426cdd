#!/usr/bin/env bash
# run.sh: the packages, tested the way an operator installs them.
#
#   1. `make package` (v1: amd64 and arm64) and a newer v2 (this host's
#      architecture, a rebuilt binary), rpms signed with a throwaway key;
#      `objdump -T` of every binary in every package: nothing above
#      GLIBC_2.17; `make repo` twice (v1; v1 and v2), signed with a throwaway
#      key; lintian and rpmlint (no errors), the units through
#      systemd-analyze verify (no output at all).
#   2. Debian 11 (glibc 2.31) roots, x86-64 and arm64 (the latter under
#      qemu-user through binfmt_misc): the signed apt repository added as
#      docs/packaging.md says, apt-get install -y yunion-mps-daemon, the
#      inventory and `mps-daemon --simulate` started by hand (no systemd),
#      /readyz, mpsctl isolated-device-list; apt-get install -y
#      yunion-mps-daemon-kubernetes, its check-config.
#   3. The rpm repository read by dnf (dnf-repo.sh): repoquery finds both
#      packages for both architectures with the signatures checked; tampered
#      packages and metadata are refused.
#   4. .deb: a Debian 12 root (debootstrap, cached), booted with
#      systemd-nspawn --boot, the signed apt repository its only source
#      (apt-get update fails without the key). The runbook:
#      apt-get install -y yunion-mps-daemon, then
#      systemctl enable --now yunion-mps-daemon (simulated GPUs through a
#      drop-in), then mpsctl isolated-device-list. The Kubernetes package:
#      installed beside the running daemon (nothing restarted), the service
#      switched to the Kubernetes mode (one process, the kubelet plugin's
#      sockets), removed (the service stopped, back in the Cloudpods mode),
#      purged. Then reload, upgrade to v2 with edited configuration (kept),
#      remove, purge. Then a node in the Kubernetes mode (a root of its
#      own) with two claims prepared in the v1 plugin's checkpoint and a
#      client connected to their GPU's MPS server: the Kubernetes package
#      upgraded to v2 keeps the claims, the claims' CDI entries byte for
#      byte, the client and its control daemon.
#   5. .rpm: the same root booted again with a RHEL-like "disable *" preset,
#      a host.conf the Cloudpods host service wrote before us, and rpm inside:
#      install (signature checked), enable --now both units, the Kubernetes
#      package installed and erased beside the running daemon (left alone),
#      upgrade with an edited config(noreplace) file, erase; then the upgrade from Cloudpods'
#      own package (a stand-in) that must keep MPS clients alive.
#
# Needs root on an amd64 host, debootstrap, systemd-nspawn
# (systemd-container), rpm, lintian, rpmlint, apt-ftparchive (apt-utils), gpg,
# objdump, gcc-aarch64-linux-gnu, qemu-user-static with binfmt_misc,
# createrepo-c, dnf, dnf-plugins-core, Go; reaches the Debian mirror once, for
# the cached roots (MPS_PKGTEST_CACHE, default ~/.cache/yunion-mps-ci).
# .ci/run installs all of it. `make test-packaging`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cd "$repo"
# shellcheck source=lib.sh
. "$here/lib.sh"

[ "$(id -u)" = 0 ] || fail "run.sh needs root (debootstrap, systemd-nspawn)"
for tool in debootstrap systemd-nspawn nsenter rpm rpmsign lintian rpmlint apt-ftparchive gpg objdump \
	aarch64-linux-gnu-gcc qemu-aarch64-static createrepo_c dnf unshare ip curl; do
	command -v "$tool" >/dev/null || fail "run.sh needs $tool (.ci/run installs it)"
done

CACHE=${MPS_PKGTEST_CACHE:-${HOME:-/root}/.cache/yunion-mps-ci}
WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/mps-pkgtest.XXXXXX")
GO=${GO:-go}
NFPM=${NFPM:-$GO tool -modfile=tools/go.mod nfpm}
CT_PID=
cleanup() {
	local rc=$?
	if [ "$rc" -ne 0 ]; then dump_units; fi
	poweroff
	[ -n "${GNUPGHOME:-}" ] && gpgconf --kill gpg-agent 2>/dev/null || true
	if [ "$rc" -eq 0 ] || [ -z "${MPS_PKGTEST_KEEP:-}" ]; then rm -rf "$WORK"; else echo "kept $WORK"; fi
	printf '\n== %s after %ss\n' "$([ "$rc" -eq 0 ] && echo PASS || echo FAIL)" "$(($(date +%s) - T0))"
}
trap cleanup EXIT

# ---------------------------------------------------------------- packages
step "version from git"
tests/packaging/version_test.sh

step "packages: v1 and v2, rpms signed with a throwaway key"
export GNUPGHOME=$WORK/gnupg
mkdir -m 0700 "$GNUPGHOME"
gpg --batch --quiet --passphrase '' --quick-gen-key 'yunion-mps-daemon CI, throwaway <ci@example.org>' rsa3072 sign 1d
gpg --batch --armor --export-secret-keys >"$WORK/signing-key.asc"
gpg --batch --armor --export >"$WORK/signing-key.pub"
export PKG_RPM_KEY_FILE=$WORK/signing-key.asc NFPM_RPM_PASSPHRASE=

V1=$(packaging/version.sh)
V2=$V1.1 # sorts after V1 for dpkg and rpm alike
HOST_ARCH=$($GO env GOARCH)
# v1: `make package` as a release builds it, amd64 and arm64.
quiet_make "$WORK/make-v1.log" package BIN="$WORK/bin1" DIST="$WORK/v1" PKG_VERSION="$V1"
# v2: the same source with another version stamped in, so the upgrade is seen
# to replace the running binary; this host's architecture only (the
# Kubernetes package's upgrade included).
quiet_make "$WORK/make-v2.log" package PKG_ARCHES="$HOST_ARCH" BIN="$WORK/bin2" VERSION="$V2-test" DIST="$WORK/v2" PKG_VERSION="$V2"
(cd "$WORK/v1" && stat -c '   %s bytes  %n' ./*)
BIN1=$WORK/bin1/linux_$HOST_ARCH

step "every shipped binary: no glibc symbol version above GLIBC_$GLIBC_FLOOR (objdump -T)"
check_glibc_floor "$WORK/v1" "$WORK/v2"

step "the signed repositories (make repo): v1, and v1 with v2 for the upgrades"
# The same throwaway repository key for both ($WORK/build/repo-key); the
# roots see the repository at /srv/repo.
quiet_make "$WORK/make-repo1.log" repo DIST="$WORK/v1" REPO="$WORK/repo1" BUILD="$WORK/build" REPO_URL=file:///srv/repo
mkdir -p "$WORK/v12"
cp "$WORK"/v1/* "$WORK"/v2/* "$WORK/v12/"
quiet_make "$WORK/make-repo2.log" repo DIST="$WORK/v12" REPO="$WORK/repo2" BUILD="$WORK/build" REPO_URL=file:///srv/repo
note "ok: $(cat "$WORK/repo1/yunion-mps.list")"
step "Debian 11 (bullseye, glibc 2.31), x86-64: apt-get install from the signed repository, mps-daemon --simulate (chroot)"
cp -a "$(cached_root bullseye amd64 procps)" "$WORK/bullseye-amd64"
add_apt_repo "$WORK/bullseye-amd64" "$WORK/repo1"
chroot_runbook "$WORK/bullseye-amd64"
# etc/host_container_device.yml: renderD128 x4, renderD129 x2.
assert_eq "devices listed" "$(cat "$WORK/bullseye-amd64/srv/devices")" 6
assert_contains "mps-daemon-kubernetes check-config" "$(cat "$WORK/bullseye-amd64/srv/k8s-check")" "2 GPUs, 6 virtual devices"
assert_contains "mps-daemon check-config: the view" "$(cat "$WORK/bullseye-amd64/srv/check")" "view:      /usr/lib/yunion-mps/libyunion-mps-view.so: containers see"
assert_contains "mps-daemon-kubernetes check-config: the view" "$(cat "$WORK/bullseye-amd64/srv/k8s-check")" "view:      /usr/lib/yunion-mps/libyunion-mps-view.so: containers see"
rm -rf "$WORK/bullseye-amd64"

step "Debian 11 (bullseye), arm64 under qemu-user: apt-get install from the signed repository, mps-daemon --simulate (chroot)"
[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] ||
	fail "no qemu-aarch64 in binfmt_misc: needs qemu-user-static and binfmt-support (.ci/run installs them), and binfmt_misc mounted"
cp -a "$(cached_root bullseye arm64 procps)" "$WORK/bullseye-arm64"
add_apt_repo "$WORK/bullseye-arm64" "$WORK/repo1"
chroot_runbook "$WORK/bullseye-arm64"
assert_eq "devices listed" "$(cat "$WORK/bullseye-arm64/srv/devices")" 6
assert_contains "mps-daemon-kubernetes check-config" "$(cat "$WORK/bullseye-arm64/srv/k8s-check")" "2 GPUs, 6 virtual devices"
assert_contains "mps-daemon check-config: the view" "$(cat "$WORK/bullseye-arm64/srv/check")" "view:      /usr/lib/yunion-mps/libyunion-mps-view.so: containers see"
rm -rf "$WORK/bullseye-arm64"

step "rpm repository: dnf reads it, checks its signature, refuses tampering"
tests/packaging/dnf-repo.sh "$WORK/repo1" "$V1"

# No GPU here: the drop-in an operator would use to try the package.
simulate_dropin() {
	mkdir -p "$1/etc/systemd/system/yunion-mps-daemon.service.d"
	cat >"$1/etc/systemd/system/yunion-mps-daemon.service.d/simulate.conf" <<'EOF'
[Service]
ExecStart=
ExecStart=/usr/bin/mps-daemon --config /etc/yunion/host.conf --simulate 8xH100 $MPS_DAEMON_OPTS
EOF
}
# After an upgrade from the stand-in (deb or rpm): no quit was sent, the
# client $1 and the MPS state survived, the service is enabled again and the
# upgrade's traces are gone.
upgrade_kept_mps() {
	in_ct test ! -e /var/lib/cloudpods-standin/quit-sent || fail "Cloudpods' daemon sent quit during the upgrade: $(in_ct cat /var/lib/cloudpods-standin/quit-sent)"
	in_ct kill -0 "$1" || fail "the CUDA client ($1) died in the upgrade"
	assert_contains "MPS state" "$(in_ct cat /tmp/nvidia-mps/pipe/sim-control.json)" "\"pid\": $1"
	note "ok: no quit; the MPS control daemon and its client ($1) survived"
	assert_eq "enabled after the upgrade (the old prerm disabled it)" "$(in_ct systemctl is-enabled yunion-mps-daemon)" "enabled"
	in_ct test ! -e /opt/yunion/bin/mps-daemon
	in_ct test ! -e /run/systemd/system/yunion-mps-daemon.service.d/50-yunion-mps-upgrade.conf
	in_ct test ! -e /var/lib/yunion-mps/.cloudpods-upgrade
	assert_contains "the unit is ours" "$(in_ct systemctl show -p ExecStart --value yunion-mps-daemon)" "/usr/bin/mps-daemon"
}
# Our daemon started by the upgrade's scripts has no GPU here: with the
# --simulate drop-in of root $1 (which would have turned Cloudpods' unit
# into ours before the upgrade) it is restarted, and must adopt the control
# daemon the stand-in left, its client $2 alive.
adopts_after_upgrade() {
	simulate_dropin "$1"
	in_ct systemctl daemon-reload
	in_ct timeout 120 systemctl restart yunion-mps-daemon
	assert_eq "service after the upgrade" "$(in_ct systemctl is-active yunion-mps-daemon)" "active"
	assert_contains "main process" "$(in_ct_sh 'cat /proc/$(systemctl show -p MainPID --value yunion-mps-daemon)/cmdline | tr "\0" " "')" "/usr/bin/mps-daemon"
	in_ct kill -0 "$2" || fail "the CUDA client ($2) died when our daemon started"
	wait_for "our daemon adopted the running control daemon, caps left to it until it is idle" \
		'journalctl -u yunion-mps-daemon --no-pager | grep -q "started by another program"' 60
	note "ok: our daemon runs, adopted the control daemon in the pipe root and waits for its client to leave"
}
deb() { echo "$WORK/$1/$2_$3-1_$($GO env GOARCH).deb"; }
rpmfile() { echo "$WORK/$1/$2-$3-1.$(uname -m).rpm"; }

step "lintian and rpmlint"
tests/packaging/lint.sh "$WORK/v1" "$WORK/signing-key.pub"

step "systemd-analyze verify (staging root)"
MPS_VERIFY_KUBERNETES=1 tests/packaging/systemd-verify.sh "$BIN1"

step "package metadata"
ctrl=$(dpkg-deb -f "$(deb v1 yunion-mps-daemon "$V1")" Depends)
# Epoch 1 (above Cloudpods' own package of the name); the inventory is a
# Pre-Depends (docs/cloudpods.md, the upgrade from Cloudpods' package).
assert_eq "daemon .deb Version" "$(dpkg-deb -f "$(deb v1 yunion-mps-daemon "$V1")" Version)" "1:$V1-1"
assert_eq "daemon .deb Pre-Depends" "$(dpkg-deb -f "$(deb v1 yunion-mps-daemon "$V1")" Pre-Depends)" "yunion-mps-inventory (= 1:$V1-1)"
assert_contains "daemon .deb Depends" "$ctrl" "libc6 (>= "
conff=$(dpkg-deb --ctrl-tarfile "$(deb v1 yunion-mps-daemon "$V1")" | tar -xOf - ./conffiles)
assert_eq "daemon .deb conffiles" "$conff" "/etc/default/yunion-mps-daemon"
conff=$(dpkg-deb --ctrl-tarfile "$(deb v1 yunion-mps-inventory "$V1")" | tar -xOf - ./conffiles)
assert_eq "inventory .deb conffiles" "$conff" "/etc/default/yunion-mps-inventory"
files=$(dpkg-deb -c "$(deb v1 yunion-mps-daemon "$V1")")
assert_lacks "daemon .deb files" "$files" "./etc/yunion/"
assert_contains "daemon .deb files" "$files" "./usr/share/yunion-mps-daemon/host.conf"
assert_contains "daemon .deb files" "$(grep libyunion-mps-view <<<"$files")" "-rw-r--r-- root/root"
assert_contains "daemon .rpm files" "$(rpm -qpl --nosignature "$(rpmfile v1 yunion-mps-daemon "$V1")")" "/usr/lib/yunion-mps/libyunion-mps-view.so"
req=$(rpm -qpR --nosignature "$(rpmfile v1 yunion-mps-daemon "$V1")")
assert_contains "daemon .rpm Requires" "$req" "yunion-mps-inventory = 1:$V1-1"
assert_contains "daemon .rpm Requires" "$req" "glibc >= "
assert_eq "daemon .rpm config files" "$(rpm -qpc --nosignature "$(rpmfile v1 yunion-mps-daemon "$V1")")" "/etc/sysconfig/yunion-mps-daemon"
assert_eq "daemon .rpm noreplace" "$(rpm -qp --nosignature --qf '[%{FILEFLAGS:fflags} %{FILENAMES}\n]' "$(rpmfile v1 yunion-mps-daemon "$V1")" | grep sysconfig)" \
	"cn /etc/sysconfig/yunion-mps-daemon"
# The glibc the cgo binary needs is what the packages require: a newer
# symbol version creeping in changes both.
need=$(objdump -T "$BIN1/mps-daemon" | sed -n 's/.*GLIBC_\([0-9][0-9.]*\).*/\1/p' | sort -uV | tail -n 1)
assert_contains "daemon .deb Depends" "$ctrl" "libc6 (>= $need)"
# The Kubernetes package: the daemon of its own version (the unit its drop-in
# changes, the shared configuration), its own glibc requirement, its
# conffile, the drop-in and the manifests.
kdeb=$(deb v1 yunion-mps-daemon-kubernetes "$V1")
krpm=$(rpmfile v1 yunion-mps-daemon-kubernetes "$V1")
need=$(objdump -T "$BIN1/mps-daemon-kubernetes" | sed -n 's/.*GLIBC_\([0-9][0-9.]*\).*/\1/p' | sort -uV | tail -n 1)
assert_eq "kubernetes .deb Depends" "$(dpkg-deb -f "$kdeb" Depends)" \
	"yunion-mps-daemon (= 1:$V1-1), libc6 (>= $need), init-system-helpers (>= 1.54~)"
conff=$(dpkg-deb --ctrl-tarfile "$kdeb" | tar -xOf - ./conffiles)
assert_eq "kubernetes .deb conffiles" "$conff" "/etc/default/yunion-mps-daemon-kubernetes"
files=$(dpkg-deb -c "$kdeb")
for f in ./usr/bin/mps-daemon-kubernetes ./lib/systemd/system/yunion-mps-daemon.service.d/kubernetes.conf \
	./usr/share/yunion-mps-daemon-kubernetes/deviceclass.yaml ./usr/share/yunion-mps-daemon-kubernetes/rbac.yaml \
	./usr/share/yunion-mps-daemon-kubernetes/claim-example.yaml ./usr/share/yunion-mps-daemon-kubernetes/claim-sized-example.yaml \
	./usr/share/yunion-mps-daemon-kubernetes/claim-validation.yaml; do
	assert_contains "kubernetes .deb files" "$files" "$f"
done
assert_lacks "kubernetes .deb files" "$files" "./lib/systemd/system/yunion-mps-daemon-kubernetes.service"
req=$(rpm -qpR --nosignature "$krpm")
assert_contains "kubernetes .rpm Requires" "$req" "yunion-mps-daemon = 1:$V1-1"
assert_contains "kubernetes .rpm Requires" "$req" "glibc >= $need"
assert_eq "kubernetes .rpm noreplace" "$(rpm -qp --nosignature --qf '[%{FILEFLAGS:fflags} %{FILENAMES}\n]' "$krpm" | grep /etc/)" \
	"cn /etc/sysconfig/yunion-mps-daemon-kubernetes"
assert_contains "kubernetes .rpm files" "$(rpm -qpl --nosignature "$krpm")" "/usr/lib/systemd/system/yunion-mps-daemon.service.d/kubernetes.conf"

# -------------------------------------------------------------------- .deb
step "deb: a booted Debian ($SUITE), the signed apt repository its only source"
new_root "$WORK/deb-root" gpu-node-deb
# The container has no network: our signed repository (make repo) is its
# only source, added as docs/packaging.md tells an operator to.
add_apt_repo "$WORK/deb-root" "$WORK/repo1"
boot "$WORK/deb-root" gpu-node-deb

step "deb: the repository's signature is checked"
in_ct mv /etc/apt/keyrings/yunion-mps.asc /root/
out=$(in_ct apt-get update 2>&1 || true)
assert_contains "apt-get update without the key" "$out" "NO_PUBKEY"
in_ct mv /root/yunion-mps.asc /etc/apt/keyrings/
in_ct apt-get update -qq
assert_eq "apt-cache policy: candidate from the repository" \
	"$(in_ct apt-cache policy yunion-mps-daemon | sed -n 's/^ *Candidate: //p')" "1:$V1-1"

step "deb: apt-get install -y yunion-mps-daemon"
out=$(in_ct apt-get install -y yunion-mps-daemon 2>&1)
printf '%s\n' "$out" | grep -E '^(Setting up|Created symlink|The following NEW)' | sed 's/^/   | /'
assert_eq "installed" "$(in_ct dpkg-query -W -f='${Status} ${Version}\n' yunion-mps-daemon yunion-mps-inventory | sort -u)" \
	"install ok installed 1:$V1-1"
assert_eq "running after install" "$(in_ct systemctl is-active yunion-mps-inventory yunion-mps-daemon | sort -u)" "inactive"
assert_eq "enabled after install (Debian's presets enable)" \
	"$(in_ct systemctl is-enabled yunion-mps-inventory yunion-mps-daemon | sort -u)" "enabled"
in_ct cmp /usr/share/yunion-mps-daemon/host.conf /etc/yunion/host.conf
in_ct cmp /usr/share/yunion-mps-daemon/host_container_device.yml /etc/yunion/host_container_device.yml
note "ok: /etc/yunion/host.conf and host_container_device.yml created from the defaults"
assert_eq "state directory" "$(in_ct stat -c '%a %U' /var/lib/yunion-mps)" "755 root"
assert_eq "systemd-tmpfiles on our rules" "$(in_ct systemd-tmpfiles --create yunion-mps-daemon.conf yunion-mps-inventory.conf 2>&1)" ""

step "deb: mps-daemon check-config"
out=$(in_ct mps-daemon check-config --simulate 8xH100 2>&1) || fail "check-config: $out"
printf '%s\n' "$out" | head -n 12 | sed 's/^/   | /'
assert_eq "running after check-config" "$(in_ct systemctl is-active yunion-mps-inventory yunion-mps-daemon | sort -u)" "inactive"

step "deb: the units, verified on the installed system"
out=$(in_ct systemd-analyze verify yunion-mps-daemon.service yunion-mps-inventory.service 2>&1)
assert_eq "systemd-analyze verify output" "$out" ""
in_ct systemd-analyze security --no-pager yunion-mps-inventory.service yunion-mps-daemon.service 2>&1 |
	grep -E 'Overall exposure' | sed 's/^/   /' || true

step "deb: the runbook: systemctl enable --now yunion-mps-daemon; mpsctl isolated-device-list"
simulate_dropin "$WORK/deb-root"
in_ct systemctl daemon-reload
in_ct timeout 180 systemctl enable --now yunion-mps-daemon
assert_eq "active" "$(in_ct systemctl is-active yunion-mps-inventory yunion-mps-daemon | sort -u)" "active"
assert_contains "daemon status" "$(in_ct systemctl show -p StatusText --value yunion-mps-daemon)" "SIMULATED"
assert_eq "admin token file" "$(in_ct stat -c '%a %U' /var/lib/yunion-mps/admin.token)" "600 root"
list=$(in_ct mpsctl isolated-device-list)
printf '%s\n' "$list" | sed 's/^/   | /'
# etc/host_container_device.yml: renderD128 x4, renderD129 x2.
assert_eq "devices listed" "$(devices)" 6
assert_contains "mpsctl list" "$list" "NVIDIA_MPS"
# Our client is mpsctl; the name climc is left to Cloudpods' own (docs/inventory.md).
assert_contains "dpkg -L yunion-mps-daemon" "$(in_ct dpkg -L yunion-mps-daemon)" "/usr/bin/mpsctl"
assert_eq "/usr/bin/climc" "$(in_ct_sh 'if test -e /usr/bin/climc; then echo present; else echo absent; fi')" "absent"

step "deb: TLS (issue 47): the inventory and the daemon's listener behind web configuration files, certificates of the runbook's openssl commands"
# docs/operations.md's commands, on this machine's openssl (site-pki.sh);
# the certificates copied where the runbook puts them.
tests/packaging/site-pki.sh "$WORK/pki" >"$WORK/pki.log" 2>&1 || { cat "$WORK/pki.log"; fail "site-pki.sh"; }
mkdir -p "$WORK/deb-root/etc/yunion/pki"
cp "$WORK"/pki/{ca,inventory,daemon}.{crt,key} "$WORK/deb-root/etc/yunion/pki/"
in_ct_sh 'chmod 0600 /etc/yunion/pki/*.key'
# Prometheus' password for the daemon's listener: "s3cret" (htpasswd -nbBC 10).
printf '%s\n' 'tls_server_config:' '  cert_file: pki/inventory.crt' '  key_file: pki/inventory.key' \
	>"$WORK/deb-root/etc/yunion/mps-inventory-web.yml"
printf '%s\n' 'tls_server_config:' '  cert_file: pki/daemon.crt' '  key_file: pki/daemon.key' 'basic_auth_users:' \
	'  prometheus: $2a$10$GPYVE0mNQwZAZrkVqt7D4OJ9gYHDCwjLd718M7FO/5o66GBOlGp.6' \
	>"$WORK/deb-root/etc/yunion/mps-daemon-web.yml"
printf 's3cret\n' >"$WORK/deb-root/root/prometheus.password"
cp "$WORK/deb-root/etc/default/yunion-mps-inventory" "$WORK/inventory.default.orig"
cp "$WORK/deb-root/etc/yunion/host.conf" "$WORK/host.conf.orig"
in_ct_sh 'sed -i "s|^MPS_INVENTORY_OPTS=\"|MPS_INVENTORY_OPTS=\"--web.config.file /etc/yunion/mps-inventory-web.yml |" /etc/default/yunion-mps-inventory'
in_ct_sh 'sed -i "s|^mps_inventory_url: .*|mps_inventory_url: https://127.0.0.1:9330|" /etc/yunion/host.conf'
in_ct_sh 'printf "mps_inventory_ca_file: /etc/yunion/pki/ca.crt\nmps_web_config_file: /etc/yunion/mps-daemon-web.yml\n" >>/etc/yunion/host.conf'
out=$(in_ct mps-daemon check-config --simulate 8xH100 2>&1) || fail "check-config with TLS: $out"
in_ct timeout 120 systemctl restart yunion-mps-inventory
in_ct timeout 120 systemctl restart yunion-mps-daemon
assert_eq "active with TLS" "$(in_ct systemctl is-active yunion-mps-inventory yunion-mps-daemon | sort -u)" "active"
wait_for "the daemon registered its devices through HTTPS" '[ "$(mpsctl isolated-device-list --limit 2048 | grep -c NVIDIA_MPS)" = 6 ]' 120
assert_contains "inventory: serving TLS" "$(in_ct journalctl -u yunion-mps-inventory --no-pager)" "tls=true"
assert_contains "daemon's listener: TLS and basic auth" "$(in_ct journalctl -u yunion-mps-daemon --no-pager)" "basic_auth_users=1"
out=$(in_ct mpsctl --url http://127.0.0.1:9330 isolated-device-list 2>&1 || true)
assert_contains "plain HTTP to the inventory" "$out" "the server speaks only HTTPS at this address"
wait_for "the daemon reaches the inventory over HTTPS (mps-daemon status over TLS, with basic auth)" \
	'mps-daemon status --user prometheus --password-file /root/prometheus.password | grep -q reachable' 120
out=$(in_ct mps-daemon status --user prometheus --password-file /root/prometheus.password 2>&1) || fail "mps-daemon status over TLS: $out"
assert_contains "mps-daemon status over TLS with basic auth" "$out" "reachable"
out=$(in_ct mps-daemon status 2>&1 || true)
assert_contains "mps-daemon status without the password" "$out" "asks for a user and password"
# A renewal: new certificate files, no restart; the daemon stays
# registered and new connections get the renewed certificate.
tests/packaging/site-pki.sh "$WORK/pki2" >"$WORK/pki2.log" 2>&1 || { cat "$WORK/pki2.log"; fail "site-pki.sh"; }
pid=$(in_ct systemctl show -p MainPID --value yunion-mps-inventory)
cp "$WORK/pki2/ca.crt" "$WORK/deb-root/etc/yunion/pki/ca-next.crt"
in_ct_sh 'cat /etc/yunion/pki/ca-next.crt >>/etc/yunion/pki/ca.crt'
cp "$WORK/pki2/inventory.key" "$WORK/deb-root/etc/yunion/pki/inventory.key.new"
cp "$WORK/pki2/inventory.crt" "$WORK/deb-root/etc/yunion/pki/inventory.crt.new"
in_ct_sh 'cd /etc/yunion/pki && chmod 0600 inventory.key.new && mv inventory.key.new inventory.key && mv inventory.crt.new inventory.crt'
out=$(in_ct mpsctl isolated-device-list 2>&1) || fail "mpsctl after the renewal: $out"
assert_eq "inventory not restarted by the renewal" "$(in_ct systemctl show -p MainPID --value yunion-mps-inventory)" "$pid"
wait_for "the inventory's watchdog still fed over TLS (no restart)" '[ "$(systemctl show -p NRestarts --value yunion-mps-inventory)" = 0 ]' 10
note "ok: HTTPS only; devices registered through it; renewed certificate served with no restart"
# Back to the defaults for the steps below.
cp "$WORK/inventory.default.orig" "$WORK/deb-root/etc/default/yunion-mps-inventory"
cp "$WORK/host.conf.orig" "$WORK/deb-root/etc/yunion/host.conf"
in_ct timeout 120 systemctl restart yunion-mps-inventory
in_ct timeout 120 systemctl restart yunion-mps-daemon
wait_for "plain HTTP again" '[ "$(mpsctl isolated-device-list --limit 2048 | grep -c NVIDIA_MPS)" = 6 ]' 120

step "deb: apt-get install -y yunion-mps-daemon-kubernetes beside the running daemon"
pid=$(in_ct systemctl show -p MainPID --value yunion-mps-daemon)
out=$(in_ct apt-get install -y yunion-mps-daemon-kubernetes 2>&1)
printf '%s\n' "$out" | grep -E '^(The following NEW|Setting up|yunion-mps-daemon-kubernetes:)' | sed 's/^/   | /'
assert_eq "installed" "$(in_ct dpkg-query -W -f='${Status} ${Version}' yunion-mps-daemon-kubernetes)" "install ok installed 1:$V1-1"
assert_contains "postinst" "$out" "runs in the Cloudpods mode; it runs /usr/bin/mps-daemon-kubernetes from its next start"
assert_eq "daemon MainPID (installing restarts nothing)" "$(in_ct systemctl show -p MainPID --value yunion-mps-daemon)" "$pid"
assert_eq "active" "$(in_ct systemctl is-active yunion-mps-inventory yunion-mps-daemon | sort -u)" "active"
assert_contains "yunion-mps-daemon's drop-ins" "$(in_ct systemctl show -p DropInPaths --value yunion-mps-daemon)" \
	"/yunion-mps-daemon.service.d/kubernetes.conf"
out=$(in_ct systemd-analyze verify yunion-mps-daemon.service 2>&1)
assert_eq "systemd-analyze verify yunion-mps-daemon.service with the drop-in" "$out" ""
out=$(in_ct mps-daemon-kubernetes check-config --simulate 8xH100 2>/dev/null) || fail "mps-daemon-kubernetes check-config: $out"
assert_contains "mps-daemon-kubernetes check-config" "$out" "2 GPUs, 6 virtual devices"

step "deb: the service in its Kubernetes mode, as docs/kubernetes.md sets up a node (no API server here)"
# The node's steps: no local inventory, the kubeconfig in place. The
# simulated GPUs come through the daemon's options, since the test's
# simulate.conf drop-in would turn the service back into the Cloudpods mode.
rm "$WORK/deb-root/etc/systemd/system/yunion-mps-daemon.service.d/simulate.conf"
in_ct_sh 'sed -i "s/^MPS_DAEMON_OPTS=.*/MPS_DAEMON_OPTS=\"--simulate 8xH100\"/" /etc/default/yunion-mps-daemon'
printf '%s\n' 'apiVersion: v1' 'kind: Config' 'clusters:' \
	'- {name: test, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}' \
	'users:' '- {name: mps-daemon, user: {token: not-a-real-token}}' \
	'contexts:' '- {name: test, context: {cluster: test, user: mps-daemon}}' 'current-context: test' \
	>"$WORK/deb-root/etc/yunion/mps-dra.kubeconfig"
in_ct systemctl mask --now yunion-mps-inventory 2>&1 | sed 's/^/   | /'
in_ct systemctl daemon-reload
assert_contains "ExecStart" "$(in_ct systemctl show -p ExecStart --value yunion-mps-daemon)" \
	'argv[]=/usr/bin/mps-daemon-kubernetes --config /etc/yunion/host.conf $MPS_DAEMON_OPTS kubernetes $MPS_DRA_OPTS'
# Nothing answers at 127.0.0.1:6443, so no ResourceSlice is published and the
# daemon does not report ready: --no-block, and the kubelet plugin's sockets
# are what is waited for.
in_ct systemctl restart --no-block yunion-mps-daemon
wait_for "the kubelet plugin's registration and DRA sockets" \
	'test -S /var/lib/kubelet/plugins_registry/mps.yunion.io-reg.sock && test -S /var/lib/kubelet/plugins/mps.yunion.io/dra.sock' 120
kpid=$(in_ct systemctl show -p MainPID --value yunion-mps-daemon)
assert_contains "main process" "$(in_ct cat /proc/"$kpid"/cmdline | tr '\0' ' ')" \
	"/usr/bin/mps-daemon-kubernetes --config /etc/yunion/host.conf --simulate 8xH100 kubernetes --kubeconfig /etc/yunion/mps-dra.kubeconfig"
assert_contains "its environment" "$(in_ct cat /proc/"$kpid"/environ | tr '\0' '\n')" "NODE_NAME=gpu-node-deb"
assert_eq "mps-daemon processes (one unit: never both modes at once)" "$(in_ct pgrep -c -f '^/usr/bin/mps-daemon')" 1
assert_eq "the masked inventory" "$(in_ct systemctl is-active yunion-mps-inventory || true)" "inactive"
wait_for "the journal says the plugin started" 'journalctl -u yunion-mps-daemon --no-pager | grep -q "kubelet plugin started"' 30

step "deb: apt-get remove, purge yunion-mps-daemon-kubernetes"
out=$(in_ct apt-get remove -y yunion-mps-daemon-kubernetes 2>&1)
printf '%s\n' "$out" | grep -E '^(Removing|yunion-mps-daemon-kubernetes:)' | sed 's/^/   | /'
assert_contains "prerm" "$out" "yunion-mps-daemon.service (Kubernetes mode) stopped"
assert_eq "daemon after remove" "$(in_ct systemctl is-active yunion-mps-daemon || true)" "inactive"
assert_contains "ExecStart after remove" "$(in_ct systemctl show -p ExecStart --value yunion-mps-daemon)" \
	'argv[]=/usr/bin/mps-daemon --config /etc/yunion/host.conf $MPS_DAEMON_OPTS ;'
assert_eq "package state" "$(in_ct dpkg-query -W -f='${db:Status-Abbrev}' yunion-mps-daemon-kubernetes)" "rc "
in_ct test -f /etc/default/yunion-mps-daemon-kubernetes
in_ct apt-get purge -y yunion-mps-daemon-kubernetes >/dev/null
for f in /etc/default/yunion-mps-daemon-kubernetes /var/lib/kubelet/plugins/mps.yunion.io \
	/var/lib/kubelet/plugins_registry/mps.yunion.io-reg.sock /usr/bin/mps-daemon-kubernetes; do
	in_ct test ! -e "$f" || fail "$f survived the purge"
done
in_ct test -f /etc/yunion/mps-dra.kubeconfig
note "ok: the conffile and the plugin's files gone; the operator's kubeconfig kept"
# Back to the Cloudpods mode for the rest of the run.
in_ct rm /etc/yunion/mps-dra.kubeconfig
in_ct_sh 'sed -i "s/^MPS_DAEMON_OPTS=.*/MPS_DAEMON_OPTS=\"\"/" /etc/default/yunion-mps-daemon'
cmp "$WORK/deb-root/etc/default/yunion-mps-daemon" packaging/files/yunion-mps-daemon.default
simulate_dropin "$WORK/deb-root"
in_ct systemctl unmask yunion-mps-inventory >/dev/null 2>&1
in_ct systemctl daemon-reload
in_ct timeout 180 systemctl start yunion-mps-inventory yunion-mps-daemon
assert_eq "active" "$(in_ct systemctl is-active yunion-mps-inventory yunion-mps-daemon | sort -u)" "active"
assert_eq "devices listed" "$(devices)" 6

step "deb: watchdogs (WatchdogSec=4s through drop-ins, so that a missed ping shows within the test)"
for unit in yunion-mps-inventory yunion-mps-daemon; do
	mkdir -p "$WORK/deb-root/etc/systemd/system/$unit.service.d"
	printf '[Service]\nWatchdogSec=4s\n' >"$WORK/deb-root/etc/systemd/system/$unit.service.d/watchdog.conf"
done
in_ct systemctl daemon-reload
in_ct timeout 120 systemctl restart yunion-mps-inventory yunion-mps-daemon
ping1=$(in_ct systemctl show -p WatchdogTimestampMonotonic --value yunion-mps-inventory yunion-mps-daemon | tr '\n' ' ')
sleep 10 # 5 watchdog periods of 2 s
ping2=$(in_ct systemctl show -p WatchdogTimestampMonotonic --value yunion-mps-inventory yunion-mps-daemon | tr '\n' ' ')
read -r i1 d1 <<<"$ping1"
read -r i2 d2 <<<"$ping2"
[ "$i2" -gt "$i1" ] && [ "$d2" -gt "$d1" ] || fail "no watchdog pings in 10 s: $ping1 -> $ping2"
note "ok: both pinged (last ping, monotonic us: inventory $i1 -> $i2, daemon $d1 -> $d2)"
assert_eq "restarts" "$(in_ct systemctl show -p NRestarts --value yunion-mps-inventory yunion-mps-daemon | grep -v '^$' | sort -u)" 0
assert_eq "active" "$(in_ct systemctl is-active yunion-mps-inventory yunion-mps-daemon | sort -u)" "active"

step "deb: reload"
pid=$(in_ct systemctl show -p MainPID --value yunion-mps-daemon)
in_ct sed -i '0,/virtual_number: 4/s//virtual_number: 8/' /etc/yunion/host_container_device.yml
in_ct systemctl reload yunion-mps-daemon
wait_for "10 devices after the device YAML edit and a reload" '[ "$(mpsctl isolated-device-list --limit 2048 | grep -c NVIDIA_MPS)" = 10 ]' 60
assert_eq "daemon MainPID across reload" "$(in_ct systemctl show -p MainPID --value yunion-mps-daemon)" "$pid"
in_ct rm /var/lib/yunion-mps/admin.token
in_ct systemctl reload yunion-mps-inventory
wait_for "admin token file written again by systemctl reload yunion-mps-inventory" 'test -s /var/lib/yunion-mps/admin.token' 30
assert_eq "devices with the new token" "$(devices)" 10

step "deb: upgrade to v2 with edited configuration"
in_ct_sh 'sed -i "s/^MPS_DAEMON_OPTS=.*/MPS_DAEMON_OPTS=\"--log-level debug\"/" /etc/default/yunion-mps-daemon'
in_ct_sh 'echo "# edited by the operator" >>/etc/yunion/host.conf'
inv_pid=$(in_ct systemctl show -p MainPID --value yunion-mps-inventory)
rm -rf "$WORK/deb-root/srv/repo"
cp -a "$WORK/repo2" "$WORK/deb-root/srv/repo"
in_ct apt-get update -qq
# No --force-conf*: an edited conffile the new version did not change is kept
# without a question.
in_ct apt-get install -y yunion-mps-daemon </dev/null | grep -E '^(Unpacking|Setting up)' | sed 's/^/   | /'
assert_eq "upgraded" "$(in_ct dpkg-query -W -f='${Version}\n' yunion-mps-daemon yunion-mps-inventory | sort -u)" "1:$V2-1"
assert_contains "conffile kept" "$(in_ct cat /etc/default/yunion-mps-daemon)" 'MPS_DAEMON_OPTS="--log-level debug"'
assert_contains "host.conf kept" "$(in_ct cat /etc/yunion/host.conf)" "# edited by the operator"
assert_contains "device YAML kept" "$(in_ct cat /etc/yunion/host_container_device.yml)" "virtual_number: 8"
assert_eq "leftovers of dpkg" "$(in_ct find /etc -name '*.dpkg-*')" ""
assert_eq "active after upgrade" "$(in_ct systemctl is-active yunion-mps-inventory yunion-mps-daemon | sort -u)" "active"
new_pid=$(in_ct systemctl show -p MainPID --value yunion-mps-daemon)
[ "$new_pid" != "$pid" ] || fail "the daemon was not restarted by the upgrade"
[ "$(in_ct systemctl show -p MainPID --value yunion-mps-inventory)" != "$inv_pid" ] || fail "the inventory was not restarted by the upgrade"
note "ok: both restarted (daemon $pid -> $new_pid)"
assert_contains "running binary" "$(in_ct mps-daemon --version)" "$V2-test"
assert_contains "daemon command line" "$(in_ct cat /proc/"$new_pid"/cmdline | tr '\0' ' ')" "--log-level debug"
wait_for "the upgraded daemon synced" 'systemctl show -p StatusText --value yunion-mps-daemon | grep -q "inventory reachable"' 60
assert_eq "devices after upgrade (none duplicated)" "$(devices)" 10

step "deb: remove"
in_ct apt-get remove -y yunion-mps-daemon >/dev/null
assert_eq "daemon after remove" "$(in_ct systemctl is-active yunion-mps-daemon || true)" "inactive"
assert_eq "inventory after removing the daemon" "$(in_ct systemctl is-active yunion-mps-inventory)" "active"
assert_eq "package state" "$(in_ct dpkg-query -W -f='${db:Status-Abbrev}' yunion-mps-daemon)" "rc "
in_ct test ! -e /usr/bin/mps-daemon
in_ct test -f /etc/yunion/host.conf
in_ct test -f /etc/default/yunion-mps-daemon
in_ct test -d /var/lib/yunion-mps
note "ok: binaries gone; host.conf, /etc/default and state kept"

step "deb: purge"
in_ct apt-get purge -y yunion-mps-daemon yunion-mps-inventory >/dev/null
assert_eq "inventory after purge" "$(in_ct systemctl is-active yunion-mps-inventory || true)" "inactive"
for f in /etc/yunion/host.conf /etc/yunion/host_container_device.yml /etc/default/yunion-mps-daemon \
	/etc/default/yunion-mps-inventory /var/lib/yunion-mps; do
	in_ct test ! -e "$f" || fail "$f survived the purge"
done
note "ok: configuration (created by the package) and state gone"
assert_eq "unit links left" "$(in_ct find /etc/systemd/system -name 'yunion-mps-*.service' -not -path '*.d/*')" ""
assert_eq "packages left" "$(in_ct dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' 'yunion-*' 2>/dev/null || true)" ""
assert_eq "failed units" "$(in_ct systemctl list-units --failed --no-legend --plain 'yunion*')" ""

step "deb: upgrade from Cloudpods' own yunion-mps-daemon (a stand-in: tests/packaging/cloudpods-standin)"
mkdir -p "$WORK/standin"
PKG_ARCH=$($GO env GOARCH) $NFPM package --config tests/packaging/cloudpods-standin/nfpm.yaml --packager deb --target "$WORK/standin/" >/dev/null
cp "$WORK"/standin/*.deb "$WORK/deb-root/srv/standin.deb"
# The earlier steps' drop-ins (--simulate, WatchdogSec) would apply to
# Cloudpods' unit too: a host that never had our package has none.
rm -rf "$WORK/deb-root/etc/systemd/system/yunion-mps-daemon.service.d" "$WORK/deb-root/etc/systemd/system/yunion-mps-inventory.service.d"
in_ct systemctl daemon-reload
in_ct dpkg -i /srv/standin.deb >/dev/null
in_ct mkdir -p /etc/yunion
in_ct_sh 'printf "enable_cuda_mps: true\ncontainer_device_config_file: /etc/yunion/host_container_device.yml\n" >/etc/yunion/host.conf'
in_ct_sh 'printf "devices:\n- path: /dev/dri/renderD128\n  type: NVIDIA_MPS\n  virtual_number: 4\n" >/etc/yunion/host_container_device.yml'
# The hazard first: stopping Cloudpods' daemon sends quit, which kills the
# CUDA job.
in_ct systemctl start yunion-mps-daemon
wait_for "the stand-in's MPS control daemon and its client" 'test -s /var/lib/cloudpods-standin/client.pid' 30
client=$(in_ct cat /var/lib/cloudpods-standin/client.pid)
in_ct systemctl stop yunion-mps-daemon
in_ct test -f /var/lib/cloudpods-standin/quit-sent || fail "the stand-in sent no quit on stop: it does not stand for Cloudpods' daemon"
wait_for "the stand-in, like Cloudpods' daemon, sent quit when stopped, and its client died" "! kill -0 $client 2>/dev/null" 20
in_ct rm -f /var/lib/cloudpods-standin/quit-sent /var/lib/cloudpods-standin/client.pid
in_ct systemctl start yunion-mps-daemon
wait_for "a new client" 'test -s /var/lib/cloudpods-standin/client.pid' 30
client=$(in_ct cat /var/lib/cloudpods-standin/client.pid)
# Single layout on a Cloudpods host: the region backend chooses it; this
# host.conf has no keystone, so it is said explicitly.
in_ct_sh 'echo "mps_pipe_layout: single" >>/etc/yunion/host.conf'
in_ct apt-get install -y yunion-mps-daemon </dev/null | grep -E '^(Unpacking|Setting up)' | sed 's/^/   | /'
assert_eq "upgraded from Cloudpods' package" "$(in_ct dpkg-query -W -f='${Version}\n' yunion-mps-daemon)" "1:$V2-1"
upgrade_kept_mps "$client"
in_ct test -f /lib/systemd/system/yunion-mps-daemon.service
adopts_after_upgrade "$WORK/deb-root" "$client"
poweroff

# ------------------------------------------------- the Kubernetes package
step "deb: yunion-mps-daemon-kubernetes v1 -> v2 on a node with prepared claims (no API server here)"
new_root "$WORK/k8s-root" gpu-node-k8s
add_apt_repo "$WORK/k8s-root" "$WORK/repo2"
boot "$WORK/k8s-root" gpu-node-k8s
in_ct apt-get update -qq
in_ct apt-get install -y "yunion-mps-daemon-kubernetes=1:$V1-1" "yunion-mps-daemon=1:$V1-1" "yunion-mps-inventory=1:$V1-1" </dev/null |
	grep -E '^(Setting up)' | sed 's/^/   | /'
assert_eq "installed" "$(in_ct dpkg-query -W -f='${Version}\n' yunion-mps-daemon-kubernetes yunion-mps-daemon | sort -u)" "1:$V1-1"
# The node as docs/kubernetes.md sets it up, its GPU 0 shared by claims of
# any size; the simulated GPUs through the daemon's options.
in_ct systemctl mask --now yunion-mps-inventory >/dev/null 2>&1
in_ct_sh 'sed -i "s/^MPS_DAEMON_OPTS=.*/MPS_DAEMON_OPTS=\"--simulate 8xH100\"/" /etc/default/yunion-mps-daemon'
printf '%s\n' 'apiVersion: v1' 'kind: Config' 'clusters:' \
	'- {name: test, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}' \
	'users:' '- {name: mps-daemon, user: {token: not-a-real-token}}' \
	'contexts:' '- {name: test, context: {cluster: test, user: mps-daemon}}' 'current-context: test' \
	>"$WORK/k8s-root/etc/yunion/mps-dra.kubeconfig"
printf '%s\n' 'devices:' '- path: /dev/dri/renderD128' '  type: NVIDIA_MPS' '  virtual_number: 4' '  sharing: claims' \
	'- path: /dev/dri/renderD129' '  type: NVIDIA_MPS' '  virtual_number: 2' >"$WORK/k8s-root/etc/yunion/host_container_device.yml"
plan=$(in_ct mps-daemon-kubernetes check-config --simulate 8xH100 2>/dev/null) || fail "check-config: $plan"
gpu0=$(printf '%s\n' "$plan" | sed -n 's/^.*0000:18:00\.0 *\(GPU-[0-9a-f-]*\) .*$/\1/p' | head -n 1)
[ -n "$gpu0" ] || fail "check-config names no GPU at 0000:18:00.0: $plan"
# Two claims the v1 plugin prepared (its checkpoint, as it writes it:
# tests/gpu/clients/claims_checkpoint.py), read back at its start.
cp=/var/lib/kubelet/plugins/mps.yunion.io/checkpoint.json
mkdir -p "$WORK/k8s-root${cp%/*}"
python3 tests/gpu/clients/claims_checkpoint.py "$WORK/k8s-root$cp" "$gpu0" gpu-node-k8s 4 81559 trainer:40960 notebook:20480
in_ct systemctl daemon-reload
in_ct systemctl restart --no-block yunion-mps-daemon
claims_spec=/var/run/cdi/yunion.io-mps-claim.yaml
wait_for "v1 wrote the claims' CDI entries from its checkpoint" \
	"grep -q '$gpu0::1001' $claims_spec && journalctl -u yunion-mps-daemon --no-pager | grep -q msg=reconciled" 120
pid1=$(in_ct systemctl show -p MainPID --value yunion-mps-daemon)
# The spec's entries (its header comment names the daemon's version).
spec1=$(in_ct_sh "grep -v '^#' $claims_spec | sha256sum")
cp1=$(in_ct sha256sum $cp)
# A CUDA client of the claim trainer, connected to GPU 0's MPS server (the
# simulated control's state, under its lock, as a client connecting
# writes it).
client=$(in_ct_sh 'setsid sleep infinity </dev/null >/dev/null 2>&1 & echo $!')
pipe=/proc/$CT_LEADER/root/tmp/nvidia-mps/pipe/$gpu0
flock "$pipe/sim-control.lock" python3 - "$pipe/sim-control.json" "$client" <<'PY'
import json, os, sys
path, pid = sys.argv[1], int(sys.argv[2])
with open(path) as f:
    st = json.load(f)
st["servers"] = (st.get("servers") or []) + [{"pid": st["next_server_pid"], "thread_percentage": st["default_thread_percentage"],
                      "mem_limit_mib": st["default_mem_limit_mib"], "clients": [{"pid": pid, "context": 1, "command": "sleep", "namespace": "0"}]}]
st["next_server_pid"] += 1
with open(path + ".tmp", "w") as f:
    json.dump(st, f, separators=(",", ":"))
os.rename(path + ".tmp", path)
PY
control=$(in_ct cat "/tmp/nvidia-mps/pipe/$gpu0/nvidia-cuda-mps-control.pid")

in_ct apt-get install -y yunion-mps-daemon-kubernetes </dev/null | grep -E '^(Unpacking|Setting up)' | sed 's/^/   | /'
assert_eq "upgraded" "$(in_ct dpkg-query -W -f='${Version}\n' yunion-mps-daemon-kubernetes yunion-mps-daemon | sort -u)" "1:$V2-1"
wait_for "the upgraded daemon running the Kubernetes binary" \
	'[ "$(systemctl show -p MainPID --value yunion-mps-daemon)" != '"$pid1"' ] && systemctl is-active -q yunion-mps-daemon' 60
pid2=$(in_ct systemctl show -p MainPID --value yunion-mps-daemon)
assert_contains "main process" "$(in_ct cat /proc/"$pid2"/cmdline | tr '\0' ' ')" "/usr/bin/mps-daemon-kubernetes --config /etc/yunion/host.conf --simulate 8xH100 kubernetes"
assert_contains "running binary" "$(in_ct mps-daemon-kubernetes --version)" "$V2-test"
wait_for "v2 reconciled" "journalctl -u yunion-mps-daemon --no-pager _PID=$pid2 | grep -q msg=reconciled" 120
assert_eq "the checkpoint (claims kept)" "$(in_ct sha256sum $cp)" "$cp1"
assert_eq "the claims' CDI spec (entries unchanged)" "$(in_ct_sh "grep -v '^#' $claims_spec | sha256sum")" "$spec1"
assert_contains "the claims' CDI spec, written by" "$(in_ct head -n 1 $claims_spec)" "$V2-test"
in_ct kill -0 "$client" || fail "the claim's CUDA client ($client) died in the upgrade"
assert_contains "MPS state: the client still connected" "$(in_ct cat "/tmp/nvidia-mps/pipe/$gpu0/sim-control.json" | tr -d ' ')" "\"pid\":$client"
assert_eq "GPU 0's MPS control daemon (not restarted)" "$(in_ct cat "/tmp/nvidia-mps/pipe/$gpu0/nvidia-cuda-mps-control.pid")" "$control"
status=$(in_ct mps-daemon-kubernetes status)
printf '%s\n' "$status" | sed -n '/Kubernetes claims/,$p' | sed 's/^/   | /'
assert_contains "mps-daemon status: the claims" "$status" "gpu-claims/trainer"
assert_contains "mps-daemon status: the claims" "$status" "gpu-claims/notebook"
note "ok: claims kept, CDI entries unchanged, the client and its control daemon untouched"
poweroff

# -------------------------------------------------------------------- .rpm
step "rpm: the same root booted with a RHEL-like preset and a host.conf of Cloudpods"
new_root "$WORK/rpm-root" gpu-node-rpm
r=$WORK/rpm-root
# RHEL and Fedora ship "disable *" last: nothing is enabled unless a preset says so.
mkdir -p "$r/etc/systemd/system-preset"
echo 'disable *' >"$r/etc/systemd/system-preset/99-default.preset"
# A host.conf the Cloudpods host service wrote: keys of its own, and ours.
mkdir -p "$r/etc/yunion"
cat >"$r/etc/yunion/host.conf" <<'EOF'
# written by the Cloudpods host service
region: region0
port: 8885
enable_cuda_mps: true
container_device_config_file: /etc/yunion/host_container_device.yml
EOF
cloudpods_sum=$(sha256sum <"$r/etc/yunion/host.conf")
mkdir -p "$r/srv/rpms/v1" "$r/srv/rpms/v2"
cp "$(rpmfile v1 yunion-mps-daemon "$V1")" "$(rpmfile v1 yunion-mps-inventory "$V1")" "$r/srv/rpms/v1/"
cp "$(rpmfile v2 yunion-mps-daemon "$V2")" "$(rpmfile v2 yunion-mps-inventory "$V2")" "$r/srv/rpms/v2/"
mkdir -p "$r/srv/rpms/kubernetes"
cp "$(rpmfile v1 yunion-mps-daemon-kubernetes "$V1")" "$r/srv/rpms/kubernetes/"
cp "$WORK/signing-key.pub" "$r/srv/rpms/key.asc"
boot "$r" gpu-node-rpm

step "rpm: install"
in_ct rpm --import /srv/rpms/key.asc
in_ct_sh 'rpm -K /srv/rpms/v1/*.rpm' | sed 's/^/   | /'
# The rpm database here knows nothing of Debian's glibc, systemd or
# util-linux: --nodeps (the Requires were checked above). Signatures are
# checked against the imported key.
in_ct_sh 'rpm -ivh --nodeps /srv/rpms/v1/*.rpm' | sed 's/^/   | /'
assert_eq "running after install" "$(in_ct systemctl is-active yunion-mps-inventory yunion-mps-daemon | sort -u)" "inactive"
assert_eq "enabled after install under \"disable *\"" \
	"$(in_ct systemctl is-enabled yunion-mps-inventory yunion-mps-daemon | sort -u)" "disabled"
assert_eq "the Cloudpods host.conf" "$(in_ct_sh 'sha256sum </etc/yunion/host.conf')" "$cloudpods_sum"
in_ct cmp /usr/share/yunion-mps-daemon/host_container_device.yml /etc/yunion/host_container_device.yml
note "ok: host.conf untouched, the missing device YAML created"
assert_eq "rpm -V" "$(in_ct rpm -V --nodeps yunion-mps-daemon yunion-mps-inventory || true)" ""

step "rpm: systemctl enable --now yunion-mps-inventory yunion-mps-daemon"
simulate_dropin "$r"
in_ct systemctl daemon-reload
in_ct timeout 180 systemctl enable --now yunion-mps-inventory yunion-mps-daemon
assert_eq "active" "$(in_ct systemctl is-active yunion-mps-inventory yunion-mps-daemon | sort -u)" "active"
assert_eq "devices listed" "$(devices)" 6

step "rpm: the Kubernetes package installed and erased beside the running daemon"
pid=$(in_ct systemctl show -p MainPID --value yunion-mps-daemon)
in_ct_sh 'rpm -K /srv/rpms/kubernetes/*.rpm' | sed 's/^/   | /'
out=$(in_ct_sh 'rpm -ivh --nodeps /srv/rpms/kubernetes/*.rpm' 2>&1)
printf '%s\n' "$out" | sed 's/^/   | /'
assert_contains "%post" "$out" "runs in the Cloudpods mode; it runs /usr/bin/mps-daemon-kubernetes from its next start"
assert_eq "daemon MainPID (installing restarts nothing)" "$(in_ct systemctl show -p MainPID --value yunion-mps-daemon)" "$pid"
assert_eq "enabled" "$(in_ct systemctl is-enabled yunion-mps-daemon)" "enabled"
assert_contains "yunion-mps-daemon's drop-ins" "$(in_ct systemctl show -p DropInPaths --value yunion-mps-daemon)" \
	"/yunion-mps-daemon.service.d/kubernetes.conf"
assert_eq "rpm -V" "$(in_ct rpm -V --nodeps yunion-mps-daemon-kubernetes || true)" ""
in_ct rpm -e yunion-mps-daemon-kubernetes
assert_eq "daemon MainPID after erase (the Cloudpods mode is left alone)" "$(in_ct systemctl show -p MainPID --value yunion-mps-daemon)" "$pid"
assert_lacks "yunion-mps-daemon's drop-ins after erase" "$(in_ct systemctl show -p DropInPaths --value yunion-mps-daemon)" "kubernetes.conf"
assert_eq "files left" "$(in_ct find /etc/sysconfig /usr/bin -name '*kubernetes*')" ""

step "rpm: upgrade to v2 with an edited config(noreplace) file"
in_ct_sh 'sed -i "s/^MPS_DAEMON_OPTS=.*/MPS_DAEMON_OPTS=\"--log-level debug\"/" /etc/sysconfig/yunion-mps-daemon'
assert_contains "rpm -V sees the edit" "$(in_ct rpm -V --nodeps yunion-mps-daemon || true)" " c /etc/sysconfig/yunion-mps-daemon"
pid=$(in_ct systemctl show -p MainPID --value yunion-mps-daemon)
in_ct_sh 'rpm -Uvh --nodeps /srv/rpms/v2/*.rpm' | sed 's/^/   | /'
assert_eq "upgraded" "$(in_ct rpm -q --qf '%{VERSION}-%{RELEASE}\n' yunion-mps-daemon yunion-mps-inventory | sort -u)" "$V2-1"
assert_contains "config kept" "$(in_ct cat /etc/sysconfig/yunion-mps-daemon)" 'MPS_DAEMON_OPTS="--log-level debug"'
assert_eq "rpmnew/rpmsave files" "$(in_ct find /etc -name '*.rpmnew' -o -name '*.rpmsave')" ""
new_pid=$(in_ct systemctl show -p MainPID --value yunion-mps-daemon)
[ "$new_pid" != "$pid" ] || fail "the daemon was not restarted by the upgrade"
assert_contains "daemon command line" "$(in_ct cat /proc/"$new_pid"/cmdline | tr '\0' ' ')" "--log-level debug"
wait_for "the upgraded daemon synced" 'systemctl show -p StatusText --value yunion-mps-daemon | grep -q "inventory reachable"' 60
assert_eq "devices after upgrade (none duplicated)" "$(devices)" 6

step "rpm: erase"
in_ct rpm -e yunion-mps-daemon yunion-mps-inventory
assert_eq "after erase" "$(in_ct systemctl is-active yunion-mps-inventory yunion-mps-daemon | sort -u || true)" "inactive"
in_ct test ! -e /usr/bin/mps-daemon
in_ct test -f /etc/sysconfig/yunion-mps-daemon.rpmsave
in_ct test ! -e /etc/sysconfig/yunion-mps-inventory
assert_eq "the Cloudpods host.conf" "$(in_ct_sh 'sha256sum </etc/yunion/host.conf')" "$cloudpods_sum"
in_ct test -d /var/lib/yunion-mps
note "ok: edited config saved as .rpmsave, untouched one removed, host.conf and state kept (rpm has no purge)"
assert_eq "unit links left" "$(in_ct find /etc/systemd/system -name 'yunion-mps-*.service' -not -path '*.d/*')" ""

step "rpm: upgrade from Cloudpods' own yunion-mps-daemon (the stand-in, as rpm)"
# Cloudpods' rpm (build/build.sh) has the same scriptlets as its .deb: %post
# preset, %preun disable and stop whatever $1, %postun daemon-reload. rpm
# runs our %pretrans first and that %preun after our %post.
PKG_ARCH=$($GO env GOARCH) $NFPM package --config tests/packaging/cloudpods-standin/nfpm.yaml --packager rpm --target "$WORK/standin/" >/dev/null
cp "$WORK"/standin/*.rpm "$r/srv/standin.rpm"
rm -rf "$r/etc/systemd/system/yunion-mps-daemon.service.d" "$r/etc/systemd/system/yunion-mps-inventory.service.d"
in_ct systemctl daemon-reload
in_ct rpm -ivh --nodeps /srv/standin.rpm | sed 's/^/   | /'
in_ct systemctl enable yunion-mps-daemon 2>&1 | sed 's/^/   | /'  # "disable *": the operator enabled it
in_ct rm -rf /tmp/nvidia-mps /var/lib/cloudpods-standin
in_ct systemctl start yunion-mps-daemon
wait_for "the stand-in's MPS control daemon and its client" 'test -s /var/lib/cloudpods-standin/client.pid' 30
client=$(in_ct cat /var/lib/cloudpods-standin/client.pid)
in_ct_sh 'echo "mps_pipe_layout: single" >>/etc/yunion/host.conf'
in_ct_sh 'rpm -Uvh --nodeps /srv/rpms/v2/*.rpm' | sed 's/^/   | /'
assert_eq "upgraded from Cloudpods' package" "$(in_ct rpm -q --qf '%{EPOCH}:%{VERSION}-%{RELEASE}\n' yunion-mps-daemon)" "1:$V2-1"
upgrade_kept_mps "$client"
adopts_after_upgrade "$r" "$client"
poweroff
