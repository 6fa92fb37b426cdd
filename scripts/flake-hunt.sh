#!/usr/bin/env bash
# scripts/flake-hunt.sh: issue 20's hunt for flaky tests, as a script.
#
#   scripts/flake-hunt.sh record RUN.json        # the whole module once, as `make unit` runs it, go test -json into RUN.json
#   scripts/flake-hunt.sh slowest RUN.json [N]   # the N (20) slowest top-level tests of RUN.json: seconds, package, test
#   scripts/flake-hunt.sh repeat RUN.json [N] [COUNT] [OUT]
#                                                # each of them COUNT (20) times with -race, one go test per package;
#                                                # the go test -json of each package in OUT (flake-hunt.out), and a
#                                                # table of passes and failures per test on standard output;
#                                                # FLAKE_SKIP (an extended regexp) leaves out the tests it matches
#
# Run it at the module's root after `. scripts/ci-env.sh` (as CI runs the
# tests: PostgreSQL, promtool, Cloudpods, MPS_REQUIRE_*). docs/testing.md
# has what it found.
set -euo pipefail

usage() {
	sed -n '2,13p' "$0" >&2
	exit 2
}

slow_pkgs() {
	make -s --no-print-directory -f Makefile print-slow-pkgs 2>/dev/null || true
}

# slowest prints "elapsed package test" for the N slowest passed or failed
# top-level tests (a subtest's time is inside its parent's).
slowest() {
	local json=$1 n=$2
	jq -r 'select(.Test != null and (.Test | contains("/") | not) and (.Action == "pass" or .Action == "fail"))
		| "\(.Elapsed) \(.Package) \(.Test)"' "$json" | sort -rn | head -n "$n"
}

cmd=${1:-}
case "$cmd" in
record)
	[ $# -eq 2 ] || usage
	# shellcheck disable=SC2046
	go test -json -race -count=1 -timeout 30m $(slow_pkgs) ./... >"$2" || true
	jq -r 'select(.Test != null and .Action == "fail") | "FAIL \(.Package) \(.Test)"' "$2"
	;;
slowest)
	[ $# -ge 2 ] || usage
	slowest "$2" "${3:-20}"
	;;
repeat)
	[ $# -ge 2 ] || usage
	json=$2 n=${3:-20} count=${4:-20} out=${5:-flake-hunt.out}
	mkdir -p "$out"
	declare -A tests=()
	while read -r _ pkg test; do
		if [ -n "${FLAKE_SKIP:-}" ] && [[ $test =~ $FLAKE_SKIP ]]; then
			echo "# left out: $pkg $test" >&2
			continue
		fi
		tests[$pkg]+="${tests[$pkg]:+|}$test"
	done < <(slowest "$json" "$n")
	status=0
	for pkg in "${!tests[@]}"; do
		f="$out/$(echo "$pkg" | tr '/.' '__').json"
		start=$(date +%s)
		go test -json -race -count="$count" -timeout 120m -run "^(${tests[$pkg]})\$" "$pkg" >"$f" || status=1
		echo "# $pkg: $(($(date +%s) - start)) s" >&2
	done
	printf '| package | test | runs | passed | failed |\n|---|---|---:|---:|---:|\n'
	cat "$out"/*.json | jq -rs '
		map(select(.Test != null and (.Test | contains("/") | not) and (.Action == "pass" or .Action == "fail")))
		| group_by(.Package + " " + .Test)[]
		| "| \(.[0].Package) | \(.[0].Test) | \(length) | \(map(select(.Action == "pass")) | length) | \(map(select(.Action == "fail")) | length) |"'
	exit $status
	;;
*)
	usage
	;;
esac
