/*
 * What the NVML calls the accounting can poll cost, and how soon NVML
 * shows a client's memory (tests/gpu/probe-escape.sh). NVML through
 * dlopen, no header. Built on the GPU host:
 *   gcc -O2 -o nvml_cost nvml_cost.c -ldl
 *
 *   nvml_cost cost UUID N        N calls of each function, one GPU: wall and
 *                                CPU (user+system) microseconds per call
 *   nvml_cost list UUID          the GPU's MPS clients: "client <pid> <MiB>"
 *   nvml_cost watch UUID S MS    every MS ms for S seconds, each change of
 *                                the MPS clients' memory: "seen <time>
 *                                <pid>:<MiB> ..." (CLOCK_REALTIME seconds)
 *   nvml_cost rss UUID           the resident memory NVML takes in its
 *                                caller (nvmlInit and the calls the daemon
 *                                makes), for the GPU suites' check of the
 *                                daemon's own memory: "nvml_lib <kB> <path>"
 *                                for each file mapped by then that was not
 *                                before dlopen (its pages, its relocated
 *                                data among them), "nvml_anon_kb <kB>" the
 *                                growth of the mappings of no file (heap,
 *                                stack, anonymous), and "nvml_rss_kb <kB>"
 *                                their sum. The files mapped before (the
 *                                program, the loader, and what the daemon
 *                                links: libc, libpthread, libdl) are left
 *                                out: the daemon maps those itself.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

typedef int nvmlReturn_t;
typedef void *nvmlDevice_t;
typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId;
	unsigned int computeInstanceId;
} procInfo;
typedef struct {
	unsigned long long total, free, used;
} memInfo;

static nvmlReturn_t (*nvmlInit)(void);
static nvmlReturn_t (*getHandle)(const char *, nvmlDevice_t *);
static nvmlReturn_t (*getMPS)(nvmlDevice_t, unsigned int *, procInfo *);
static nvmlReturn_t (*getCompute)(nvmlDevice_t, unsigned int *, procInfo *);
static nvmlReturn_t (*getMem)(nvmlDevice_t, memInfo *);

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double cpu(void)
{
	struct rusage r;
	getrusage(RUSAGE_SELF, &r);
	return r.ru_utime.tv_sec + r.ru_utime.tv_usec / 1e6 + r.ru_stime.tv_sec + r.ru_stime.tv_usec / 1e6;
}

static void *sym(void *lib, const char *name)
{
	void *p = dlsym(lib, name);
	if (p == NULL) {
		printf("fail dlsym %s\n", name);
		exit(1);
	}
	return p;
}

static procInfo infos[256];

/* mps lists the MPS clients as go-nvml does: the count first, then the list. */
static int mps(nvmlDevice_t d)
{
	unsigned int n = 0;
	nvmlReturn_t rc = getMPS(d, &n, NULL);
	if (rc != 0 && rc != 7 /* NVML_ERROR_INSUFFICIENT_SIZE */)
		return -rc;
	if (n == 0)
		return 0;
	n = 256;
	rc = getMPS(d, &n, infos);
	return rc == 0 ? (int)n : -rc;
}

static int compute(nvmlDevice_t d)
{
	unsigned int n = 256;
	nvmlReturn_t rc = getCompute(d, &n, infos);
	return rc == 0 ? (int)n : -rc;
}

/* The resident kB of each mapping in /proc/self/smaps, by path (the whole
   rest of its header line: a path may hold spaces; "" for a mapping of no
   file). A header line is told from a field line ("Rss:   4 kB") by its
   form, start-end perms offset dev inode; its line is read whole, however
   long its path. More than MAXMAPS paths is an error, not a silent cut. */
#define MAXMAPS 1024
struct mapped {
	char *path;
	long kb;
};

static int smaps(struct mapped *m)
{
	char *line = NULL;
	size_t cap = 0;
	int n = 0, cur = -1;
	FILE *f = fopen("/proc/self/smaps", "r");
	if (f == NULL)
		return -1;
	while (getline(&line, &cap, f) > 0) {
		unsigned long a, b, off, ino;
		char perms[8];
		int at = -1;
		long kb;
		if (sscanf(line, "%lx-%lx %7s %lx %*x:%*x %lu %n", &a, &b, perms, &off, &ino, &at) == 5 && at > 0) {
			char *path = line + at;
			path[strcspn(path, "\n")] = 0;
			cur = -1;
			for (int i = 0; i < n && cur < 0; i++)
				if (strcmp(m[i].path, path) == 0)
					cur = i;
			if (cur < 0) {
				if (n == MAXMAPS || (m[n].path = strdup(path)) == NULL) {
					n = -1;
					break;
				}
				cur = n++;
				m[cur].kb = 0;
			}
		} else if (cur >= 0 && sscanf(line, "Rss: %ld kB", &kb) == 1)
			m[cur].kb += kb;
	}
	free(line);
	fclose(f);
	return n;
}

/* anonymous: a mapping of no file (the heap, a stack, Go's or malloc's arenas). */
static int anonymous(const char *path)
{
	return path[0] == 0 || (path[0] == '[' && strcmp(path, "[vdso]") != 0 && strcmp(path, "[vvar]") != 0 && strcmp(path, "[vsyscall]") != 0);
}

