/*
 * dlsymbench (measurement, not a test; tenant/test/bench.sh): the cost of
 * a dlsym call with and without the view library preloaded, on the paths
 * that are not answered (RTLD_DEFAULT, a handle of libc: what a program
 * loading plugins does) and on one that is (libcuda.so.1's handle, one of
 * our names). Prints nanoseconds per call.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <time.h>

static double ns_per(void *h, const char *name, long n)
{
	struct timespec a, b;
	volatile void *sink;
	long i;

	clock_gettime(CLOCK_MONOTONIC, &a);
	for (i = 0; i < n; i++)
		sink = dlsym(h, name);
	clock_gettime(CLOCK_MONOTONIC, &b);
	(void)sink;
	return ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n;
}

int main(void)
{
	void *libc = dlopen("libc.so.6", RTLD_NOW), *cuda = dlopen("libcuda.so.1", RTLD_NOW);
	long n = 2000000;

	if (!libc || !cuda)
		return 1;
	printf("RTLD_DEFAULT printf %.1f\n", ns_per(RTLD_DEFAULT, "printf", n));
	printf("libc handle, printf %.1f\n", ns_per(libc, "printf", n));
	printf("libcuda handle, cuInit %.1f\n", ns_per(cuda, "cuInit", n));
	printf("libcuda handle, cuMemGetInfo_v2 (answered) %.1f\n", ns_per(cuda, "cuMemGetInfo_v2", n));
	return 0;
}
