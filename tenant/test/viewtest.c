/*
 * viewtest: asks the CUDA driver and NVML how much memory each GPU has,
 * each way real software does, and prints the answers one line per GPU
 * and way (test only; tenant/test/run.sh compares them with what the view
 * library must answer):
 *   cuda <ordinal> <uuid> <way> totalmem= totalmem32= free= total= free32= total32=
 *   nvml <ordinal> <uuid> <way> total= free= used= v2.total= v2.free= v2.used= v2.reserved=
 * (32: the v1 entry points of unsigned int; free/total: cuMemGetInfo with a
 * context of that device current; v2: nvmlDeviceGetMemoryInfo_v2.)
 *
 * viewtest linked          linked against libcuda.so.1 and libnvidia-ml.so.1
 *                          (the binary built with -DLINKED)
 * viewtest dlsym           dlopen + dlsym, as pynvml, nvidia-smi and XLA do
 * viewtest procaddr        cuGetProcAddress as the CUDA runtime gets the
 *                          driver's entry points: dlsym "cuGetProcAddress_v2",
 *                          asked for "cuGetProcAddress" itself, then every
 *                          function, cudaVersion 12000 and 13000, flags 0;
 *                          and the CUDA 11 "cuGetProcAddress"
 * viewtest dlvsym          dlvsym on the libraries' handles
 * viewtest threads N       N threads at once, each a first lookup and call;
 *                          prints the distinct answers
 * viewtest resize NEW DST  the dlsym answers, rename(NEW, DST), again
 * viewtest maps            which of our libraries the process has mapped
 * viewtest probe           what a program asking "is the driver here?"
 *                          learns before it loads libcuda.so.1 and
 *                          libnvidia-ml.so.1 (dlsym(RTLD_DEFAULT) of
 *                          cuMemGetInfo_v2 and nvmlDeviceGetMemoryInfo,
 *                          dlsym on the program's own handle, dlopen(NULL),
 *                          as ctypes.CDLL(None) does, dlvsym(RTLD_DEFAULT)
 *                          of cuMemGetInfo_v2, a weak reference to
 *                          cuMemGetInfo_v2 called), and then after (dlopen
 *                          RTLD_GLOBAL):
 *                          probe before cuda=<null|set> dlerror=<0|1>
 *                            nvml=<null|set> main=<null|set>
 *                            vsym=<null|set> weak=<null|set> weak.rc=<rc>
 *                            loaded=<0|1>
 *                          probe after cuda=... nvml=... main=... weak.rc=<rc>
 *                          (loaded: libcuda.so.1 is in the process; rc -1:
 *                          not called)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef struct { unsigned char bytes[16]; } CUuuid;
typedef unsigned long long cuuint64_t;
typedef void *nvmlDevice_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
#define nvmlMemory_v2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2 << 24)))

struct cuda_api {
	CUresult (*init)(unsigned int);
	CUresult (*count)(int *);
	CUresult (*get)(CUdevice *, int);
	CUresult (*uuid)(CUuuid *, CUdevice);
	CUresult (*ctx_create)(CUcontext *, unsigned int, CUdevice);
	CUresult (*meminfo)(size_t *, size_t *);
	CUresult (*meminfo32)(unsigned int *, unsigned int *);
	CUresult (*totalmem)(size_t *, CUdevice);
	CUresult (*totalmem32)(unsigned int *, CUdevice);
};

struct nvml_api {
	int (*init)(void);
	int (*count)(unsigned int *);
	int (*handle)(unsigned int, nvmlDevice_t *);
	int (*uuid)(nvmlDevice_t, char *, unsigned int);
	int (*meminfo)(nvmlDevice_t, nvmlMemory_t *);
	int (*meminfo_v2)(nvmlDevice_t, nvmlMemory_v2_t *);
};

static int failed;

static void fail(const char *what)
{
	printf("error %s\n", what);
	failed = 1;
}

static void uuid_str(const CUuuid *u, char *s)
{
	const unsigned char *b = u->bytes;

	sprintf(s, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

static void print_cuda(const char *way, const struct cuda_api *a)
{
	int n = 0, i;

	if (!a->init || !a->count || !a->get || !a->uuid || !a->ctx_create || !a->meminfo ||
	    !a->meminfo32 || !a->totalmem || !a->totalmem32) {
		fail("cuda: a function is missing");
		return;
	}
	if (a->init(0) || a->count(&n))
		fail("cuInit");
	for (i = 0; i < n; i++) {
		CUdevice d;
		CUcontext c;
		CUuuid u;
		char s[64];
		size_t tm = 0, f = 0, t = 0;
		unsigned int tm32 = 0, f32 = 0, t32 = 0;
		if (a->get(&d, i) || a->uuid(&u, d) || a->ctx_create(&c, 0, d)) {
			fail("cuda device");
			continue;
		}
		uuid_str(&u, s);
		errno = 4242;
		if (a->totalmem(&tm, d) || a->totalmem32(&tm32, d) || a->meminfo(&f, &t) || a->meminfo32(&f32, &t32))
			fail("cuda memory");
		if (errno != 4242)
			fail("cuda: errno changed");
		printf("cuda %d %s %s totalmem=%zu totalmem32=%u free=%zu total=%zu free32=%u total32=%u\n",
		       i, s, way, tm, tm32, f, t, f32, t32);
	}
}

static void print_nvml(const char *way, const struct nvml_api *a)
{
	unsigned int n = 0, i;

	if (!a->init || !a->count || !a->handle || !a->uuid || !a->meminfo || !a->meminfo_v2) {
		fail("nvml: a function is missing");
		return;
	}
	if (a->init() || a->count(&n))
		fail("nvmlInit");
	for (i = 0; i < n; i++) {
		nvmlDevice_t d;
		char s[96];
		nvmlMemory_t m = { 0, 0, 0 };
		nvmlMemory_v2_t m2 = { nvmlMemory_v2, 0, 0, 0, 0 };
		if (a->handle(i, &d) || a->uuid(d, s, sizeof s)) {
			fail("nvml device");
			continue;
		}
		errno = 4242;
		if (a->meminfo(d, &m) || a->meminfo_v2(d, &m2))
			fail("nvml memory");
		if (errno != 4242)
			fail("nvml: errno changed");
		printf("nvml %u %s %s total=%llu free=%llu used=%llu v2.total=%llu v2.free=%llu v2.used=%llu v2.reserved=%llu\n",
		       i, s, way, m.total, m.free, m.used, m2.total, m2.free, m2.used, m2.reserved);
	}
}

static void *open_lib(const char *name)
{
	void *h = dlopen(name, RTLD_NOW);

	if (!h) {
		printf("error dlopen %s: %s\n", name, dlerror());
		exit(1);
	}
	return h;
}

#define SYM(h, name) dlsym(h, name)

static void cuda_by_dlsym(struct cuda_api *a, void *h)
{
	*(void **)&a->init = SYM(h, "cuInit");
	*(void **)&a->count = SYM(h, "cuDeviceGetCount");
	*(void **)&a->get = SYM(h, "cuDeviceGet");
	*(void **)&a->uuid = SYM(h, "cuDeviceGetUuid");
	*(void **)&a->ctx_create = SYM(h, "cuCtxCreate_v2");
	*(void **)&a->meminfo = SYM(h, "cuMemGetInfo_v2");
	*(void **)&a->meminfo32 = SYM(h, "cuMemGetInfo");
	*(void **)&a->totalmem = SYM(h, "cuDeviceTotalMem_v2");
	*(void **)&a->totalmem32 = SYM(h, "cuDeviceTotalMem");
}

static void nvml_by_dlsym(struct nvml_api *a, void *h)
{
	*(void **)&a->init = SYM(h, "nvmlInit_v2");
	*(void **)&a->count = SYM(h, "nvmlDeviceGetCount_v2");
	*(void **)&a->handle = SYM(h, "nvmlDeviceGetHandleByIndex_v2");
	*(void **)&a->uuid = SYM(h, "nvmlDeviceGetUUID");
	*(void **)&a->meminfo = SYM(h, "nvmlDeviceGetMemoryInfo");
	*(void **)&a->meminfo_v2 = SYM(h, "nvmlDeviceGetMemoryInfo_v2");
}

typedef CUresult (*gpa_v2_fn)(const char *, void **, int, cuuint64_t, int *);
typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t);

/* by_gpa: the CUDA API as the runtime fills its table: each function asked
 * of gpa (or gpa1, CUDA 11's) for cudaVersion ver; the v1 entry points as a
 * caller of CUDA 3.1 would get them. */
