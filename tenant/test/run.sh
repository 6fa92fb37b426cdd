#!/usr/bin/env bash
# tenant/test/run.sh OUT: the view library's tests (`make test-tenant`, which
# first builds OUT/amd64/libyunion-mps-view.so and OUT/arm64/... with `make
# tenant`). One line per case, PASS or FAIL; exit status 1 on any FAIL.
#
# Runs in a private mount namespace of its own (unshare -m; as root, or
# with a user namespace otherwise): a tmpfs on /run holds the view files
# at the path a container has them (/run/yunion-mps/view/<UUID>/memory) and
# the stand-ins' GPUs (/run/yunion-mps-fake/gpus); the /etc/ld.so.preload
# cases put an overlay on /etc. Nothing outside the namespace changes.
#
# The stand-ins for libcuda.so.1 and libnvidia-ml.so.1 and the programs
# that ask them (viewtest, ctypes_check.py, nexttest) are built here with
# CC_amd64 / CC_arm64; the arm64 ones run under qemu-aarch64-static with
# the cross libc (/usr/aarch64-linux-gnu) where both are installed.
set -euo pipefail
out=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
if [ -z "${VIEWTEST_IN_NS:-}" ]; then
	if [ "$(id -u)" = 0 ]; then ns=(unshare -m --propagation private); else ns=(unshare -r -m --propagation private); fi
	exec env VIEWTEST_IN_NS=1 "${ns[@]}" "$0" "$@"
fi
CC_amd64=${CC_amd64:-x86_64-linux-gnu-gcc}
CC_arm64=${CC_arm64:-aarch64-linux-gnu-gcc}
FLOOR=2.17
W=$(mktemp -d "${TMPDIR:-/tmp}/viewtest.XXXXXX")
trap 'rm -rf "$W"' EXIT
mount -t tmpfs -o mode=755 tmpfs /run
mkdir -p /run/yunion-mps/view /run/yunion-mps/lib /run/yunion-mps-fake