static long anon_kb(const struct mapped *m, int n)
{
	long kb = 0;
	for (int i = 0; i < n; i++)
		if (anonymous(m[i].path))
			kb += m[i].kb;
	return kb;
}

static struct mapped before[MAXMAPS], after[MAXMAPS];

int main(int argc, char **argv)
{
	/* what the daemon links (readelf -d: libc, libpthread, libdl) is
	   mapped before the snapshot: only what NVML brings is NVML's */
	dlopen("libpthread.so.0", RTLD_NOW | RTLD_GLOBAL);
	dlopen("libdl.so.2", RTLD_NOW | RTLD_GLOBAL);
	int nbefore = smaps(before);
	if (argc < 3) {
		printf("usage: nvml_cost cost UUID N | list UUID | watch UUID S MS | rss UUID\n");
		return 2;
	}
	void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
	if (lib == NULL) {
		printf("fail dlopen %s\n", dlerror());
		return 1;
	}
	nvmlInit = sym(lib, "nvmlInit_v2");
	getHandle = sym(lib, "nvmlDeviceGetHandleByUUID");
	getMPS = sym(lib, "nvmlDeviceGetMPSComputeRunningProcesses_v3");
	getCompute = sym(lib, "nvmlDeviceGetComputeRunningProcesses_v3");
	getMem = sym(lib, "nvmlDeviceGetMemoryInfo");
	if (nvmlInit() != 0) {
		printf("fail nvmlInit\n");
		return 1;
	}
	nvmlDevice_t d;
	if (getHandle(argv[2], &d) != 0) {
		printf("fail nvmlDeviceGetHandleByUUID %s\n", argv[2]);
		return 1;
	}
	if (strcmp(argv[1], "cost") == 0 && argc > 3) {
		int n = atoi(argv[3]);
		const char *names[] = {"nvmlDeviceGetHandleByUUID", "nvmlDeviceGetMPSComputeRunningProcesses_v3 (count, then list)",
				       "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetMemoryInfo"};
		for (int f = 0; f < 4; f++) {
			double w0 = now(), c0 = cpu();
			int last = 0;
			for (int k = 0; k < n; k++) {
				memInfo m;
				nvmlDevice_t h;
				switch (f) {
				case 0: last = -getHandle(argv[2], &h); break;
				case 1: last = mps(d); break;
				case 2: last = compute(d); break;
				case 3: last = -getMem(d, &m); break;
				}
			}
			double w = (now() - w0) / n * 1e6, c = (cpu() - c0) / n * 1e6;
			printf("cost %-62s wall %8.1f us/call, cpu %8.1f us/call (%d calls, last answer %d)\n", names[f], w, c, n, last);
		}
		memInfo m;
		if (getMem(d, &m) == 0)
			printf("memory used %llu MiB of %llu MiB\n", m.used >> 20, m.total >> 20);
		return 0;
	}
	if (strcmp(argv[1], "rss") == 0) {
		memInfo m;
		getMem(d, &m);
		for (int k = 0; k < 10; k++)
			mps(d);
		int nafter = smaps(after);
		if (nbefore < 0 || nafter < 0) {
			printf("fail reading /proc/self/smaps (or more than %d mapped paths)\n", MAXMAPS);
			return 1;
		}
		long libs = 0;
		for (int i = 0; i < nafter; i++) {
			int old = 0;
			for (int j = 0; j < nbefore; j++)
				old |= strcmp(after[i].path, before[j].path) == 0;
			if (!old && after[i].path[0] == '/') {
				printf("nvml_lib %ld %s\n", after[i].kb, after[i].path);
				libs += after[i].kb;
			}
		}
		long anon = anon_kb(after, nafter) - anon_kb(before, nbefore);
		printf("nvml_anon_kb %ld\nnvml_rss_kb %ld\n", anon, libs + anon);
		return 0;
	}
	if (strcmp(argv[1], "list") == 0) {
		int k = mps(d);
		for (int j = 0; j < k; j++)
			printf("client %u %llu\n", infos[j].pid, infos[j].usedGpuMemory >> 20);
		if (k < 0)
			printf("fail nvmlDeviceGetMPSComputeRunningProcesses_v3 %d\n", -k);
		return 0;
	}
	if (strcmp(argv[1], "watch") == 0 && argc > 4) {
		double until = now() + atof(argv[3]);
		int ms = atoi(argv[4]);
		char last[4096] = "", cur[4096];
		while (now() < until) {
			int k = mps(d), len = 0;
			cur[0] = 0;
			for (int j = 0; j < k && len < (int)sizeof cur - 64; j++)
				len += snprintf(cur + len, sizeof cur - len, " %u:%llu", infos[j].pid, infos[j].usedGpuMemory >> 20);
			if (strcmp(cur, last) != 0) {
				printf("seen %.6f%s\n", now(), cur);
				fflush(stdout);
				strcpy(last, cur);
			}
			usleep(ms * 1000);
		}
		return 0;
	}
	printf("usage\n");
	return 2;
}