static void cuda_by_gpa(struct cuda_api *a, gpa_v2_fn gpa, gpa_fn gpa1, int ver)
{
	static const struct { const char *name; size_t off; int v1; } t[] = {
		{ "cuInit", offsetof(struct cuda_api, init), 0 },
		{ "cuDeviceGetCount", offsetof(struct cuda_api, count), 0 },
		{ "cuDeviceGet", offsetof(struct cuda_api, get), 0 },
		{ "cuDeviceGetUuid", offsetof(struct cuda_api, uuid), 0 },
		{ "cuCtxCreate", offsetof(struct cuda_api, ctx_create), 0 },
		{ "cuMemGetInfo", offsetof(struct cuda_api, meminfo), 0 },
		{ "cuMemGetInfo", offsetof(struct cuda_api, meminfo32), 1 },
		{ "cuDeviceTotalMem", offsetof(struct cuda_api, totalmem), 0 },
		{ "cuDeviceTotalMem", offsetof(struct cuda_api, totalmem32), 1 },
	};
	size_t i;

	for (i = 0; i < sizeof t / sizeof t[0]; i++) {
		void **slot = (void **)((char *)a + t[i].off);
		int v = t[i].v1 ? 3000 : ver, st = -1;
		CUresult rc = gpa ? gpa(t[i].name, slot, v, 0, &st) : gpa1(t[i].name, slot, v, 0);
		if (rc || (gpa && st != 0)) {
			printf("error cuGetProcAddress %s %d: %d\n", t[i].name, v, rc);
			failed = 1;
		}
	}
}

