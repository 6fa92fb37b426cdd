# shellcheck shell=bash
# Helpers of tests/packaging/run.sh: a cached Debian root, booting a copy of
# it with systemd-nspawn --boot, running commands inside, and assertions.
#
# The container is booted without the host's systemd (--register=no
# --keep-unit: CI machines and sandboxes often have none as PID 1) and with
# a private network (only its own loopback, so its 127.0.0.1:9330 and :9331
# never meet the host's). Commands run inside through nsenter into every
# namespace of the container's PID 1, so they talk to the container's
# systemd as an operator's shell would.

SUITE=${MPS_PKGTEST_SUITE:-bookworm}
MIRROR=${MPS_PKGTEST_MIRROR:-http://deb.debian.org/debian}
# What the cached root holds besides minbase: an init, D-Bus, procps
# (/bin/kill, a dependency of both packages) and rpm (the .rpm half runs
# rpm inside the booted root, so that its scriptlets meet a live systemd).
ROOT_PACKAGES=systemd,systemd-sysv,dbus,procps,rpm
# Bump to rebuild every cached root.
ROOT_FORMAT=1

T0=$(date +%s)
step() { printf '\n== [%4ss] %s\n' "$(($(date +%s) - T0))" "$*"; }
note() { printf '   %s\n' "$*"; }
fail() {
	printf 'FAIL: %s\n' "$*" >&2
	exit 1
}

assert_eq() { # what got want
	[ "$2" = "$3" ] || fail "$1: got \"$2\", want \"$3\""
	note "ok: $1 = $3"
}
assert_contains() { # what haystack needle
	case $2 in
	*"$3"*) note "ok: $1 contains \"$3\"" ;;
	*) fail "$1 lacks \"$3\":"$'\n'"$2" ;;
	esac
}
assert_lacks() { # what haystack needle
	case $2 in
	*"$3"*) fail "$1 contains \"$3\":"$'\n'"$2" ;;
	*) note "ok: $1 lacks \"$3\"" ;;
	esac
}

# cached_root prints the directory of a debootstrapped root for SUITE with
# ROOT_PACKAGES, building it under CACHE when missing (a lock keeps two runs
# from building it at once).
cached_root() {
	local key dir
	key=$(printf '%s %s %s %s' "$SUITE" "$MIRROR" "$ROOT_PACKAGES" "$ROOT_FORMAT" | sha256sum | cut -c1-12)
	dir=$CACHE/root-$SUITE-$key
	mkdir -p "$CACHE"
	(
		flock 9
		if [ ! -f "$dir/.complete" ]; then
			rm -rf "$dir.tmp" "$dir"
			echo "   debootstrap $SUITE ($ROOT_PACKAGES) into $dir" >&2
			debootstrap --variant=minbase --include="$ROOT_PACKAGES" "$SUITE" "$dir.tmp" "$MIRROR" \
				>"$CACHE/debootstrap.log" 2>&1 || {
				tail -n 30 "$CACHE/debootstrap.log" >&2
				exit 1
			}
			# Nothing of the build host's: no apt lists, no machine id.
			rm -rf "$dir.tmp"/var/lib/apt/lists/* "$dir.tmp"/var/cache/apt/archives/*.deb
			: >"$dir.tmp/etc/machine-id"
			touch "$dir.tmp/.complete"
			mv "$dir.tmp" "$dir"
		fi
	) 9>"$CACHE/.lock" || return 1
	echo "$dir"
}

# new_root copies the cached root to $1 and names the machine $2.
new_root() {
	cp -a "$(cached_root)" "$1"
	rm -f "$1/.complete"
	echo "$2" >"$1/etc/hostname"
	printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n' "$2" >"$1/etc/hosts"
}

# boot starts the root $1 as machine $2 and waits until its systemd has
# finished starting up. Sets CT_PID (systemd-nspawn) and CT_LEADER (the
# container's PID 1).
boot() {
	local root=$1 name=$2 state
	CT_LOG=$WORK/$name.console
	systemd-nspawn --boot --quiet --register=no --keep-unit --private-network \
		-D "$root" -M "$name" >"$CT_LOG" 2>&1 </dev/null &
	CT_PID=$!
	CT_LEADER=
	for _ in $(seq 100); do
		CT_LEADER=$(pgrep -P "$CT_PID" | head -n 1 || true)
		[ -n "$CT_LEADER" ] && [ -e "/proc/$CT_LEADER/root/run/systemd/private" ] && break
		kill -0 "$CT_PID" 2>/dev/null || { cat "$CT_LOG" >&2; fail "systemd-nspawn exited while booting $name"; }
		sleep 0.2
	done
	[ -n "$CT_LEADER" ] || { cat "$CT_LOG" >&2; fail "no PID 1 in $name"; }
	state=$(in_ct timeout 120 systemctl is-system-running --wait || true)
	note "$name booted: $state (systemd-nspawn pid $CT_PID, container PID 1 is $CT_LEADER)"
	case $state in
	running) ;;
	degraded) in_ct systemctl --failed --no-pager --no-legend | sed 's/^/   failed at boot (not ours): /' ;;
	*)
		cat "$CT_LOG" >&2
		fail "$name did not boot: $state"
		;;
	esac
}

# in_ct runs a command inside the booted container, as root in a clean
# environment, like an operator's login shell.
in_ct() {
	nsenter -t "$CT_LEADER" -a -- /usr/bin/env -i \
		PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		HOME=/root LANG=C.UTF-8 TERM=dumb DEBIAN_FRONTEND=noninteractive "$@"
}

# in_ct_sh runs a shell snippet inside the container.
in_ct_sh() { in_ct /bin/sh -ec "$1"; }

# poweroff shuts the container down and waits for systemd-nspawn to exit.
poweroff() {
	[ -n "${CT_PID:-}" ] || return 0
	if kill -0 "$CT_PID" 2>/dev/null; then
		in_ct systemctl poweroff --no-block >/dev/null 2>&1 || kill -TERM "$CT_PID" 2>/dev/null || true
		for _ in $(seq 150); do
			kill -0 "$CT_PID" 2>/dev/null || break
			sleep 0.2
		done
		kill -0 "$CT_PID" 2>/dev/null && kill -KILL "$CT_PID" 2>/dev/null
	fi
	wait "$CT_PID" 2>/dev/null || true
	CT_PID=
}

# wait_for retries the shell snippet $2 inside the container until it
# succeeds, for at most $3 seconds; $1 says what is awaited.
wait_for() {
	local what=$1 snippet=$2 deadline=$(($(date +%s) + ${3:-60}))
	while ! in_ct_sh "$snippet" >/dev/null 2>&1; do
		[ "$(date +%s)" -lt "$deadline" ] || {
			in_ct_sh "$snippet" || true
			fail "timed out waiting for: $what"
		}
		sleep 0.5
	done
	note "ok: $what"
}

# devices prints how many NVIDIA_MPS rows `mpsctl isolated-device-list` shows
# inside the container (all pages).
devices() {
	in_ct mpsctl isolated-device-list --limit 2048 | grep -c NVIDIA_MPS || true
}

# dump_units prints the state and journal of both units, for failures.
dump_units() {
	[ -n "${CT_LEADER:-}" ] && kill -0 "${CT_PID:-0}" 2>/dev/null || return 0
	in_ct systemctl status --no-pager yunion-mps-inventory yunion-mps-daemon 2>&1 | sed 's/^/   | /' || true
	in_ct journalctl --no-pager -n 60 -u yunion-mps-inventory -u yunion-mps-daemon 2>&1 | sed 's/^/   | /' || true
}
