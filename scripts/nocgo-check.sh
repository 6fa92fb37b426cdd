#!/usr/bin/env bash
# scripts/nocgo-check.sh: the module builds and vets with CGO_ENABLED=0
# (cgo stays in pkg/gpu/nvml and pkg/gpu/nvmlsim), checked by compiling only
# what cgo changes. `make nocgo` runs it; `make test` runs it after `make vet`.
#
# Why not `CGO_ENABLED=0 go build ./... && go vet ./...`: that compiles all
# of the module's ~830 packages once more, half of the work Kubernetes'
# and gRPC's packages, which only pkg/dra uses and whose files are the same
# with cgo on or off (docs/testing.md, item 9). Go compiles a package from
# its files, its imports and the flags; with the tags mps-daemon ships with
# (netgo, osusergo) CGO_ENABLED changes only which files build constraints
# select. So:
#
#  1. list every package the module's packages and tests need, with cgo on
#     and with cgo off: its files, its imports and all it depends on;
#  2. a package whose line differs, or that depends on one, is compiled
#     and vetted here with cgo off;
#  3. every other package is the same source with cgo on or off, which
#     `make vet` (go vet -race ./...) and `make unit` compile and vet.
#
# The list is printed, so a change that makes cgo matter to more packages
# shows in the output, and step 2 checks it.
set -euo pipefail

GO=${GO:-go}
TAGS=netgo,osusergo
module=$($GO list -m)

# Everything Go's compile of a package reads, less its flags (the same in
# both lists). Deps is the whole closure: a package whose closure differs
# (the go-nvml packages come with cgo only) differs itself.
fields='{{.ImportPath}}|{{join .GoFiles ","}}|{{join .CgoFiles ","}}|{{join .SFiles ","}}|{{join .CFiles ","}}|{{join .EmbedFiles ","}}|{{join .Imports ","}}|{{join .Deps ","}}|{{with .Error}}{{.}}{{end}}'

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
CGO_ENABLED=1 $GO list -e -deps -test -tags "$TAGS" -f "$fields" ./... | sort >"$tmp/on"
CGO_ENABLED=0 $GO list -e -deps -test -tags "$TAGS" -f "$fields" ./... | sort >"$tmp/off"

# The packages whose line is in one list only.
comm -3 "$tmp/on" "$tmp/off" | sed 's/^\t//' | cut -d'|' -f1 | sort -u >"$tmp/differ"
if [ ! -s "$tmp/differ" ]; then
	echo "nocgo-check: cgo changes no package; nothing to compile" >&2
	exit 1 # the NVML adapter should differ: the listing is broken
fi

# The module's packages (tests included) that differ or depend on one that
# does, named as `go build` names them.
awk -F'|' -v mod="$module" '
	NR == FNR { differ[$1] = 1; next }
	{
		hit = ($1 in differ)
		n = split($8, deps, ",")
		for (i = 1; i <= n && !hit; i++) hit = (deps[i] in differ)
		if (!hit) next
		p = $1
		sub(/ \[.*\]$/, "", p)   # a test variant: "p [p.test]"
		sub(/\.test$/, "", p)    # the test main: "p.test"
		sub(/_test$/, "", p)     # the external test package: "p_test"
		if (p == mod || index(p, mod "/") == 1) print p
	}
' "$tmp/differ" "$tmp/off" | sort -u >"$tmp/check"

echo "nocgo-check: cgo changes $(wc -l <"$tmp/differ") packages:" $(cat "$tmp/differ")
echo "nocgo-check: the module's packages built and vetted with CGO_ENABLED=0:" $(cat "$tmp/check")
mapfile -t pkgs <"$tmp/check"
# go build refuses a package of tests only (tests/e2e); vet compiles and
# checks the tests of all of them.
mapfile -t built < <(CGO_ENABLED=0 $GO list -tags "$TAGS" -f '{{if .GoFiles}}{{.ImportPath}}{{end}}' "${pkgs[@]}")
CGO_ENABLED=0 $GO build -tags "$TAGS" "${built[@]}"
CGO_ENABLED=0 $GO vet -tags "$TAGS" "${pkgs[@]}"