static void procaddr(void)
{
	void *h = open_lib("libcuda.so.1");
	gpa_v2_fn gpa2 = (gpa_v2_fn)dlsym(h, "cuGetProcAddress_v2"), self = NULL;
	gpa_fn gpa1 = (gpa_fn)dlsym(h, "cuGetProcAddress");
	struct cuda_api a;
	int st;

	if (!gpa2 || !gpa1) {
		fail("dlsym cuGetProcAddress");
		return;
	}
	memset(&a, 0, sizeof a);
	cuda_by_gpa(&a, gpa2, NULL, 12000);
	print_cuda("gpa_v2@12000", &a);
	/* The runtime's way: the table's own cuGetProcAddress from itself. */
	if (gpa2("cuGetProcAddress", (void **)&self, 13000, 0, &st) || !self) {
		fail("cuGetProcAddress of itself");
		return;
	}
	memset(&a, 0, sizeof a);
	cuda_by_gpa(&a, self, NULL, 13000);
	print_cuda("gpa_self@13000", &a);
	memset(&a, 0, sizeof a);
	cuda_by_gpa(&a, NULL, gpa1, 11030);
	print_cuda("gpa_v1@11030", &a);
}

static void dlvsym_way(void)
{
	void *h = open_lib("libcuda.so.1"), *n = open_lib("libnvidia-ml.so.1");
	struct cuda_api a;
	struct nvml_api b;

	cuda_by_dlsym(&a, h);
	*(void **)&a.meminfo = dlvsym(h, "cuMemGetInfo_v2", "LIBCUDA_TEST");
	*(void **)&a.totalmem = dlvsym(h, "cuDeviceTotalMem_v2", "LIBCUDA_TEST");
	print_cuda("dlvsym", &a);
	nvml_by_dlsym(&b, n);
	*(void **)&b.meminfo = dlvsym(n, "nvmlDeviceGetMemoryInfo", "LIBNVML_TEST");
	print_nvml("dlvsym", &b);
}

/* ---- threads: first lookups and calls at once ---- */

static pthread_barrier_t barrier;
struct result { size_t free, total, totalmem; unsigned long long nv_total, nv_free; int err; };