npass=0 nfail=0
pass() { echo "PASS $1"; npass=$((npass + 1)); }
fail() { echo "FAIL $1"; shift; [ $# -eq 0 ] || printf '%s\n' "$@" | sed 's/^/    /'; nfail=$((nfail + 1)); }
# same NAME WANT GOT
same() {
	if [ "$2" = "$3" ]; then pass "$1"; else fail "$1" "$(diff <(echo "$2") <(echo "$3") | grep '^[<>]' | sed 's/^</want/; s/^>/got /')"; fi
}

# ---------------------------------------------------------------- the build
# Test programs: the stand-ins unversioned, as the real libraries are, and a
# copy with a version node (dlvsym, and interposing versioned references).
build_tests() { # build_tests ARCH
	local cc=CC_$1 d=$W/$1
	cc=${!cc}
	mkdir -p "$d/versioned"
	$cc -O2 -Wall -fPIC -shared -fno-ipa-icf -o "$d/libcuda.so.1" -Wl,-soname,libcuda.so.1 "$here/fakecuda.c" -lpthread
	$cc -O2 -Wall -fPIC -shared -o "$d/libnvidia-ml.so.1" -Wl,-soname,libnvidia-ml.so.1 "$here/fakenvml.c" -lpthread
	echo 'LIBCUDA_TEST { global: *; };' >"$d/cuda.map"
	echo 'LIBNVML_TEST { global: *; };' >"$d/nvml.map"
	$cc -O2 -Wall -fPIC -shared -fno-ipa-icf -o "$d/versioned/libcuda.so.1" -Wl,-soname,libcuda.so.1 \
		-Wl,--version-script="$d/cuda.map" "$here/fakecuda.c" -lpthread
	$cc -O2 -Wall -fPIC -shared -o "$d/versioned/libnvidia-ml.so.1" -Wl,-soname,libnvidia-ml.so.1 \
		-Wl,--version-script="$d/nvml.map" "$here/fakenvml.c" -lpthread
	$cc -O2 -Wall -o "$d/viewtest" "$here/viewtest.c" -ldl -lpthread -Wl,-rpath,'$ORIGIN'
	$cc -O2 -Wall -DLINKED -o "$d/viewtest-linked" "$here/viewtest.c" -L"$d" -Wl,--no-as-needed \
		-l:libcuda.so.1 -l:libnvidia-ml.so.1 -ldl -lpthread -Wl,-rpath,'$ORIGIN'
	$cc -O2 -Wall -DLINKED -o "$d/versioned/viewtest-linked" "$here/viewtest.c" -L"$d/versioned" \
		-Wl,--no-as-needed -l:libcuda.so.1 -l:libnvidia-ml.so.1 -ldl -lpthread -Wl,-rpath,'$ORIGIN'
	$cc -O2 -Wall -fPIC -shared -o "$d/libnexta.so" "$here/nexta.c" -Wl,--version-script="$here/next.map" -ldl
	$cc -O2 -Wall -fPIC -shared -o "$d/libnextb.so" "$here/nextb.c" -Wl,--version-script="$here/next.map"
	$cc -O2 -Wall -o "$d/nexttest" "$here/nexttest.c" -L"$d" -Wl,--no-as-needed -lnexta -lnextb -ldl -Wl,-rpath,'$ORIGIN'
	$cc -O2 -Wall -fPIC -shared -o "$d/libown.so" "$here/own.c" -ldl
	# For a root of only libc and the loader (glibc 2.34 and later): the
	# stand-ins and viewtest needing libc.so.6 alone (--as-needed: their
	# libdl and libpthread are libc's there); and the control of that test,
	# a library that needs libdl.so.2 as ours did.
	mkdir -p "$d/min"
	$cc -O2 -Wall -fPIC -shared -fno-ipa-icf -o "$d/min/libcuda.so.1" -Wl,-soname,libcuda.so.1 "$here/fakecuda.c" -Wl,--as-needed -lpthread
	$cc -O2 -Wall -fPIC -shared -o "$d/min/libnvidia-ml.so.1" -Wl,-soname,libnvidia-ml.so.1 "$here/fakenvml.c" -Wl,--as-needed -lpthread
	$cc -O2 -Wall -o "$d/min/viewtest" "$here/viewtest.c" -Wl,--as-needed -ldl -lpthread -Wl,-rpath,/opt/t
	$cc -O2 -fPIC -shared -o "$d/libneedsdl.so" -x c /dev/null -Wl,--no-as-needed -l:libdl.so.2
	# A dlsym hook done wrong (glibc's called from a frame of its own): the
	# control that shows the RTLD_NEXT case can fail.
	$cc -O0 -fno-optimize-sibling-calls -Wall -fPIC -shared -o "$d/libbadhook.so" "$here/own.c" -ldl
}

# ---------------------------------------------------------------- the library's file
check_elf() { # check_elf ARCH
	local lib=$out/$1/libyunion-mps-view.so bad want got
	if [ ! -f "$lib" ]; then fail "$1: $lib exists (make tenant ARCH=$1)"; return; fi
	# objdump -T: every glibc version the library needs (its undefined
	# symbols) at or below the floor. The versions it defines are glibc's
	# names of dlsym and dlvsym (trampoline.S), not requirements.
	bad=$(objdump -T "$lib" | grep -F '*UND*' | grep -o 'GLIBC_[0-9.]*' | sort -u | while read -r v; do
		[ "$(printf '%s\n%s\n' "${v#GLIBC_}" "$FLOOR" | sort -V | tail -1)" = "$FLOOR" ] || echo "$v"; done)
	same "$1: needs no glibc symbol version above GLIBC_$FLOOR (objdump -T)" "" "$bad"
	got=$(objdump -T "$lib" | grep -F '*UND*' | awk '{ print $NF }' | sort | tr '\n' ' ')
	same "$1: uses only dl_iterate_phdr, errno and syscall of libc" \
		"__errno_location dl_iterate_phdr syscall " "$got"
	local base=GLIBC_2.2.5
	[ "$1" = arm64 ] && base=GLIBC_2.17
	want=$(printf '%s\n' cuDeviceTotalMem cuDeviceTotalMem_v2 cuGetProcAddress cuGetProcAddress_v2 \
		cuMemGetInfo cuMemGetInfo_v2 dlsym dlvsym nvmlDeviceGetMemoryInfo nvmlDeviceGetMemoryInfo_v2 |
		sed 's/^/Base /'
		printf '(%s) %s\n' "$base" dlsym "$base" dlvsym GLIBC_2.34 dlsym GLIBC_2.34 dlvsym)
	got=$(objdump -T "$lib" | awk '$2 == "g" && $3 == "DF" { print $(NF-1), $NF }')
	same "$1: exports the hooks unversioned, and dlsym, dlvsym also as glibc's versions" "$(sort <<<"$want")" "$(sort <<<"$got")"
	got=$(readelf -dW "$lib" | grep -E 'RPATH|RUNPATH|TEXTREL' || true)
	same "$1: no rpath, runpath or text relocations" "" "$got"
	got=$(readelf -dW "$lib" | grep -E '\(SONAME\)|\(FLAGS\)|\(NEEDED\)' | awk '{ print $2, $NF }')
	same "$1: soname, needs libc.so.6 alone (no libdl.so.2: readelf -d), bound now" "$(printf '%s\n' '(NEEDED) [libc.so.6]' '(SONAME) [libyunion-mps-view.so]' '(FLAGS) BIND_NOW')" "$got"
	got=$(readelf -lW "$lib" | awk '$1 == "GNU_RELRO" { r = 1 } $1 == "GNU_STACK" { s = $7 } END { print r, s }')
	same "$1: RELRO, stack not executable" "1 RW" "$got"
	got=$(readelf -SW "$lib" | grep -cE '\.debug_|\.symtab|\.comment' || true)
	same "$1: stripped (no debug info, symbol table or .comment: lintian's binary-has-unneeded-section)" 0 "$got"
	got=$(readelf -nW "$lib" | grep -oE 'IBT, SHSTK|BTI, PAC' || true)
	same "$1: marked for CET/BTI" "$([ "$1" = amd64 ] && echo 'IBT, SHSTK' || echo 'BTI, PAC')" "$got"
}

check_reproducible() { # the same bytes from a copy of the source elsewhere
	local cc=CC_$1 stubs=$W/stubs-$1
	cc=${!cc}
	mkdir -p "$W/copy-$1"
	cp -r "$repo/tenant" "$W/copy-$1/"
	"$repo/packaging/glibc/stubs.sh" "$stubs" "$cc" "$FLOOR" >/dev/null
	(cd / && "$W/copy-$1/tenant/build.sh" "$cc" "$stubs" "$W/copy-$1/lib.so")
	if cmp -s "$W/copy-$1/lib.so" "$out/$1/libyunion-mps-view.so"; then
		pass "$1: reproducible (same bytes built from another checkout path)"
	else fail "$1: reproducible (same bytes built from another checkout path)"; fi
}

# The library's files call downwards only (view.h says the order): what
# each object leaves undefined, if another of ours defines it, must be in
# a file below it. No circle.
check_layers() {
	local d=$W/layers f g up got=""
	mkdir -p "$d"
	for f in lib viewfile real answer hook; do
		$CC_amd64 -std=gnu11 -O2 -fPIC -fvisibility=hidden -c -o "$d/$f.o" "$repo/tenant/$f.c" ||
			{ fail "the C files call downwards only: $f.c does not compile"; return; }
	done
	# up F: the files above F, whose symbols F must not use.
	up() { case $1 in lib) echo viewfile real answer hook ;; viewfile) echo real answer hook ;; real) echo answer hook ;; answer) echo hook ;; esac; }
	for f in lib viewfile real answer; do
		for g in $(up $f); do
			got+=$(comm -12 <(nm -u "$d/$f.o" | awk '{ print $2 }' | sort) <(nm --defined-only "$d/$g.o" | awk '{ print $3 }' | sort) | sed "s/^/$f.c uses $g.c's /")
		done
	done
	same "the C files call downwards only (hook, answer, real and viewfile, lib): no circle" "" "$got"
}

# ---------------------------------------------------------------- the GPUs
# Three GPUs of the stand-ins: two H100s (81,559 MiB), one with another
# tenant's load (real free below the slice's), and an H200 with no view.
G=(GPU-4baeae3a-899f-8852-bd11-2e4ce3171eb0 GPU-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0 GPU-11111111-2222-3333-4444-555555555555)
RT=(85520809984 85520809984 150754820096) # real total
RF=(83886080000 2147483648 150000000000)  # real free: 80,000 MiB, 2 GiB, ...
VT=("" "" "") VU=("" "" "")               # the view the library must apply ("": none)
{
	for i in 0 1 2; do echo "gpu ${G[i]} ${RT[i]} ${RF[i]}"; done
} >/run/yunion-mps-fake/gpus

# view I TOTAL USED: a valid view file for GPU I, written as the daemon does.
view() {
	local d=/run/yunion-mps/view/${G[$1]}
	mkdir -p "$d"
	printf 'total_bytes %s\nused_bytes %s\n' "$2" "$3" >"$d/.memory.tmp"
	mv "$d/.memory.tmp" "$d/memory"
	VT[$1]=$2 VU[$1]=$3
}
# bad I: GPU I's view file is about to be made invalid by the caller: expect the real answers.
bad() { rm -rf "/run/yunion-mps/view/${G[$1]}"; mkdir -p "/run/yunion-mps/view/${G[$1]}"; VT[$1]="" VU[$1]=""; }
noview() { rm -rf "/run/yunion-mps/view/${G[$1]}"; VT[$1]="" VU[$1]=""; }

# pad_to SIZE FILE: "pad xxx" lines (an unknown key) appended until FILE
# has SIZE bytes.
pad_to() {
	local left=$(($1 - $(stat -c %s "$2"))) n
	while [ "$left" -gt 0 ]; do
		n=$((left > 75 ? 75 : left))
		if [ $((left - n)) -gt 0 ] && [ $((left - n)) -lt 6 ]; then n=$((n - 6)); fi
		printf 'pad %s\n' "$(printf '%*s' $((n - 5)) '' | tr ' ' x)" >>"$2"
		left=$((left - n))
	done
}
sat32() { if [ "$1" -gt 4294967295 ]; then echo 4294967295; else echo "$1"; fi; }
# expect_cuda WAY / expect_nvml WAY: what viewtest must print for the GPUs as staged.
expect_cuda() {
	local i t f
	for i in 0 1 2; do
		if [ -n "${VT[i]}" ]; then
			t=${VT[i]}
			f=$((VU[i] >= VT[i] ? 0 : VT[i] - VU[i]))
			f=$((RF[i] < f ? RF[i] : f))
		else t=${RT[i]} f=${RF[i]}; fi
		echo "cuda $i ${G[i]} $1 totalmem=$t totalmem32=$(sat32 "$t") free=$f total=$t free32=$(sat32 "$f") total32=$(sat32 "$t")"
	done
}
expect_nvml() {
	local i t f r
	for i in 0 1 2; do
		if [ -n "${VT[i]}" ]; then
			t=${VT[i]}
			f=$((VU[i] >= VT[i] ? 0 : VT[i] - VU[i]))
			f=$((RF[i] < f ? RF[i] : f))
			echo "nvml $i ${G[i]} $1 total=$t free=$f used=$((t - f)) v2.total=$t v2.free=$f v2.used=$((t - f)) v2.reserved=0"
		else
			t=${RT[i]} f=${RF[i]} r=$((RT[i] / 128 < RT[i] - RF[i] ? RT[i] / 128 : RT[i] - RF[i]))
			echo "nvml $i ${G[i]} $1 total=$t free=$f used=$((t - f)) v2.total=$t v2.free=$f v2.used=$((t - f - r)) v2.reserved=$r"
		fi
	done
}
expect_all() { # the output of viewtest dlsym (or linked, ctypes: WAY)
	expect_cuda "$1"
	expect_nvml "$1"
}
expect_procaddr() {
	expect_cuda gpa_v2@12000
	expect_cuda gpa_self@13000
	expect_cuda gpa_v1@11030
}

# vt ARCH ARGS...: viewtest of ARCH with the view library preloaded.
run_arch() { # run_arch ARCH PROGRAM ARGS...
	local a=$1 p=$2
	shift 2
	if [ "$a" = amd64 ]; then "$p" "$@"; else qemu-aarch64-static -L /usr/aarch64-linux-gnu "$p" "$@"; fi
}
vt() { local a=$1; shift; LD_PRELOAD=$out/$a/libyunion-mps-view.so run_arch "$a" "$W/$a/viewtest" "$@" 2>&1; }
vtl() { local a=$1; shift; LD_PRELOAD=$out/$a/libyunion-mps-view.so run_arch "$a" "$W/$a/viewtest-linked" "$@" 2>&1; }

# ways ARCH LABEL: every way, compared with what the staged views say.
ways() {
	local a=$1 l=$2
	same "$a: $l: linked" "$(expect_all linked)" "$(vtl "$a" linked)"
	same "$a: $l: dlopen + dlsym" "$(expect_all dlsym)" "$(vt "$a" dlsym)"
	same "$a: $l: cuGetProcAddress as the CUDA runtime" "$(expect_procaddr)" "$(vt "$a" procaddr)"
}

# ---------------------------------------------------------------- the cases
echo "== the library's file"
for a in amd64 arm64; do check_elf "$a"; done
for a in amd64 arm64; do check_reproducible "$a"; done
check_layers

echo "== the view file's format: the table of cases the daemon's reader is tested against too"
# tenant/test/viewfiles.txt, through the library's own parser (viewfile.c
# linked into tenant/test/viewfiles.c); pkg/view's TestViewFileCases reads
# the same table.
viewfiles() { # viewfiles ARCH
	local cc=CC_$1 line
	cc=${!cc}
	$cc -O2 -Wall -I"$repo/tenant" -o "$W/viewfiles-$1" "$here/viewfiles.c" "$repo/tenant/viewfile.c" "$repo/tenant/lib.c"
	while IFS= read -r line; do
		case $line in
		"ok "*) pass "$1: view file: ${line#ok }" ;;
		*) fail "$1: view file: ${line#FAIL }" ;;
		esac
	done < <(run_arch "$1" "$W/viewfiles-$1" "$here/viewfiles.txt" 2>&1 || echo "FAIL viewfiles exited $?")
}
viewfiles amd64

