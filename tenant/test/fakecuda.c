/*
 * A stand-in for the CUDA driver, libcuda.so.1 (test only): the handful of
 * entry points software uses to ask about memory, with the real ones'
 * signatures and error codes, over the GPUs of fakegpus.h. Contexts are a
 * minimal model: one per device, current per thread.
 */
#include <stddef.h>
#include "fakegpus.h"

typedef int CUresult;
typedef int CUdevice;
typedef struct ctx *CUcontext;
typedef struct { unsigned char bytes[16]; } CUuuid;
typedef unsigned long long cuuint64_t;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_NO_DEVICE 100
#define CUDA_ERROR_INVALID_DEVICE 101
#define CUDA_ERROR_INVALID_CONTEXT 201
#define CUDA_ERROR_NOT_FOUND 500

struct ctx { int dev; };
static struct ctx ctxs[FAKE_MAX];
static __thread struct ctx *current;
static int initialized;

#define API __attribute__((visibility("default")))
/* Each entry point is defined under a hidden name and exported by alias,
 * so that cuGetProcAddress can give the address of its own export, as
 * the real driver does, even with another library's export of the name
 * ahead of it in the process. */
#define EXPORT_AS(impl, name) API __typeof__(impl) name __attribute__((alias(#impl)))

static CUresult init(unsigned int flags)
{
	(void)flags;
	fake_load();
	initialized = 1;
	return CUDA_SUCCESS;
}
EXPORT_AS(init, cuInit);

static CUresult driver_version(int *v)
{
	if (!v)
		return CUDA_ERROR_INVALID_VALUE;
	*v = 13000;
	return CUDA_SUCCESS;
}
EXPORT_AS(driver_version, cuDriverGetVersion);

static CUresult device_count(int *n)
{
	if (!initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!n)
		return CUDA_ERROR_INVALID_VALUE;
	*n = fake_count;
	return CUDA_SUCCESS;
}
EXPORT_AS(device_count, cuDeviceGetCount);

static CUresult device_get(CUdevice *d, int ordinal)
{
	if (!initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!d)
		return CUDA_ERROR_INVALID_VALUE;
	if (ordinal < 0 || ordinal >= fake_count)
		return CUDA_ERROR_INVALID_DEVICE;
	*d = ordinal;
	return CUDA_SUCCESS;
}
EXPORT_AS(device_get, cuDeviceGet);