static void *thread_main(void *arg)
{
	struct result *r = arg;
	void *h, *n;
	gpa_v2_fn gpa;
	CUresult (*meminfo)(size_t *, size_t *) = NULL;
	CUresult (*totalmem)(size_t *, CUdevice) = NULL;
	CUresult (*init)(unsigned int) = NULL;
	CUresult (*retain)(CUcontext *, CUdevice) = NULL;
	CUresult (*set)(CUcontext) = NULL;
	int (*ninit)(void), (*nhandle)(unsigned int, nvmlDevice_t *), (*nmem)(nvmlDevice_t, nvmlMemory_t *);
	CUcontext c;
	nvmlDevice_t d;
	nvmlMemory_t m;
	int st;

	pthread_barrier_wait(&barrier);
	h = dlopen("libcuda.so.1", RTLD_NOW);
	n = dlopen("libnvidia-ml.so.1", RTLD_NOW);
	gpa = h ? (gpa_v2_fn)dlsym(h, "cuGetProcAddress_v2") : NULL;
	if (!gpa || !n) {
		r->err = 1;
		return NULL;
	}
	gpa("cuMemGetInfo", (void **)&meminfo, 13000, 0, &st);
	gpa("cuDeviceTotalMem", (void **)&totalmem, 13000, 0, &st);
	gpa("cuInit", (void **)&init, 13000, 0, &st);
	gpa("cuDevicePrimaryCtxRetain", (void **)&retain, 13000, 0, &st);
	gpa("cuCtxSetCurrent", (void **)&set, 13000, 0, &st);
	*(void **)&ninit = dlsym(n, "nvmlInit_v2");
	*(void **)&nhandle = dlsym(n, "nvmlDeviceGetHandleByIndex_v2");
	*(void **)&nmem = dlsym(n, "nvmlDeviceGetMemoryInfo");
	if (!meminfo || !totalmem || !init || !retain || !set || !ninit || !nhandle || !nmem ||
	    init(0) || retain(&c, 0) || set(c) || meminfo(&r->free, &r->total) || totalmem(&r->totalmem, 0) ||
	    ninit() || nhandle(0, &d) || nmem(d, &m))
		r->err = 1;
	else
		r->nv_total = m.total, r->nv_free = m.free;
	return NULL;
}

static void threads(int n)
{
	pthread_t t[64];
	struct result r[64];
	int i, j, distinct = 0;

	if (n < 1 || n > 64)
		n = 64;
	memset(r, 0, sizeof r);
	pthread_barrier_init(&barrier, NULL, (unsigned int)n);
	for (i = 0; i < n; i++)
		pthread_create(&t[i], NULL, thread_main, &r[i]);
	for (i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	for (i = 0; i < n; i++) {
		for (j = 0; j < i; j++)
			if (!memcmp(&r[i], &r[j], sizeof r[i]))
				break;
		if (j < i)
			continue;
		distinct++;
		printf("threads err=%d free=%zu total=%zu totalmem=%zu nvml.total=%llu nvml.free=%llu\n",
		       r[i].err, r[i].free, r[i].total, r[i].totalmem, r[i].nv_total, r[i].nv_free);
	}
	printf("threads distinct=%d\n", distinct);
}

static void by_dlsym(void)
{
	struct cuda_api a;
	struct nvml_api b;

	cuda_by_dlsym(&a, open_lib("libcuda.so.1"));
	print_cuda("dlsym", &a);
	nvml_by_dlsym(&b, open_lib("libnvidia-ml.so.1"));
	print_nvml("dlsym", &b);
}

static void maps(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[4096];
	int view = 0, own = 0;

	while (f && fgets(line, sizeof line, f)) {
		view |= strstr(line, "/libyunion-mps-view.so") != NULL;
		own |= strstr(line, "/libown.so") != NULL;
	}
	printf("maps view=%d own=%d\n", view, own);
}

/* A weak reference, as a program that calls the driver only where it
 * finds one: NULL in a process without libcuda.so.1 and without us. */
CUresult cuMemGetInfo_v2(size_t *, size_t *) __attribute__((weak));

static const char *set(const void *p) { return p ? "set" : "null"; }

static void probe(void)
{
	void *c = dlsym(RTLD_DEFAULT, "cuMemGetInfo_v2");
	int err = dlerror() != NULL;
	void *n = dlsym(RTLD_DEFAULT, "nvmlDeviceGetMemoryInfo");
	void *self = dlopen(NULL, RTLD_LAZY);
	void *m = self ? dlsym(self, "cuMemGetInfo_v2") : NULL;
	void *vs = dlvsym(RTLD_DEFAULT, "cuMemGetInfo_v2", "LIBCUDA_TEST");
	size_t f = 0, t = 0;
	int rc = cuMemGetInfo_v2 ? cuMemGetInfo_v2(&f, &t) : -1;
	int loaded = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD) != NULL;
	CUresult (*init)(unsigned int);

	dlerror();
	printf("probe before cuda=%s dlerror=%d nvml=%s main=%s vsym=%s weak=%s weak.rc=%d loaded=%d\n", set(c), err,
	       set(n), set(m), set(vs), set((void *)cuMemGetInfo_v2), rc, loaded);
	if (!dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL) || !dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_GLOBAL)) {
		fail("dlopen");
		return;
	}
	c = dlsym(RTLD_DEFAULT, "cuMemGetInfo_v2");
	n = dlsym(RTLD_DEFAULT, "nvmlDeviceGetMemoryInfo");
	m = self ? dlsym(self, "cuMemGetInfo_v2") : NULL;
	init = (CUresult(*)(unsigned int))dlsym(RTLD_DEFAULT, "cuInit");
	if (!init || init(0)) {
		fail("cuInit");
		return;
	}
	/* Initialised, no context: the real function says so (201). */
	rc = cuMemGetInfo_v2 ? cuMemGetInfo_v2(&f, &t) : -1;
	printf("probe after cuda=%s nvml=%s main=%s weak.rc=%d\n", set(c), set(n), set(m), rc);
}