echo "== build the stand-ins and test programs"
build_tests amd64
arm64_run=
if command -v qemu-aarch64-static >/dev/null && [ -e /usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1 ]; then
	build_tests arm64
	arm64_run=1
else
	echo "SKIP arm64 under qemu: needs qemu-user-static and libc6-dev-arm64-cross"
fi
A=amd64

echo "== without the library: the stand-ins' own answers"
same "no library: dlsym" "$(expect_all dlsym)" "$("$W/$A/viewtest" dlsym 2>&1)"
same "no library: cuGetProcAddress" "$(expect_procaddr)" "$("$W/$A/viewtest" procaddr 2>&1)"

echo "== with view files"
view 0 21378367488 1073741824 # 20,388 MiB, 1 GiB held: free = cap - used
view 1 3221225472 0           # 3 GiB (fits 32 bits), real free 2 GiB below it
ways $A "views on GPUs 0 and 1, none on 2"
same "$A: views: Python ctypes (pynvml's way, cuda-python's way)" "$(expect_all ctypes)" \
	"$(LD_PRELOAD=$out/$A/libyunion-mps-view.so LD_LIBRARY_PATH=$W/$A python3 "$here/ctypes_check.py" 2>&1)"
echo 'option procaddr-internal' >>/run/yunion-mps-fake/gpus
same "$A: views: cuGetProcAddress handing out non-exported addresses" "$(expect_procaddr)" "$(vt $A procaddr)"
sed -i '/^option/d' /run/yunion-mps-fake/gpus
same "$A: views: linked against versioned libraries" "$(expect_all linked)" \
	"$(LD_PRELOAD=$out/$A/libyunion-mps-view.so "$W/$A/versioned/viewtest-linked" linked 2>&1)"
