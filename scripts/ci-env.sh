# shellcheck shell=bash
# scripts/ci-env.sh: the test environment of CI, for .ci/run and for running
# one package the way CI runs it. Source it from bash at the module's root:
#
#   . scripts/ci-env.sh && go test -race -count=1 ./tests/regioncompat
#
# It starts a throwaway PostgreSQL cluster (under /tmp, unix socket only, so
# a cluster the machine already runs is left alone; stopped by an EXIT trap
# of the sourcing shell), gives the tests a role that may create databases,
# puts promtool on PATH (taken out of Debian's prometheus package into a
# cache directory, nothing installed), says that Cloudpods is replayed, and
# exports the MPS_REQUIRE_* switches that turn
# "cannot run here" into a failure instead of a skip. Installing the Debian
# packages is .ci/run's job; this script assumes they are there.

# ci_pg_bin prints the newest /usr/lib/postgresql/<version>/bin holding initdb.
ci_pg_bin() {
	local d best="" bestv=0 v
	for d in /usr/lib/postgresql/*/bin; do
		v=$(basename "$(dirname "$d")")
		if [ -x "$d/initdb" ] && [ "${v%%.*}" -gt "$bestv" ] 2>/dev/null; then
			best=$d bestv=${v%%.*}
		fi
	done
	[ -n "$best" ] && echo "$best"
}

# ci_as_pg runs a command as the postgres user when we are root (PostgreSQL
# refuses to run as root), as ourselves otherwise.
ci_as_pg() {
	if [ "$(id -u)" = 0 ]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

ci_stop_pg() {
	[ -n "${CI_PGDIR:-}" ] || return 0
	ci_as_pg "$CI_PGBIN/pg_ctl" -D "$CI_PGDIR/data" -m fast -w stop >/dev/null 2>&1 || true
	rm -rf "$CI_PGDIR"
	CI_PGDIR=
}

# ci_start_pg starts the cluster on a free port and exports
# MPS_TEST_POSTGRES_DSN and MPS_REQUIRE_POSTGRES=1.
ci_start_pg() {
	CI_PGBIN=$(ci_pg_bin) || { echo "no PostgreSQL binaries under /usr/lib/postgresql" >&2; return 1; }
	CI_PGDIR=$(mktemp -d /tmp/mps-ci-pg.XXXXXX)
	trap ci_stop_pg EXIT
	if [ "$(id -u)" = 0 ]; then
		chown postgres: "$CI_PGDIR"
	fi
	ci_as_pg "$CI_PGBIN/initdb" -D "$CI_PGDIR/data" -U postgres -A trust -E UTF8 --locale=C --no-sync >"$CI_PGDIR/initdb.log" \
		|| { cat "$CI_PGDIR/initdb.log" >&2; return 1; }
	# Throwaway data: no fsync. Room for the tests' pools: every test package
	# runs at once, each store pool holds up to 20 connections. The socket
	# lives in its own directory, so any port number will do (5433 unless
	# CI_PGPORT says otherwise): no TCP listener.
	local port=${CI_PGPORT:-5433}
	ci_as_pg "$CI_PGBIN/pg_ctl" -D "$CI_PGDIR/data" -l "$CI_PGDIR/postgres.log" -w -t 120 start \
		-o "-k $CI_PGDIR -p $port -c listen_addresses='' -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=500 -c shared_buffers=64MB" \
		|| { cat "$CI_PGDIR/postgres.log" >&2; return 1; }
	# A role that is no superuser: the store must work with what an operator
	# would grant it (its own database), the tests need CREATEDB on top.
	ci_as_pg "$CI_PGBIN/psql" -h "$CI_PGDIR" -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 -q \
		-c "CREATE ROLE mps_test LOGIN CREATEDB" -c "CREATE DATABASE mps_test OWNER mps_test" || return 1
	"$CI_PGBIN/postgres" --version
	export MPS_TEST_POSTGRES_DSN="postgres://mps_test@/mps_test?host=$CI_PGDIR&port=$port&sslmode=disable"
	export MPS_REQUIRE_POSTGRES=1
}

# ci_promtool puts promtool on PATH (issue 7: `promtool check
# metrics|rules|config` checks the daemon's and the inventory's /metrics, the
# Grafana dashboard's queries and the example scrape config). Only the binary
# is taken out of Debian's prometheus package (apt-get download + dpkg-deb):
# nothing is installed, no service is created or started, none of its
# dependencies come along; a machine downloads it once.
ci_promtool() {
	if ! command -v promtool >/dev/null; then
		local dir="${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/mps-ci/promtool"
		if [ ! -x "$dir/usr/bin/promtool" ]; then
			mkdir -p "$dir"
			( cd "$dir" && { apt-get download -qq prometheus 2>/dev/null \
				|| { apt-get update -qq && apt-get download -qq prometheus; }; } ) || return 1
			dpkg-deb --fsys-tarfile "$dir"/prometheus_*.deb | tar -x -C "$dir" ./usr/bin/promtool || return 1
			rm -f "$dir"/prometheus_*.deb
		fi
		export PATH="$dir/usr/bin:$PATH"
	fi
	promtool --version 2>&1 | sed -n 1p
	export MPS_REQUIRE_PROMTOOL=1
}

# ci_cloudpods: CI runs no Cloudpods control plane (issue 34). The tests
# against Cloudpods replay what its real keystone, region and climc said
# (tests/cloudpods/recordings); those that need the real ones skip, and make
# test-cloudpods runs them where MPS_CLOUDPODS_DIR names Cloudpods' binaries.
ci_cloudpods() {
	echo "NOTE: Cloudpods is replayed from tests/cloudpods/recordings; the live tests skip (make test-cloudpods runs them where MPS_CLOUDPODS_DIR names Cloudpods' binaries)" >&2
	unset MPS_CLOUDPODS_DIR MPS_REQUIRE_CLOUDPODS
}

ci_start_pg || return 1
ci_promtool || return 1
ci_cloudpods
# The podman tests fail instead of skipping when they cannot run.
export MPS_REQUIRE_PODMAN=1
# So do the tests of Cloudpods' pods on a real containerd (tests/e2e,
# issue 45): `make containerd` builds it (make test does), and a package
# run alone finds it where make puts it.
export MPS_REQUIRE_CONTAINERD=1
MPS_CONTAINERD_BIN=${MPS_CONTAINERD_BIN:-$(make -s --no-print-directory print-containerd-bin)}
export MPS_CONTAINERD_BIN
