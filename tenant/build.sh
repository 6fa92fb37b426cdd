#!/bin/sh
# build.sh CC STUBS OUT [CFLAG...]: libyunion-mps-view.so for CC's target
# (x86-64 or aarch64) into OUT, linked against the glibc stubs in STUBS
# (packaging/glibc/stubs.sh: the floor's symbol set), so that it needs
# nothing newer than the floor; `make tenant` runs it. Extra CFLAGs are for
# tests only (the shipped library takes none).
#
# -nostartfiles: the library has no C++ or constructors and needs none of
# the toolchain's crt files, which would also drop the CET/BTI marking;
# -z defs: every symbol it uses is in the stubs, so one newer than the
# floor fails the link; nothing but libc.so.6 is linked (no -ldl: real.c
# finds dlopen and dlerror as it finds dlsym), so it loads in an image that
# has no libdl.so.2; -z noseparate-code: two segments to map (code and
# read-only data, then the writable data) instead of four, which is a
# third of what it adds to every process start (docs/benchmarks.md); -s, no -g and -fno-ident: no paths, dates or
# compiler banner (.comment, which lintian calls an unneeded section) in the
# file, the same bytes from any checkout.
set -eu
cc=$1 stubs=$2 out=$3
shift 3
src=$(cd "$(dirname "$0")" && pwd)
case $($cc -dumpmachine) in
x86_64-*) arch_flags='-fcf-protection=full' base=GLIBC_2.2.5 ;;
aarch64-*) arch_flags='-mbranch-protection=standard -mno-outline-atomics' base=GLIBC_2.17 ;;
*) echo "build.sh: $cc builds for $($cc -dumpmachine): only x86-64 and aarch64" >&2; exit 1 ;;
esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cflags="-std=gnu11 -O2 -fPIC -fvisibility=hidden -fno-stack-protector -fno-plt -fno-ident
	-Wall -Wextra -Werror -Wno-unused-parameter $arch_flags"
for f in viewfile real answer hook lib; do
	# shellcheck disable=SC2086
	$cc $cflags "$@" -c -o "$tmp/$f.o" "$src/$f.c"
done
# shellcheck disable=SC2086
$cc $cflags -c -o "$tmp/trampoline.o" "$src/trampoline.S"
# The version script: the nodes of glibc's own versions of dlsym and
# dlvsym (trampoline.S defines them there too), the architecture's first
# and 2.34. Every export (cuMemGetInfo..., dlsym, dlvsym) stays unversioned
# ("Base"): an unversioned definition answers a reference of any version.
# What is exported is what the C marks EXPORT (-fvisibility=hidden);
# tenant/test/run.sh checks the list.
cat >"$tmp/exports.map" <<MAP
$base { local: view_*; };
GLIBC_2.34 { } $base;
MAP
mkdir -p "$(dirname "$out")"
# shellcheck disable=SC2086
$cc -shared -nostartfiles -o "$out.tmp" "$tmp"/*.o \
	-Wl,--version-script="$tmp/exports.map" -Wl,-soname,libyunion-mps-view.so \
	-Wl,-z,defs -Wl,-z,relro -Wl,-z,now -Wl,-z,noexecstack -Wl,-z,noseparate-code \
	-Wl,--hash-style=gnu -Wl,--build-id=sha1 -L"$stubs" -s
mv "$out.tmp" "$out"
