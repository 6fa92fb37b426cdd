#!/bin/sh
# stubs.sh OUT CC [FLOOR]: link stubs of the glibc symbol set at FLOOR
# (default 2.17), made from the C toolchain's own glibc, for `make build`.
#
# cgo learns which symbol versions a package imports from a test link of its
# C objects (the dynamic imports it hands Go's internal linker, which writes
# exactly those into the binary). Linked against the stubs in OUT instead of
# the real libc, every libc function resolves to the version a glibc FLOOR
# toolchain would have chosen: the newest version at or below FLOOR of that
# symbol (glibc keeps every old version, so the real libc lists them all). A
# function newer than FLOOR is not in the stubs: the test link fails and the
# build stops ("external linking required"). docs/packaging.md has the why.
#
# OUT gets libc.so.6 (and libc.so), plus empty libpthread.so.0 and libdl.so.2,
# so that the binary names them too: below glibc 2.34, pthread_create, dlopen
# and friends live there, not in libc.so.6.
set -eu
out=$1 cc=$2 floor=${3:-2.17}
libc=$($cc -print-file-name=libc.so.6)
[ -f "$libc" ] || { echo "stubs.sh: $cc has no libc.so.6 ($libc)" >&2; exit 1; }
rm -rf "$out.tmp"
mkdir -p "$out.tmp"

# objdump -T: VALUE FLAGS... TYPE SECTION SIZE [(]VERSION[)] NAME; one line
# per version of a symbol, hidden (old) versions in parentheses; TYPE is DF
# (function), DO (data) or iD (ifunc). Plain POSIX awk (mawk or gawk).
objdump -T "$libc" | awk -v floor="$floor" -v dir="$out.tmp" '
function le(a, b,   x, y, n, i) { # version a <= version b
	n = split(a, x, "."); split(b, y, ".")
	for (i = 1; i <= n || i in y; i++) {
		if ((x[i] + 0) < (y[i] + 0)) return 1
		if ((x[i] + 0) > (y[i] + 0)) return 0
	}
	return 1
}
{
	for (k = 1; k <= NF && $k !~ /^(D[FO]|iD)$/; k++) ;
	if (k > NF || $(k + 1) == "*UND*" || $(k + 1) == "*ABS*") next
	ver = $(k + 3); gsub(/[()]/, "", ver)
	if (ver !~ /^GLIBC_[0-9.]+$/) next
	v = substr(ver, 7)
	if (!le(v, floor)) next
	name = $(k + 4)
	if (!(name in best) || le(best[name], v)) {
		best[name] = v; kind[name] = $k; size[name] = "0x" $(k + 2)
	}
}
END {
	s = dir "/libc.s"; m = dir "/libc.map"
	for (name in best) {
		if (kind[name] != "DO") { # DF, or iD: an ifunc
			printf ".text\n.globl %s\n.type %s, %%function\n%s:\n\tret\n", name, name, name > s
		} else {
			printf ".data\n.globl %s\n.type %s, %%object\n.size %s, %s\n%s:\n\t.zero %s\n", name, name, name, size[name], name, (size[name] ~ /^0x0+$/ ? 1 : size[name]) > s
		}
		syms[best[name]] = syms[best[name]] "\t" name ";\n"
		vers[best[name]] = 1
	}
	# Version nodes, oldest first, each one global list; everything else local.
	n = 0
	for (v in vers) order[++n] = v
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (!le(order[i], order[j])) { t = order[i]; order[i] = order[j]; order[j] = t }
	for (i = 1; i <= n; i++) printf "GLIBC_%s {\n  global:\n%s%s};\n", order[i], syms[order[i]], (i == 1 ? "  local: *;\n" : "") > m
}'
[ -s "$out.tmp/libc.s" ] || { echo "stubs.sh: no GLIBC_ symbol at or below $floor in $libc" >&2; exit 1; }

$cc -shared -nostdlib -o "$out.tmp/libc.so.6" -Wl,-soname,libc.so.6 \
	-Wl,--version-script="$out.tmp/libc.map" "$out.tmp/libc.s"
ln -s libc.so.6 "$out.tmp/libc.so"
: >"$out.tmp/empty.s"
for lib in libpthread.so.0 libdl.so.2; do
	$cc -shared -nostdlib -o "$out.tmp/$lib" -Wl,-soname,"$lib" "$out.tmp/empty.s"
	ln -s "$lib" "$out.tmp/${lib%.so.*}.so"
done
rm -rf "$out"
mv "$out.tmp" "$out"
