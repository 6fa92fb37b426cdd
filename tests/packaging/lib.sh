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

# The newest glibc symbol version a shipped binary may need (the Makefile's
# GLIBC_FLOOR): CentOS 7's glibc.
GLIBC_FLOOR=2.17

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

# cached_root [SUITE [ARCH [PACKAGES]]] prints the directory of a
# debootstrapped root (minbase) of SUITE (default $SUITE) for the Debian
# architecture ARCH (default the host's) with PACKAGES (default
# ROOT_PACKAGES), building it under CACHE when missing (a lock keeps two runs
# from building it at once). A foreign architecture is bootstrapped in two
# stages, the second run under qemu-user through binfmt_misc.
cached_root() {
	local suite=${1:-$SUITE} arch=${2:-$(dpkg --print-architecture)} pkgs=${3-$ROOT_PACKAGES} key dir foreign=
	key=$(printf '%s %s %s %s %s' "$suite" "$MIRROR" "$pkgs" "$ROOT_FORMAT" "$arch" | sha256sum | cut -c1-12)
	dir=$CACHE/root-$suite-$arch-$key
	[ "$arch" = "$(dpkg --print-architecture)" ] || foreign=--foreign
	mkdir -p "$CACHE"
	(
		flock 9
		if [ ! -f "$dir/.complete" ]; then
			rm -rf "$dir.tmp" "$dir"
			echo "   debootstrap $suite $arch (${pkgs:-minbase}) into $dir" >&2
			{
				debootstrap --variant=minbase --arch="$arch" $foreign ${pkgs:+--include="$pkgs"} "$suite" "$dir.tmp" "$MIRROR" &&
					if [ -n "$foreign" ]; then chroot "$dir.tmp" /debootstrap/debootstrap --second-stage; fi
			} >"$CACHE/debootstrap-$suite-$arch.log" 2>&1 || {
				tail -n 30 "$CACHE/debootstrap-$suite-$arch.log" >&2
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

# quiet_make LOG ARGS... runs make ARGS with its output in LOG, and prints
# only the summary lines of packaging/package.sh and repo.sh (all of LOG's
# tail if make fails).
quiet_make() {
	local log=$1
	shift
	make --no-print-directory "$@" >"$log" 2>&1 || {
		tail -n 40 "$log" >&2
		fail "make $*"
	}
	grep -E '^(package|repo)\.sh: ' "$log" | sed 's/^/   /' || true
}

# objdump_for FILE prints an objdump that reads FILE's architecture: the
# host's, or the cross binutils' (binutils-aarch64-linux-gnu comes with
# gcc-aarch64-linux-gnu).
objdump_for() {
	case $(readelf -h "$1" 2>/dev/null | sed -n 's/^ *Machine: *//p') in
	AArch64) command -v aarch64-linux-gnu-objdump || echo objdump ;;
	*) echo objdump ;;
	esac
}

# check_glibc_floor DIR... unpacks every .deb and .rpm in DIR and fails if
# `objdump -T` of any binary (or the view's library) in them needs a
# GLIBC_ version above GLIBC_FLOOR: the symbols it takes from glibc (*UND*;
# the library defines dlsym and dlvsym under glibc's own version names,
# GLIBC_2.34 among them, which are not requirements). A static binary (no
# dynamic symbols) passes.
check_glibc_floor() {
	local dir pkg x f od vers newest n=0
	for dir in "$@"; do
		for pkg in "$dir"/*.deb "$dir"/*.rpm; do
			x=$(mktemp -d "$WORK/unpack.XXXXXX")
			case $pkg in
			*.deb) dpkg-deb -x "$pkg" "$x" ;;
			# rpm2cpio of Debian's rpm 4.18 exits 1 after writing a whole
			# zstd payload: what cpio unpacks is checked below instead.
			*.rpm) (cd "$x" && { rpm2cpio "$pkg" || true; } | cpio -id --quiet --no-absolute-filenames 2>/dev/null) ;;
			esac
			[ -e "$x/usr/bin" ] || fail "$(basename "$pkg"): nothing under /usr/bin unpacked"
			case $(basename "$pkg") in
			yunion-mps-daemon[-_][0-9]*) [ -f "$x/usr/lib/yunion-mps/libyunion-mps-view.so" ] ||
				fail "$(basename "$pkg"): no /usr/lib/yunion-mps/libyunion-mps-view.so" ;;
			esac
			for f in "$x"/usr/bin/* "$x"/usr/lib/yunion-mps/*.so; do
				[ -e "$f" ] || continue
				od=$(objdump_for "$f")
				if ! vers=$("$od" -T "$f" 2>&1); then
					case $vers in
					*"not a dynamic object"*) vers= ;;
					*) fail "$od -T $f ($(basename "$pkg")): $vers" ;;
					esac
				fi
				vers=$(printf '%s\n' "$vers" | grep -F '*UND*' || true)
				newest=$(printf '%s\n' "$vers" | sed -n 's/.*GLIBC_\([0-9][0-9.]*\).*/\1/p' | sort -uV | tail -n 1)
				if [ -n "$newest" ] && [ "$(printf '%s\n%s\n' "$newest" "$GLIBC_FLOOR" | sort -V | tail -n 1)" != "$GLIBC_FLOOR" ]; then
					fail "$(basename "$pkg"): $(basename "$f") needs GLIBC_$newest (> $GLIBC_FLOOR):"$'\n'"$(printf '%s\n' "$vers" | grep -E "GLIBC_$newest")"
				fi
				note "ok: $(basename "$pkg") $(basename "$f"): $(if [ -n "$newest" ]; then echo "GLIBC_$newest at most"; else echo static; fi)"
				n=$((n + 1))
			done
			rm -rf "$x"
		done
	done
	[ "$n" -gt 0 ] || fail "no binary found in $*"
}

# add_apt_repo ROOT REPO puts the repository REPO (make repo, built with
# REPO_URL=file:///srv/repo) at ROOT/srv/repo and adds it to ROOT's apt as
# docs/packaging.md says: the key in /etc/apt/keyrings, the repository's
# .list file. It becomes the root's only source (no network inside).
add_apt_repo() {
	local root=$1 repo=$2
	rm -rf "$root/srv/repo"
	mkdir -p "$root/srv" "$root/etc/apt/keyrings"
	cp -a "$repo" "$root/srv/repo"
	cp "$repo/yunion-mps.asc" "$root/etc/apt/keyrings/yunion-mps.asc"
	: >"$root/etc/apt/sources.list"
	rm -f "$root"/etc/apt/sources.list.d/*
	cp "$repo/yunion-mps.list" "$root/etc/apt/sources.list.d/yunion-mps.list"
}

# chroot_runbook ROOT: in ROOT (a copy of a cached root of any architecture;
# a foreign one runs under qemu-user through binfmt_misc) with the signed
# repository added (add_apt_repo), the runbook without systemd:
# apt-get install -y yunion-mps-daemon, the inventory and
# `mps-daemon --simulate 8xH100` started by hand, /readyz of the daemon, then
# `mpsctl isolated-device-list`; then apt-get install -y
# yunion-mps-daemon-kubernetes and its `check-config --simulate 8xH100`
# (ROOT/srv/k8s-check has the output). All of it in namespaces of its own: a
# private network (only its loopback: ports 9330 and 9331 are its own), PID
# namespace (every process ends with it) and mounts.
chroot_runbook() {
	local root=$1
	unshare --net --mount --pid --fork --kill-child bash -euo pipefail -c '
		root=$1
		step_note() { printf "   %s\n" "$*"; }
		ip link set lo up
		mount --make-rprivate /
		mount -t proc proc "$root/proc"
		mount -t sysfs sysfs "$root/sys"
		mount --rbind /dev "$root/dev"
		mount -t tmpfs tmpfs "$root/tmp"
		mount -t tmpfs tmpfs "$root/run"
		c() {
			chroot "$root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
				HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
		}
		wait_until() { # what seconds command...
			local what=$1 deadline=$(($(date +%s) + $2))
			shift 2
			until "$@" >/dev/null 2>&1; do
				if [ "$(date +%s)" -ge "$deadline" ]; then
					echo "timed out waiting for: $what" >&2
					tail -n 20 "$root"/tmp/inventory.log "$root"/tmp/daemon.log >&2 || true
					exit 1
				fi
				sleep 0.5
			done
			step_note "ok: $what"
		}
		c apt-get update -qq
		c apt-get install -y -qq yunion-mps-daemon >"$root/tmp/apt.log" 2>&1 || { cat "$root/tmp/apt.log" >&2; exit 1; }
		step_note "installed: $(c dpkg-query -W -f="\${Package} \${Version} \${Architecture}, " yunion-mps-daemon yunion-mps-inventory)"
		step_note "glibc: $(c dpkg-query -W -f="\${Version}" libc6), kernel machine under qemu or not: $(c uname -m)"
		# The view library of this architecture loads on this glibc: a
		# process that preloads it maps it, and the loader says nothing.
		maps=$(c env LD_PRELOAD=/usr/lib/yunion-mps/libyunion-mps-view.so grep -c /libyunion-mps-view.so /proc/self/maps 2>"$root/tmp/preload.err") || true
		if [ "${maps:-0}" -lt 1 ] || [ -s "$root/tmp/preload.err" ]; then
			echo "the view library does not preload here: maps ${maps:-none}; $(cat "$root/tmp/preload.err")" >&2
			exit 1
		fi
		step_note "ok: the view library preloads on this glibc ($maps mappings)"
		c mkdir -p /var/lib/yunion-mps
		c sh -c "exec mps-inventory serve --listen 127.0.0.1:9330 --db /var/lib/yunion-mps/inventory.db >/tmp/inventory.log 2>&1" &
		wait_until "the inventory wrote its admin token" 120 test -s "$root/var/lib/yunion-mps/admin.token"
		c sh -c "exec mps-daemon --config /etc/yunion/host.conf --simulate 8xH100 >/tmp/daemon.log 2>&1" &
		wait_until "mps-daemon --simulate ready (GET /readyz: 200)" 180 curl -fsS --max-time 5 http://127.0.0.1:9331/readyz
		c mpsctl isolated-device-list --limit 2048 | tee "$root/tmp/list" | sed "s/^/   | /"
		grep -c NVIDIA_MPS "$root/tmp/list" >"$root/srv/devices" || true
		# The Kubernetes build, from the same repository: its check-config
		# validates the same files against the simulated GPUs.
		c apt-get install -y -qq yunion-mps-daemon-kubernetes >"$root/tmp/apt.log" 2>&1 || { cat "$root/tmp/apt.log" >&2; exit 1; }
		step_note "installed: $(c dpkg-query -W -f="\${Package} \${Version} \${Architecture}" yunion-mps-daemon-kubernetes)"
		c mps-daemon check-config --simulate 8xH100 >"$root/srv/check" 2>"$root/tmp/check.err" ||
			{ cat "$root/srv/check" "$root/tmp/check.err" >&2; exit 1; }
		c mps-daemon-kubernetes check-config --simulate 8xH100 >"$root/srv/k8s-check" 2>"$root/tmp/k8s-check.err" ||
			{ cat "$root/srv/k8s-check" "$root/tmp/k8s-check.err" >&2; exit 1; }
		step_note "mps-daemon-kubernetes check-config --simulate 8xH100:"
		sed -n "/^PCI ADDRESS/,/virtual devices/p" "$root/srv/k8s-check" | sed "s/^/   | /"
	' _ "$root"
}