same "$A: views: dlvsym on versioned libraries" "$(expect_all dlvsym)" \
	"$(LD_PRELOAD=$out/$A/libyunion-mps-view.so LD_LIBRARY_PATH=$W/$A/versioned "$W/$A/viewtest" dlvsym 2>&1)"
same "$A: views: an LD_PRELOAD dlsym wrapper before ours (next = dlvsym(RTLD_NEXT, \"dlsym\", glibc's))" \
	"$(expect_all dlsym)" "$(LD_PRELOAD="$W/$A/libown.so $out/$A/libyunion-mps-view.so" "$W/$A/viewtest" dlsym 2>&1)"
view 0 21378367488 30000000000 # used above the cap: free 0
same "$A: used above the cap: free 0" "$(expect_all dlsym)" "$(vt $A dlsym)"
view 0 21378367488 0
same "$A: nothing used: free = cap" "$(expect_all dlsym)" "$(vt $A dlsym)"
{ echo "# a comment-like unknown key"; echo "generation 7"; echo "used_bytes 5"; echo; echo "total_bytes 4096000000  "; } >/run/yunion-mps/view/${G[0]}/memory
VT[0]=4096000000 VU[0]=5
same "$A: keys in any order, unknown keys and blank lines ignored" "$(expect_all dlsym)" "$(vt $A dlsym)"
f=/run/yunion-mps/view/${G[0]}/memory
printf 'total_bytes 1000000000\nused_bytes 0\n' >"$f"
pad_to 4096 "$f"
VT[0]=1000000000 VU[0]=0
same "$A: a file of exactly 4096 bytes is read ($(stat -c %s "$f") bytes)" "$(expect_all dlsym)" "$(vt $A dlsym)"

