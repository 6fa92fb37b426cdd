/*
 * The GPUs the stand-ins for libcuda.so.1 and libnvidia-ml.so.1 report
 * (test only): a file, $MPS_FAKE_GPUS or else /run/yunion-mps-fake/gpus
 * (so that a process started with `env -i` finds it too), lines
 *   gpu <UUID> <total bytes> <free bytes>
 *   option procaddr-internal
 * The option makes cuGetProcAddress hand out functions other than the
 * exported ones (same behaviour, other addresses), as a driver may.
 */
#ifndef FAKEGPUS_H
#define FAKEGPUS_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_MAX 8

struct fake_gpu {
	char uuid[96];
	unsigned long long total, free;
};

static struct fake_gpu fake_gpus[FAKE_MAX];
static int fake_count = -1; /* -1: not read */
static int fake_procaddr_internal;

static void fake_read(void)
{
	const char *path = getenv("MPS_FAKE_GPUS");
	char line[256];
	FILE *f;
	int n = 0;

	f = fopen(path && *path ? path : "/run/yunion-mps-fake/gpus", "r");
	if (f) {
		while (n < FAKE_MAX && fgets(line, sizeof line, f)) {
			struct fake_gpu *g = &fake_gpus[n];
			if (sscanf(line, "gpu %95s %llu %llu", g->uuid, &g->total, &g->free) == 3)
				n++;
			else if (strncmp(line, "option procaddr-internal", 24) == 0)
				fake_procaddr_internal = 1;
		}
		fclose(f);
	}
	fake_count = n;
}

/* fake_load: the file read once, whichever thread comes first. */
static int fake_load(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, fake_read);
	return fake_count;
}

#endif