static int check_dev(CUdevice d)
{
	if (!initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	return d >= 0 && d < fake_count ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static CUresult device_uuid(CUuuid *u, CUdevice d)
{
	const char *s;
	int i = 0, rc = check_dev(d);

	if (rc)
		return rc;
	if (!u)
		return CUDA_ERROR_INVALID_VALUE;
	s = fake_gpus[d].uuid + 4; /* after "GPU-" */
	memset(u, 0, sizeof *u);
	for (; *s && i < 32; s++) {
		int v = hexval(*s);
		if (v < 0)
			continue;
		u->bytes[i / 2] |= (unsigned char)(i % 2 ? v : v << 4);
		i++;
	}
	return CUDA_SUCCESS;
}
EXPORT_AS(device_uuid, cuDeviceGetUuid);
EXPORT_AS(device_uuid, cuDeviceGetUuid_v2);

static CUresult total_mem_v2(size_t *b, CUdevice d)
{
	int rc = check_dev(d);

	if (rc)
		return rc;
	if (!b)
		return CUDA_ERROR_INVALID_VALUE;
	*b = fake_gpus[d].total;
	return CUDA_SUCCESS;
}
EXPORT_AS(total_mem_v2, cuDeviceTotalMem_v2);

static unsigned int sat32(unsigned long long x)
{
	return x > 0xffffffffu ? 0xffffffffu : (unsigned int)x;
}

static CUresult total_mem(unsigned int *b, CUdevice d)
{
	int rc = check_dev(d);

	if (rc)
		return rc;
	if (!b)
		return CUDA_ERROR_INVALID_VALUE;
	*b = sat32(fake_gpus[d].total);
	return CUDA_SUCCESS;
}
EXPORT_AS(total_mem, cuDeviceTotalMem);

static CUresult ctx_create(CUcontext *c, unsigned int flags, CUdevice d)
{
	int rc = check_dev(d);

	(void)flags;
	if (rc)
		return rc;
	if (!c)
		return CUDA_ERROR_INVALID_VALUE;
	ctxs[d].dev = d;
	*c = current = &ctxs[d];
	return CUDA_SUCCESS;
}
EXPORT_AS(ctx_create, cuCtxCreate_v2);

static CUresult primary_retain(CUcontext *c, CUdevice d)
{
	int rc = check_dev(d);

	if (rc)
		return rc;
	if (!c)
		return CUDA_ERROR_INVALID_VALUE;
	ctxs[d].dev = d;
	*c = &ctxs[d];
	return CUDA_SUCCESS;
}
EXPORT_AS(primary_retain, cuDevicePrimaryCtxRetain);

static CUresult ctx_set_current(CUcontext c)
{
	if (!initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	current = c;
	return CUDA_SUCCESS;
}
EXPORT_AS(ctx_set_current, cuCtxSetCurrent);

static CUresult ctx_get_device(CUdevice *d)
{
	if (!initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!current)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!d)
		return CUDA_ERROR_INVALID_VALUE;
	*d = current->dev;
	return CUDA_SUCCESS;
}
EXPORT_AS(ctx_get_device, cuCtxGetDevice);

static CUresult mem_info_v2(size_t *free, size_t *total)
{
	if (!initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!current)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (free)
		*free = fake_gpus[current->dev].free;
	if (total)
		*total = fake_gpus[current->dev].total;
	return CUDA_SUCCESS;
}
EXPORT_AS(mem_info_v2, cuMemGetInfo_v2);

static CUresult mem_info(unsigned int *free, unsigned int *total)
{
	if (!initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!current)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (free)
		*free = sat32(fake_gpus[current->dev].free);
	if (total)
		*total = sat32(fake_gpus[current->dev].total);
	return CUDA_SUCCESS;
}
EXPORT_AS(mem_info, cuMemGetInfo);

/* The "internal" twins procaddr-internal hands out: the same answers at
 * other addresses (noipa: the compiler may not fold them into one). */
__attribute__((noipa)) static CUresult mem_info_v2_internal(size_t *f, size_t *t) { return mem_info_v2(f, t); }
__attribute__((noipa)) static CUresult mem_info_internal(unsigned int *f, unsigned int *t) { return mem_info(f, t); }
__attribute__((noipa)) static CUresult total_mem_v2_internal(size_t *b, CUdevice d) { return total_mem_v2(b, d); }
__attribute__((noipa)) static CUresult total_mem_internal(unsigned int *b, CUdevice d) { return total_mem(b, d); }

static CUresult get_proc_address_v2(const char *sym, void **pfn, int ver, cuuint64_t flags, int *status);
static CUresult get_proc_address(const char *sym, void **pfn, int ver, cuuint64_t flags);
__attribute__((noipa)) static CUresult get_proc_address_v2_internal(const char *s, void **p, int v, cuuint64_t f, int *st) { return get_proc_address_v2(s, p, v, f, st); }

/* The table cuGetProcAddress answers from: a base name, its functions
 * (v1, v2) and the CUDA version from which a caller gets v2. */
static const struct proc {
	const char *name;
	void *v1, *v2, *v1_internal, *v2_internal;
	int v2_since;
} procs[] = {
	{ "cuInit", (void *)init, 0, 0, 0, 0 },
	{ "cuDriverGetVersion", (void *)driver_version, 0, 0, 0, 0 },
	{ "cuDeviceGetCount", (void *)device_count, 0, 0, 0, 0 },
	{ "cuDeviceGet", (void *)device_get, 0, 0, 0, 0 },
	{ "cuDeviceGetUuid", (void *)device_uuid, (void *)device_uuid, 0, 0, 11040 },
	{ "cuDeviceTotalMem", (void *)total_mem, (void *)total_mem_v2, (void *)total_mem_internal, (void *)total_mem_v2_internal, 3020 },
	{ "cuCtxCreate", 0, (void *)ctx_create, 0, 0, 3020 },
	{ "cuDevicePrimaryCtxRetain", (void *)primary_retain, 0, 0, 0, 0 },
	{ "cuCtxSetCurrent", (void *)ctx_set_current, 0, 0, 0, 0 },
	{ "cuCtxGetDevice", (void *)ctx_get_device, 0, 0, 0, 0 },
	{ "cuMemGetInfo", (void *)mem_info, (void *)mem_info_v2, (void *)mem_info_internal, (void *)mem_info_v2_internal, 3020 },
	{ "cuGetProcAddress", (void *)get_proc_address, (void *)get_proc_address_v2, 0, (void *)get_proc_address_v2_internal, 12000 },
};

static CUresult lookup(const char *sym, void **pfn, int ver, int *status)
{
	size_t i;

	if (!sym || !pfn)
		return CUDA_ERROR_INVALID_VALUE;
	*pfn = NULL;
	for (i = 0; i < sizeof procs / sizeof procs[0]; i++) {
		const struct proc *p = &procs[i];
		void *f;
		if (strcmp(p->name, sym) != 0)
			continue;
		if (p->v2 && ver >= p->v2_since)
			f = fake_procaddr_internal && p->v2_internal ? p->v2_internal : p->v2;
		else
			f = fake_procaddr_internal && p->v1_internal ? p->v1_internal : p->v1;
		if (!f) {
			if (status)
				*status = 2; /* CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT */
			return CUDA_ERROR_NOT_FOUND;
		}
		*pfn = f;
		if (status)
			*status = 0; /* CU_GET_PROC_ADDRESS_SUCCESS */
		return CUDA_SUCCESS;
	}
	if (status)
		*status = 1; /* CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND */
	return CUDA_ERROR_NOT_FOUND;
}

static CUresult get_proc_address_v2(const char *sym, void **pfn, int ver, cuuint64_t flags, int *status)
{
	(void)flags;
	fake_load();
	return lookup(sym, pfn, ver, status);
}
EXPORT_AS(get_proc_address_v2, cuGetProcAddress_v2);

static CUresult get_proc_address(const char *sym, void **pfn, int ver, cuuint64_t flags)
{
	(void)flags;
	fake_load();
	return lookup(sym, pfn, ver, NULL);
}
EXPORT_AS(get_proc_address, cuGetProcAddress);