echo "== bad view files: the real answers (GPU 1 keeps its view)"
badcase() { # badcase LABEL: GPU 0's file as the caller left it
	same "$A: bad view file: $1" "$(expect_all dlsym)" "$(vt $A dlsym)"
}
f=/run/yunion-mps/view/${G[0]}/memory
noview 0; badcase "no directory"
bad 0; badcase "no file"
bad 0; : >"$f"; badcase "empty"
bad 0; mkfifo "$f"; badcase "a FIFO (not opened blocking)"
bad 0; mkdir "$f"; badcase "a directory"
bad 0; ln -s /dev/zero "$f"; badcase "a symlink to /dev/zero"
bad 0; printf 'total_bytes 1000\n' >"$W/elsewhere"; ln -s "$W/elsewhere" "$f"; badcase "a symlink to a valid file"
bad 0; { printf 'total_bytes 1000\n'; head -c 8000 /dev/zero | tr '\0' 'x' | fold -w 70 | sed 's/^/pad /'; } >"$f"; badcase "huge ($(stat -c %s "$f") bytes)"
bad 0; head -c 4097 /dev/zero | tr '\0' '\n' >"$f"; badcase "4097 bytes"
bad 0; head -c 3000 /bin/true >"$f"; badcase "garbage (binary)"
bad 0; printf 'total_bytes 0\nused_bytes 0\n' >"$f"; badcase "total 0"
bad 0; printf 'total_bytes -5\n' >"$f"; badcase "negative total"
bad 0; printf 'total_bytes 1000\nused_bytes -1\n' >"$f"; badcase "negative used"
bad 0; printf 'total_bytes 18446744073709551616\n' >"$f"; badcase "total overflows 64 bits"
bad 0; printf 'total_bytes 99999999999999999999999\n' >"$f"; badcase "total far beyond 64 bits"
bad 0; printf 'used_bytes 5\n' >"$f"; badcase "no total"
bad 0; printf 'total_bytes 1000\ntotal_bytes 2000\n' >"$f"; badcase "total twice"
bad 0; printf 'total_bytes 1000' >"$f"; badcase "no final newline"
bad 0; printf 'total_bytes 0x1000\n' >"$f"; badcase "hexadecimal"
bad 0; printf 'total_bytes 1000abc\n' >"$f"; badcase "trailing garbage in a number"
bad 0; printf 'total_bytes\n' >"$f"; badcase "a key without value"
bad 0; printf 'total_bytes 1000\0\n' >"$f"; badcase "a NUL byte"
bad 0; printf 'total_bytes 1000\nrubbish\n' >"$f"; badcase "a line without value"
bad 0; printf 'total_bytes 1000\n' >"$f"; chmod 000 "$f"
if [ "$(id -u)" != 0 ]; then badcase "unreadable"; fi
noview 0

echo "== a resize: a running process's next query sees the new file"
view 0 21378367488 0
before=$(expect_all dlsym)
d=/run/yunion-mps/view/${G[0]}
printf 'total_bytes 10737418240\nused_bytes 0\n' >"$d/.memory.new"
VT[0]=10737418240 VU[0]=0
same "$A: resize (rename over the file between two queries)" "$before
$(expect_all dlsym)" "$(vt $A resize "$d/.memory.new" "$d/memory")"
same "$A: a new process after the resize" "$(expect_all dlsym)" "$(vt $A dlsym)"

echo "== RTLD_NEXT and RTLD_DEFAULT resolve relative to the caller"
want="main-next=a a-next=b a-vnext=b default=a"
same "$A: RTLD_NEXT without the library (the test's premise)" "$want" "$("$W/$A/nexttest" 2>&1)"
same "$A: RTLD_NEXT with the library preloaded" "$want" "$(LD_PRELOAD=$out/$A/libyunion-mps-view.so "$W/$A/nexttest" 2>&1)"
same "$A: RTLD_NEXT with an image's own dlsym wrapper before ours" "$want" \
	"$(LD_PRELOAD="$W/$A/libown.so $out/$A/libyunion-mps-view.so" "$W/$A/nexttest" 2>&1)"
got=$(LD_PRELOAD=$W/$A/libbadhook.so "$W/$A/nexttest" 2>&1)
if [ "$got" != "$want" ]; then pass "$A: control: a dlsym hook that calls glibc's from its own frame fails the case ($got)"
else fail "$A: control: a dlsym hook that calls glibc's from its own frame fails the case" "got $got"; fi

echo "== threads: first lookups and calls at once"
view 0 21378367488 1073741824
want="threads err=0 free=20304625664 total=21378367488 totalmem=21378367488 nvml.total=21378367488 nvml.free=20304625664
threads distinct=1"
bad=0
for i in $(seq 20); do
	got=$(vt $A threads 32)
	[ "$got" = "$want" ] || { bad=1; break; }
done
if [ $bad = 0 ]; then pass "$A: 32 threads at once, 20 processes: every thread the same, right answer"
else fail "$A: 32 threads at once, 20 processes: every thread the same, right answer" "$got"; fi

echo "== processes that never touch CUDA are unaffected"
unaffected() { # unaffected LABEL PRELOAD-ENV CMD...: same stdout, stderr and status as without
	local l=$1 e=$2 o1 o2 r1 r2
	shift 2
	o1=$("$@" 2>&1) && r1=0 || r1=$?
	o2=$(env $e "$@" 2>&1) && r2=0 || r2=$?
	same "$l: $*" "$r1 $o1" "$r2 $o2"
}
for e in "LD_PRELOAD=$out/$A/libyunion-mps-view.so"; do
	unaffected "$A: preloaded" "$e" /bin/true
	unaffected "$A: preloaded" "$e" /bin/false
	unaffected "$A: preloaded" "$e" sh -c 'echo out; echo err >&2; exit 3'
	unaffected "$A: preloaded" "$e" python3 -c pass
	unaffected "$A: preloaded" "$e" python3 -c 'import ctypes, sys; ctypes.CDLL("libc.so.6"); print(sys.version_info[0]); sys.exit(7)'
	unaffected "$A: preloaded" "$e" ls -l /usr/lib
done

echo "== a probe for the driver before it is loaded is not fooled"
# viewtest probe: dlsym(RTLD_DEFAULT) of our names, dlsym on the program's
# own handle (dlopen(NULL), as Python's ctypes.CDLL(None)), dlvsym in the
# global scope (glibc takes no unversioned definition for it), a weak reference,
# before and after the process loads libcuda.so.1 and libnvidia-ml.so.1.
PROBE_WITHOUT="probe before cuda=null dlerror=1 nvml=null main=null vsym=null weak=null weak.rc=-1 loaded=0
probe after cuda=set nvml=set main=set weak.rc=-1"
PROBE_WITH="probe before cuda=null dlerror=1 nvml=null main=null vsym=null weak=set weak.rc=3 loaded=0
probe after cuda=set nvml=set main=set weak.rc=201"
same "$A: no library: the probe's premise" "$PROBE_WITHOUT" "$("$W/$A/viewtest" probe 2>&1)"
same "$A: before the driver is loaded dlsym(RTLD_DEFAULT) and dlsym(dlopen(NULL)) find none of our names; our export, called through a weak reference, says not initialised (3) and loads nothing; after, the real function answers (201: no context)" \
	"$PROBE_WITH" "$(vt $A probe)"

