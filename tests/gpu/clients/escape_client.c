/*
 * A light CUDA client for the escape suite (tests/gpu/escape.sh) and its
 * probe (tests/gpu/probe-escape.sh): the driver API through dlopen, no
 * framework and no CUDA header, so it starts in milliseconds and a run of
 * 20 tries x every escape form fits in a few minutes. Built on the GPU
 * host: gcc -O2 -o escape_client escape_client.c -ldl
 *
 *   escape_client [-e NAME=VALUE]... [-b BLOCK_MIB] [-x CROSS_MIB] MODE ...
 *
 *   -e NAME=VALUE  setenv() before cuInit: a variable set in the process's
 *                  own memory, which /proc/<pid>/environ does not show
 *   -b BLOCK_MIB   allocation block (default 256)
 *   -x CROSS_MIB   print "cross <time>" once more than CROSS_MIB is held
 *
 *   alloc MIB [HOLD_S]  cuInit, a context on ordinal 0, MIB in blocks;
 *                       prints "alloc <MiB got> <time>" (all of it) or
 *                       "refused <MiB got> <time>", then holds what it got
 *                       HOLD_S seconds (default 0) and prints "done"
 *   serve               a context, "ready <time>", then one command a line
 *                       on stdin: "a MIB" allocates (all or nothing: "ok
 *                       MIB <time>" or "oom <MiB it could get> <time>"),
 *                       "f" frees ("freed"), "q" quits
 *
 * Every line goes out unbuffered (a killed client leaves what it printed)
 * and starts with what happened; times are CLOCK_REALTIME seconds. The
 * first lines are "pid <getpid()>" and "start <time>", then "init <time>"
 * after cuInit and "ctx <time>" once the context is current. A failed CUDA
 * call prints "fail <call> <error>" and exits 1.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

static CUresult (*cuInit)(unsigned int);
static CUresult (*cuDeviceGet)(int *, int);
static CUresult (*cuDevicePrimaryCtxRetain)(void **, int);
static CUresult (*cuCtxSetCurrent)(void *);
static CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
static CUresult (*cuMemFree)(CUdeviceptr);
static CUresult (*cuGetErrorName)(CUresult, const char **);

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void out(const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (n > (int)sizeof buf - 2)
		n = sizeof buf - 2;
	buf[n++] = '\n';
	if (write(1, buf, n) < 0)
		_exit(2);
}

static void check(const char *call, CUresult rc)
{
	if (rc == 0)
		return;
	const char *name = NULL;
	if (cuGetErrorName == NULL || cuGetErrorName(rc, &name) != 0 || name == NULL)
		name = "CUDA_ERROR_?";
	out("fail %s %s(%d)", call, name, rc);
	exit(1);
}

static void *sym(void *lib, const char *name)
{
	void *p = dlsym(lib, name);
	if (p == NULL) {
		out("fail dlsym %s", name);
		exit(1);
	}
	return p;
}

enum { MAX_BLOCKS = 1 << 16 };
static CUdeviceptr blocks[MAX_BLOCKS];
static int nblocks;

/* take allocates mib in blocks of block MiB; returns the MiB it got. */
static long take(long mib, long block, long cross)
{
	long got = 0;
	int crossed = cross <= 0;
	while (got < mib && nblocks < MAX_BLOCKS) {
		long step = mib - got < block ? mib - got : block;
		if (cuMemAlloc(&blocks[nblocks], (size_t)step << 20) != 0)
			break;
		nblocks++;
		got += step;
		if (!crossed && got > cross) {
			crossed = 1;
			out("cross %.6f", now());
		}
	}
	return got;
}

static void release(void)
{
	while (nblocks > 0)
		cuMemFree(blocks[--nblocks]);
}

int main(int argc, char **argv)
{
	long block = 256, cross = 0;
	int i = 1;
	out("pid %d", (int)getpid());
	out("start %.6f", now());
	for (; i < argc && argv[i][0] == '-'; i += 2) {
		if (i + 1 >= argc) {
			out("fail usage");
			return 2;
		}
		if (strcmp(argv[i], "-e") == 0) {
			char *kv = argv[i + 1], *eq = strchr(kv, '=');
			if (eq == NULL) {
				out("fail usage -e NAME=VALUE");
				return 2;
			}
			*eq = 0;
			setenv(kv, eq + 1, 1);
		} else if (strcmp(argv[i], "-b") == 0) {
			block = atol(argv[i + 1]);
		} else if (strcmp(argv[i], "-x") == 0) {
			cross = atol(argv[i + 1]);
		} else {
			out("fail usage %s", argv[i]);
			return 2;
		}
	}
	if (i >= argc || block <= 0) {
		out("fail usage: escape_client [-e N=V] [-b MIB] [-x MIB] alloc MIB [HOLD_S] | serve");
		return 2;
	}
	void *lib = dlopen("libcuda.so.1", RTLD_NOW);
	if (lib == NULL) {
		out("fail dlopen %s", dlerror());
		return 1;
	}
	cuGetErrorName = sym(lib, "cuGetErrorName");
	cuInit = sym(lib, "cuInit");
	cuDeviceGet = sym(lib, "cuDeviceGet");
	cuDevicePrimaryCtxRetain = sym(lib, "cuDevicePrimaryCtxRetain");
	cuCtxSetCurrent = sym(lib, "cuCtxSetCurrent");
	cuMemAlloc = sym(lib, "cuMemAlloc_v2");
	cuMemFree = sym(lib, "cuMemFree_v2");

	check("cuInit", cuInit(0));
	out("init %.6f", now());
	int dev;
	void *ctx;
	check("cuDeviceGet", cuDeviceGet(&dev, 0));
	check("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain(&ctx, dev));
	check("cuCtxSetCurrent", cuCtxSetCurrent(ctx));
	out("ctx %.6f", now());

	if (strcmp(argv[i], "alloc") == 0 && i + 1 < argc) {
		long mib = atol(argv[i + 1]);
		double hold = i + 2 < argc ? atof(argv[i + 2]) : 0;
		long got = take(mib, block, cross);
		out("%s %ld %.6f", got == mib ? "alloc" : "refused", got, now());
		if (hold > 0)
			usleep((useconds_t)(hold * 1e6));
		out("done");
		return 0;
	}
	if (strcmp(argv[i], "serve") == 0) {
		char line[128];
		out("ready %.6f", now());
		while (fgets(line, sizeof line, stdin) != NULL) {
			if (line[0] == 'a') {
				long mib = atol(line + 1);
				long got = take(mib, block, 0);
				if (got == mib) {
					out("ok %ld %.6f", got, now());
				} else {
					release();
					out("oom %ld %.6f", got, now());
				}
			} else if (line[0] == 'f') {
				release();
				out("freed");
			} else if (line[0] == 'q') {
				break;
			}
		}
		release();
		return 0;
	}
	out("fail usage: unknown mode %s", argv[i]);
	return 2;
}