#ifdef LINKED
CUresult cuInit(unsigned int);
CUresult cuDeviceGetCount(int *);
CUresult cuDeviceGet(CUdevice *, int);
CUresult cuDeviceGetUuid(CUuuid *, CUdevice);
CUresult cuCtxCreate_v2(CUcontext *, unsigned int, CUdevice);
CUresult cuMemGetInfo_v2(size_t *, size_t *);
CUresult cuMemGetInfo(unsigned int *, unsigned int *);
CUresult cuDeviceTotalMem_v2(size_t *, CUdevice);
CUresult cuDeviceTotalMem(unsigned int *, CUdevice);
int nvmlInit_v2(void);
int nvmlDeviceGetCount_v2(unsigned int *);
int nvmlDeviceGetHandleByIndex_v2(unsigned int, nvmlDevice_t *);
int nvmlDeviceGetUUID(nvmlDevice_t, char *, unsigned int);
int nvmlDeviceGetMemoryInfo(nvmlDevice_t, nvmlMemory_t *);
int nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t, nvmlMemory_v2_t *);

static void linked(void)
{
	struct cuda_api a = { cuInit, cuDeviceGetCount, cuDeviceGet, cuDeviceGetUuid, cuCtxCreate_v2,
			      cuMemGetInfo_v2, cuMemGetInfo, cuDeviceTotalMem_v2, cuDeviceTotalMem };
	struct nvml_api b = { nvmlInit_v2, nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2,
			      nvmlDeviceGetUUID, nvmlDeviceGetMemoryInfo, nvmlDeviceGetMemoryInfo_v2 };

	print_cuda("linked", &a);
	print_nvml("linked", &b);
}
#endif

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";

	setvbuf(stdout, NULL, _IOLBF, 0);
#ifdef LINKED
	if (!strcmp(mode, "linked"))
		linked();
	else
#endif
	if (!strcmp(mode, "dlsym"))
		by_dlsym();
	else if (!strcmp(mode, "procaddr"))
		procaddr();
	else if (!strcmp(mode, "dlvsym"))
		dlvsym_way();
	else if (!strcmp(mode, "threads") && argc > 2)
		threads(atoi(argv[2]));
	else if (!strcmp(mode, "resize") && argc > 3) {
		by_dlsym();
		if (rename(argv[2], argv[3]))
			fail("rename");
		by_dlsym();
	} else if (!strcmp(mode, "maps"))
		maps();
	else if (!strcmp(mode, "probe"))
		probe();
	else {
		fprintf(stderr, "usage: viewtest linked|dlsym|procaddr|dlvsym|threads N|resize NEW DST|maps|probe\n");
		return 2;
	}
	return failed;
}