echo "== through /etc/ld.so.preload, as a container has it"
# An overlay on /etc in a namespace of its own: the preload file holds the
# library's path in a container, as the CDI spec mounts it there.
preload_ns() { # preload_ns CMD...: CMD with /etc/ld.so.preload naming the library
	unshare -m --propagation private sh -c '
		set -e
		mkdir -p "$1/upper" "$1/work"
		mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1/upper,workdir=$1/work" /etc
		echo /run/yunion-mps/lib/libyunion-mps-view.so >/etc/ld.so.preload
		shift
		exec "$@"' sh "/run/etc.$RANDOM" "$@"
}
cp "$out/$A/libyunion-mps-view.so" /run/yunion-mps/lib/
same "$A: /etc/ld.so.preload: env -i" "$(expect_all dlsym)" "$(preload_ns env -i "$W/$A/viewtest" dlsym 2>&1)"
same "$A: /etc/ld.so.preload: env -i, cuGetProcAddress" "$(expect_procaddr)" "$(preload_ns env -i "$W/$A/viewtest" procaddr 2>&1)"
same "$A: /etc/ld.so.preload: its own LD_PRELOAD (a dlsym wrapper)" "$(expect_all dlsym)" \
	"$(preload_ns env LD_PRELOAD="$W/$A/libown.so" "$W/$A/viewtest" dlsym 2>&1)"
same "$A: /etc/ld.so.preload: /proc/PID/maps names the library (the daemon's sign)" "maps view=1 own=1" \
	"$(preload_ns env -i LD_PRELOAD="$W/$A/libown.so" "$W/$A/viewtest" maps 2>&1)"
same "$A: /etc/ld.so.preload: RTLD_NEXT" "main-next=a a-next=b a-vnext=b default=a" "$(preload_ns env -i "$W/$A/nexttest" 2>&1)"
o1=$(/bin/sh -c 'echo out; echo err >&2; exit 3' 2>&1) && r1=0 || r1=$?
o2=$(preload_ns env -i /bin/sh -c 'echo out; echo err >&2; exit 3' 2>&1) && r2=0 || r2=$?
same "$A: /etc/ld.so.preload: a shell that never touches CUDA" "$r1 $o1" "$r2 $o2"
o2=$(preload_ns env -i python3 -c 'print("hi")' 2>&1) && r2=0 || r2=$?
same "$A: /etc/ld.so.preload: python3" "0 hi" "$r2 $o2"

# ---------------------------------------------------------------- an image without libdl.so.2
# A root of nothing but the loader, libc.so.6, the library at its container
# path, /etc/ld.so.preload naming it, a GPU's view file and a few programs:
# what a minimal or distroless image has once the view is mounted (no
# libdl.so.2: nothing lists it after glibc 2.34). Every process must start
# and load the library; the control, a library that needs libdl.so.2, makes
# every process fail there.

