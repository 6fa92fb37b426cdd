#!/usr/bin/env bash
# systemd-verify.sh [BIN]: `systemd-analyze verify` on systemd/*.service,
# and on yunion-mps-daemon.service with the Kubernetes drop-in
# (deploy/kubernetes/yunion-mps-daemon.service.d, which the package
# yunion-mps-daemon-kubernetes installs) when BIN holds mps-daemon-kubernetes
# (make build-kubernetes; MPS_VERIFY_KUBERNETES=1 makes it required).
# Fails on any output at all, since verify exits 0 on some errors.
#
# It runs in a staging root (--root) holding this machine's own unit
# directory (the targets our units name), our units, the binaries from BIN
# (default bin) at the paths ExecStart= names, and kill for ExecReload=:
# verify checks that every command exists. A unit with a deliberate mistake
# is checked too, to prove the check still catches one.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
bin=${1:-$repo/bin}

command -v systemd-analyze >/dev/null || { echo "systemd-verify.sh: needs systemd-analyze" >&2; exit 1; }
units=/usr/lib/systemd/system
[ -d "$units" ] || units=/lib/systemd/system
[ -f "$units/multi-user.target" ] || { echo "systemd-verify.sh: no systemd unit directory on this machine" >&2; exit 1; }

root=$(mktemp -d /tmp/mps-verify.XXXXXX)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/usr/lib/systemd" "$root/usr/bin" "$root/bin" "$root/etc/systemd/system"
cp -a "$units" "$root/usr/lib/systemd/system"
cp "$bin/mps-daemon" "$bin/mps-inventory" "$root/usr/bin/"
cp "$(type -P kill)" "$root/bin/kill"
cp "$repo"/systemd/*.service "$root/usr/lib/systemd/system/"

verify() { systemd-analyze verify --root="$root" "$@" 2>&1; }

status=0
for unit in "$repo"/systemd/*.service; do
	name=$(basename "$unit")
	out=$(verify "$name") || true
	if [ -n "$out" ]; then
		printf 'systemd-verify.sh: %s:\n%s\n' "$name" "$out" >&2
		status=1
	else
		echo "   ok: systemd-analyze verify $name: no output"
	fi
done

# The Kubernetes drop-in, in a second staging root (the first one's daemon
# unit stays without it).
if [ -x "$bin/mps-daemon-kubernetes" ]; then
	k8s=$root/k8s
	mkdir -p "$k8s/usr/lib/systemd" "$k8s/usr/bin" "$k8s/bin"
	cp -a "$root/usr/lib/systemd/system" "$k8s/usr/lib/systemd/system"
	cp -a "$repo/deploy/kubernetes/yunion-mps-daemon.service.d" "$k8s/usr/lib/systemd/system/"
	cp "$bin/mps-daemon-kubernetes" "$bin/mps-inventory" "$k8s/usr/bin/"
	cp "$(type -P kill)" "$k8s/bin/kill"
	out=$(systemd-analyze verify --root="$k8s" yunion-mps-daemon.service 2>&1) || true
	if [ -n "$out" ]; then
		printf 'systemd-verify.sh: yunion-mps-daemon.service with the Kubernetes drop-in:\n%s\n' "$out" >&2
		status=1
	else
		echo "   ok: systemd-analyze verify yunion-mps-daemon.service + yunion-mps-daemon.service.d/kubernetes.conf: no output"
	fi
elif [ -n "${MPS_VERIFY_KUBERNETES:-}" ]; then
	echo "systemd-verify.sh: $bin/mps-daemon-kubernetes missing (make build-kubernetes)" >&2
	status=1
else
	echo "   skipped: the Kubernetes drop-in (no $bin/mps-daemon-kubernetes: make build-kubernetes)"
fi

# The check itself: a typo'd directive and a missing binary must be reported.
sed -e 's/^Restart=/Restrat=/' -e 's|^ExecStart=/usr/bin/mps-daemon|ExecStart=/usr/bin/no-such-daemon|' \
	"$repo/systemd/yunion-mps-daemon.service" >"$root/usr/lib/systemd/system/mps-verify-selftest.service"
out=$(verify mps-verify-selftest.service) || true
case $out in
*Restrat* | *no-such-daemon*) echo "   ok: a broken unit is reported" ;;
*)
	echo "systemd-verify.sh: a broken unit went unreported: the check is not working ($out)" >&2
	status=1
	;;
esac
exit "$status"