# in_root ROOT PATH: PATH inside ROOT with its symbolic links followed
# inside ROOT (a root's links are absolute to itself).
in_root() {
	local r=$1 p=$2 l n=0
	while [ -L "$r$p" ] && [ $n -lt 20 ]; do
		l=$(readlink "$r$p")
		case $l in /*) p=$l ;; *) p=$(dirname "$p")/$l ;; esac
		n=$((n + 1))
	done
	echo "$r$p"
}
# minroot DIR ARCH LIBC LOADER PROGRAM...: the root in DIR; LIBC and LOADER
# the files to copy, each PROGRAM copied to /bin (and the test programs of
# ARCH's min build to /opt/t when glibc is 2.34 or later: NEW=1).
minroot() {
	local r=$1 a=$2 libc=$3 ld=$4 t ldp p
	shift 4
	case $a in
	amd64) t=x86_64-linux-gnu ldp=/lib64/ld-linux-x86-64.so.2 ;;
	arm64) t=aarch64-linux-gnu ldp=/lib/ld-linux-aarch64.so.1 ;;
	esac
	rm -rf "$r"
	mkdir -p "$r/lib/$t" "$r$(dirname $ldp)" "$r/bin" "$r/etc" "$r/proc" "$r/opt/t" \
		"$r/run/yunion-mps/lib" "$r/run/yunion-mps/view/${G[0]}" "$r/run/yunion-mps-fake"
	cp "$libc" "$r/lib/$t/libc.so.6"
	cp "$ld" "$r$ldp"
	for p in "$@"; do cp "$p" "$r/bin/"; done
	cp "$out/$a/libyunion-mps-view.so" "$r/run/yunion-mps/lib/"
	# As the daemon's spec gives a container the library (pkg/view,
	# platform.go): the preload list names it through $PLATFORM and the
	# platform directory, where the host's own platforms link to "..".
	mkdir -p "$r/run/yunion-mps/lib/p"
	case $a in
	amd64) for p in x86_64 haswell xeon_phi; do ln -s .. "$r/run/yunion-mps/lib/p/$p"; done ;;
	arm64) ln -s .. "$r/run/yunion-mps/lib/p/aarch64" ;;
	esac
	echo '/run/yunion-mps/lib/p/$PLATFORM/libyunion-mps-view.so' >"$r/etc/ld.so.preload"
	printf 'total_bytes 21378367488\nused_bytes 1073741824\n' >"$r/run/yunion-mps/view/${G[0]}/memory"
	cp /run/yunion-mps-fake/gpus "$r/run/yunion-mps-fake/"
	if [ "${NEW:-}" = 1 ]; then cp "$W/$a/min/"* "$r/opt/t/"; fi
	if [ "$a" = arm64 ]; then cp "$(command -v qemu-aarch64-static)" "$r/qemu"; fi
	mount -t proc proc "$r/proc" 2>/dev/null || true
}
# inroot ROOT ARCH CMD...: CMD in ROOT (chroot; arm64 under qemu-user).
inroot() {
	local r=$1 a=$2
	shift 2
	if [ "$a" = amd64 ]; then chroot "$r" "$@"; else chroot "$r" /qemu "$@"; fi
}
# nolibdl LABEL ROOT ARCH: the cases in a root minroot made.
nolibdl() {
	local l=$1 r=$2 a=$3 got rc
	same "$l: the root has no libdl.so.2" "" "$(find "$r" -path "$r/proc" -prune -o -name 'libdl*' -print)"
	got=$(inroot "$r" "$a" /bin/echo started 2>&1) && rc=0 || rc=$?
	same "$l: a process starts with the view mounted, named through \$PLATFORM (/bin/echo: output, status, nothing on stderr)" "0 started" "$rc $got"
	if [ -e "$r/proc/self/maps" ]; then
		got=$(inroot "$r" "$a" /bin/cat /proc/self/maps 2>&1 | grep -c '/run/yunion-mps/lib/libyunion-mps-view.so$')
		[ "$got" -gt 0 ] && got=loaded
		same "$l: ...and has the library loaded (/proc/self/maps of cat)" "loaded" "$got"
	fi
	if [ -x "$r/opt/t/viewtest" ]; then
		local -a VT=(21378367488 "" "") VU=(1073741824 "" "")
		same "$l: CUDA and NVML through dlopen + dlsym answer with the view" "$(expect_all dlsym)" "$(inroot "$r" "$a" /opt/t/viewtest dlsym 2>&1)"
	fi
	cp "$W/$a/libneedsdl.so" "$r/run/yunion-mps/lib/libyunion-mps-view.so"
	got=$(inroot "$r" "$a" /bin/echo started 2>&1) && rc=0 || rc=$?
	case "$rc $got" in
	"127 "*libdl.so.2*) pass "$l: control: a library that needs libdl.so.2 stops every process there (status 127)" ;;
	*) fail "$l: control: a library that needs libdl.so.2 stops every process there (status 127)" "got: $rc $got" ;;
	esac
	umount "$r/proc" 2>/dev/null || true
}
echo "== an image without libdl.so.2: $(ldd --version | sed -n 1p), amd64"
NEW=1 minroot "$W/min-amd64" amd64 "$(readlink -f /lib/x86_64-linux-gnu/libc.so.6)" "$(readlink -f /lib64/ld-linux-x86-64.so.2)" \
	"$(readlink -f /bin/echo)" "$(readlink -f /bin/cat)"
nolibdl "amd64, this glibc" "$W/min-amd64" amd64

if [ -n "$arm64_run" ]; then
	echo "== an image without libdl.so.2: the cross glibc, arm64 under qemu-user"
	# Its echo and cat: tiny.c (no arm64 coreutils here).
	A64=/usr/aarch64-linux-gnu/lib
	NEW=1 minroot "$W/min-arm64" arm64 "$(readlink -f $A64/libc.so.6)" "$(readlink -f $A64/ld-linux-aarch64.so.1)"
	$CC_arm64 -O2 -Wall -o "$W/min-arm64/bin/echo" "$here/tiny.c"
	cp "$W/min-arm64/bin/echo" "$W/min-arm64/bin/cat"
	nolibdl "arm64, the cross glibc $(dpkg-query -W -f '${Version}' libc6-arm64-cross 2>/dev/null)" "$W/min-arm64" arm64
fi

if [ -n "$arm64_run" ]; then
	echo "== arm64 under qemu-user"
	A=arm64
	noview 0
	noview 1
	same "$A: no library: dlsym" "$(expect_all dlsym)" "$(run_arch $A "$W/$A/viewtest" dlsym 2>&1)"
	view 0 21378367488 1073741824
	view 1 3221225472 0
	ways $A "views on GPUs 0 and 1, none on 2"
	bad 0; head -c 3000 /bin/true >"/run/yunion-mps/view/${G[0]}/memory"; badcase "garbage"
	bad 0; ln -s /dev/zero "/run/yunion-mps/view/${G[0]}/memory"; badcase "a symlink to /dev/zero"
	same "$A: RTLD_NEXT with the library preloaded" "main-next=a a-next=b a-vnext=b default=a" \
		"$(LD_PRELOAD=$out/$A/libyunion-mps-view.so run_arch $A "$W/$A/nexttest" 2>&1)"
	same "$A: a probe for the driver before it is loaded is not fooled" "$PROBE_WITH" "$(vt $A probe)"
	viewfiles arm64
	view 0 21378367488 1073741824
	got=$(vt $A threads 16)
	same "$A: 16 threads at once" "threads err=0 free=20304625664 total=21378367488 totalmem=21378367488 nvml.total=21378367488 nvml.free=20304625664
threads distinct=1" "$got"
fi

# An older glibc, where dlsym lives in libdl.so.2 (before 2.34):
# VIEWTEST_OLD_GLIBC_ROOT names a root of such a distribution with gcc,
# e.g. `debootstrap --variant=minbase --include=gcc,libc6-dev bullseye DIR`
# (glibc 2.31). The test programs are built there with its gcc; the library
# is the one built here. Its /run and /etc are covered in this namespace
# (tmpfs, overlay): the root is not changed.
if [ -n "${VIEWTEST_OLD_GLIBC_ROOT:-}" ]; then
	O=$VIEWTEST_OLD_GLIBC_ROOT A=amd64
	echo "== $(chroot "$O" ldd --version | sed -n 1p) in $O (chroot)"
	mount -t tmpfs -o mode=755 tmpfs "$O/run"
	mkdir -p "$O/run/t" "$O/run/yunion-mps/view" "$O/run/yunion-mps/lib" "$O/run/yunion-mps-fake" "$O/run/ov/u" "$O/run/ov/w"
	mount -t overlay overlay -o "lowerdir=$O/etc,upperdir=$O/run/ov/u,workdir=$O/run/ov/w" "$O/etc"
	cp "$here"/*.c "$here"/*.h "$here/next.map" "$O/run/t/"
	cp "$out/amd64/libyunion-mps-view.so" "$O/run/yunion-mps/lib/"
	cp /run/yunion-mps-fake/gpus "$O/run/yunion-mps-fake/"
	chroot "$O" sh -ec 'cd /run/t
		gcc -O2 -fPIC -shared -fno-ipa-icf -o libcuda.so.1 -Wl,-soname,libcuda.so.1 fakecuda.c -lpthread
		gcc -O2 -fPIC -shared -o libnvidia-ml.so.1 -Wl,-soname,libnvidia-ml.so.1 fakenvml.c -lpthread
		gcc -O2 -o viewtest viewtest.c -ldl -lpthread -Wl,-rpath,/run/t
		gcc -O2 -DLINKED -o viewtest-linked viewtest.c -L. -Wl,--no-as-needed -l:libcuda.so.1 -l:libnvidia-ml.so.1 -ldl -lpthread -Wl,-rpath,/run/t
		gcc -O2 -fPIC -shared -o libnexta.so nexta.c -Wl,--version-script=next.map -ldl
		gcc -O2 -fPIC -shared -o libnextb.so nextb.c -Wl,--version-script=next.map
		gcc -O2 -o nexttest nexttest.c -L. -Wl,--no-as-needed -lnexta -lnextb -ldl -Wl,-rpath,/run/t
		gcc -O2 -fPIC -shared -o libown.so own.c -ldl'
	old() { chroot "$O" env LD_PRELOAD=/run/yunion-mps/lib/libyunion-mps-view.so "$@" 2>&1; }
	noview 2
	for i in 0 1; do
		mkdir -p "$O/run/yunion-mps/view/${G[i]}"
		printf 'total_bytes %s\nused_bytes %s\n' "${VT[i]}" "${VU[i]}" >"$O/run/yunion-mps/view/${G[i]}/memory"
	done
	same "old glibc: no library: dlsym" "$(VT=("" "" ""); expect_all dlsym)" "$(chroot "$O" /run/t/viewtest dlsym 2>&1)"
	same "old glibc: linked" "$(expect_all linked)" "$(old /run/t/viewtest-linked linked)"
	same "old glibc: dlopen + dlsym" "$(expect_all dlsym)" "$(old /run/t/viewtest dlsym)"
	same "old glibc: cuGetProcAddress as the CUDA runtime" "$(expect_procaddr)" "$(old /run/t/viewtest procaddr)"
	same "old glibc: RTLD_NEXT" "main-next=a a-next=b a-vnext=b default=a" "$(old /run/t/nexttest)"
	same "old glibc: a probe for the driver before it is loaded is not fooled" "$PROBE_WITH" "$(old /run/t/viewtest probe)"
	same "old glibc: an LD_PRELOAD dlsym wrapper before ours" "$(expect_all dlsym)" \
		"$(chroot "$O" env LD_PRELOAD="/run/t/libown.so /run/yunion-mps/lib/libyunion-mps-view.so" /run/t/viewtest dlsym 2>&1)"
	got=$(old /run/t/viewtest threads 32)
	same "old glibc: 32 threads at once" "threads err=0 free=$((VT[0] - VU[0])) total=${VT[0]} totalmem=${VT[0]} nvml.total=${VT[0]} nvml.free=$((VT[0] - VU[0]))
threads distinct=1" "$got"
	echo /run/yunion-mps/lib/libyunion-mps-view.so >"$O/etc/ld.so.preload"
	same "old glibc: /etc/ld.so.preload, env -i" "$(expect_all dlsym)" "$(chroot "$O" env -i /run/t/viewtest dlsym 2>&1)"
	echo "== an image without libdl.so.2: $(chroot "$O" ldd --version | sed -n 1p), amd64"
	minroot "$W/min-old-amd64" amd64 "$(in_root "$O" /lib/x86_64-linux-gnu/libc.so.6)" \
		"$(in_root "$O" /lib64/ld-linux-x86-64.so.2)" "$(in_root "$O" /bin/echo)" "$(in_root "$O" /bin/cat)"
	nolibdl "amd64, old glibc" "$W/min-old-amd64" amd64
else
	echo "SKIP an older glibc (dlsym in libdl.so.2): VIEWTEST_OLD_GLIBC_ROOT names no root"
fi

# The same image of an older arm64 glibc: VIEWTEST_OLD_GLIBC_ROOT_ARM64
# names an arm64 root of such a distribution (.ci/run: the Debian 11 one
# that tests/packaging caches); only its loader, libc, echo and cat are
# used, under qemu-user.
if [ -n "$arm64_run" ] && [ -n "${VIEWTEST_OLD_GLIBC_ROOT_ARM64:-}" ]; then
	O64=$VIEWTEST_OLD_GLIBC_ROOT_ARM64
	echo "== an image without libdl.so.2: arm64 glibc $(basename "$(in_root "$O64" /lib/aarch64-linux-gnu/libc.so.6)") of $O64, under qemu-user"
	minroot "$W/min-old-arm64" arm64 "$(in_root "$O64" /lib/aarch64-linux-gnu/libc.so.6)" \
		"$(in_root "$O64" /lib/ld-linux-aarch64.so.1)" "$(in_root "$O64" /bin/echo)" "$(in_root "$O64" /bin/cat)"
	nolibdl "arm64, old glibc" "$W/min-old-arm64" arm64
else
	echo "SKIP an older arm64 glibc without libdl.so.2: VIEWTEST_OLD_GLIBC_ROOT_ARM64 names no root (or no qemu-user)"
fi

echo "== $npass passed, $nfail failed"
[ "$nfail" = 0 ]
