/*
 * Our versions of the functions that say how much memory a GPU has. Each
 * calls the real one first and changes nothing unless it succeeded and the
 * GPU has a view file: then total is the device's cap and free what the
 * device can still get (viewfile.c). A NULL output the real function
 * accepted stays unwritten.
 *
 * Each is defined under a hidden name and exported under the API's name
 * (an alias), so that ours() and ours_for_cuda() give our own function
 * even in a program that defines one of these names itself.
 *
 * Each answers only once the process has the real library loaded; before
 * that (a program that took our export for the driver's, through a weak
 * reference or dlsym(RTLD_DEFAULT), hook.c) it loads nothing and says the
 * driver is not initialised, which is the truth.
 */
#define _GNU_SOURCE
#include <errno.h>

#include "view.h"

typedef CUresult (*cu_meminfo_v2_fn)(size_t *, size_t *);
typedef CUresult (*cu_meminfo_fn)(unsigned int *, unsigned int *);
typedef CUresult (*cu_totalmem_v2_fn)(size_t *, CUdevice);
typedef CUresult (*cu_totalmem_fn)(unsigned int *, CUdevice);
typedef CUresult (*cu_gpa_fn)(const char *, void **, int, cuuint64_t);
typedef CUresult (*cu_gpa_v2_fn)(const char *, void **, int, cuuint64_t, int *);
typedef CUresult (*cu_ctxgetdevice_fn)(CUdevice *);
typedef CUresult (*cu_getuuid_fn)(CUuuid *, CUdevice);
typedef nvmlReturn_t (*nvml_meminfo_fn)(nvmlDevice_t, nvmlMemory_t *);
typedef nvmlReturn_t (*nvml_meminfo_v2_fn)(nvmlDevice_t, nvmlMemory_v2_t *);
typedef nvmlReturn_t (*nvml_getuuid_fn)(nvmlDevice_t, char *, unsigned int);

/* Returned when a program calls one of our exports without the real
 * library loaded, or when the real library lacks the function. */
#define CUDA_ERROR_NOT_FOUND 500
#define NVML_ERROR_FUNCTION_NOT_FOUND 13

/* missing: what an export answers when its real function f is not there. */
static int missing(enum fn_id f)
{
	if (fn_lib(f) == LIB_CUDA)
		return real_loaded(LIB_CUDA) ? CUDA_ERROR_NOT_FOUND : CUDA_ERROR_NOT_INITIALIZED;
	return real_loaded(LIB_NVML) ? NVML_ERROR_FUNCTION_NOT_FOUND : NVML_ERROR_UNINITIALIZED;
}

static unsigned int sat32(uint64_t x)
{
	return x > 0xffffffffu ? 0xffffffffu : (unsigned int)x;
}

/* cu_view: the view of CUDA device dev, 1 if it has one. */
static int cu_view(CUdevice dev, struct view *v)
{
	cu_getuuid_fn getuuid = real_fn(R_CU_GETUUID_V2);
	CUuuid u;
	char s[48];

	if (!getuuid)
		getuuid = real_fn(R_CU_GETUUID);
	if (!getuuid || getuuid(&u, dev) != CUDA_SUCCESS)
		return 0;
	view_uuid_cuda(&u, s);
	if (!view_read(s, v)) {
		TRACE("no view", s, dev);
		return 0;
	}
	TRACE("view", s, (long long)v->total);
	return 1;
}

/* cu_view_current: the view of the current context's device. */
static int cu_view_current(struct view *v)
{
	cu_ctxgetdevice_fn getdev = real_fn(R_CU_CTXGETDEVICE);
	CUdevice dev;

	if (!getdev || getdev(&dev) != CUDA_SUCCESS) {
		TRACE("no current device", "", 0);
		return 0;
	}
	return cu_view(dev, v);
}

static int nvml_view(nvmlDevice_t dev, struct view *v)
{
	nvml_getuuid_fn getuuid = real_fn(R_NVML_GETUUID);
	char s[96];

	if (!getuuid || getuuid(dev, s, sizeof s) != NVML_SUCCESS)
		return 0;
	s[sizeof s - 1] = 0;
	if (!view_read(s, v)) {
		TRACE("nvml: no view", s, 0);
		return 0;
	}
	TRACE("nvml: view", s, (long long)v->total);
	return 1;
}

HIDDEN CUresult view_cuMemGetInfo_v2(size_t *free, size_t *total)
{
	cu_meminfo_v2_fn real = real_fn(R_CU_MEMGETINFO_V2);
	struct view v;
	CUresult rc;
	int e;

	if (!real)
		return missing(R_CU_MEMGETINFO_V2);
	TRACE("cuMemGetInfo_v2", "", 0);
	rc = real(free, total);
	e = errno;
	if (rc == CUDA_SUCCESS && cu_view_current(&v)) {
		if (total)
			*total = v.total;
		if (free)
			*free = view_free(&v, *free);
	}
	errno = e;
	return rc;
}

HIDDEN CUresult view_cuMemGetInfo(unsigned int *free, unsigned int *total)
{
	cu_meminfo_fn real = real_fn(R_CU_MEMGETINFO);
	struct view v;
	CUresult rc;
	int e;

	if (!real)
		return missing(R_CU_MEMGETINFO);
	TRACE("cuMemGetInfo", "", 0);
	rc = real(free, total);
	e = errno;
	if (rc == CUDA_SUCCESS && cu_view_current(&v)) {
		if (total)
			*total = sat32(v.total);
		if (free)
			*free = sat32(view_free(&v, *free));
	}
	errno = e;
	return rc;
}

HIDDEN CUresult view_cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	cu_totalmem_v2_fn real = real_fn(R_CU_TOTALMEM_V2);
	struct view v;
	CUresult rc;
	int e;

	if (!real)
		return missing(R_CU_TOTALMEM_V2);
	TRACE("cuDeviceTotalMem_v2", "", 0);
	rc = real(bytes, dev);
	e = errno;
	if (rc == CUDA_SUCCESS && bytes && cu_view(dev, &v))
		*bytes = v.total;
	errno = e;
	return rc;
}

HIDDEN CUresult view_cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
	cu_totalmem_fn real = real_fn(R_CU_TOTALMEM);
	struct view v;
	CUresult rc;
	int e;

	if (!real)
		return missing(R_CU_TOTALMEM);
	TRACE("cuDeviceTotalMem", "", 0);
	rc = real(bytes, dev);
	e = errno;
	if (rc == CUDA_SUCCESS && bytes && cu_view(dev, &v))
		*bytes = sat32(v.total);
	errno = e;
	return rc;
}

HIDDEN nvmlReturn_t view_nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *m)
{
	nvml_meminfo_fn real = real_fn(R_NVML_MEMINFO);
	struct view v;
	nvmlReturn_t rc;
	int e;

	if (!real)
		return missing(R_NVML_MEMINFO);
	TRACE("nvmlDeviceGetMemoryInfo", "", 0);
	rc = real(dev, m);
	e = errno;
	if (rc == NVML_SUCCESS && m && nvml_view(dev, &v)) {
		m->total = v.total;
		m->free = view_free(&v, m->free);
		m->used = m->total - m->free;
	}
	errno = e;
	return rc;
}

HIDDEN nvmlReturn_t view_nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, nvmlMemory_v2_t *m)
{
	nvml_meminfo_v2_fn real = real_fn(R_NVML_MEMINFO_V2);
	struct view v;
	nvmlReturn_t rc;
	int e;

	if (!real)
		return missing(R_NVML_MEMINFO_V2);
	TRACE("nvmlDeviceGetMemoryInfo_v2", "", 0);
	rc = real(dev, m);
	e = errno;
	if (rc == NVML_SUCCESS && m && nvml_view(dev, &v)) {
		m->total = v.total;
		m->free = view_free(&v, m->free);
		m->used = m->total - m->free;
		m->reserved = 0;
	}
	errno = e;
	return rc;
}

/* ---- cuGetProcAddress: how the CUDA runtime gets the driver's functions ---- */

/* proc_by_name: the variant of a function a cuGetProcAddress caller gets
 * for cudaVersion ver, by the CUDA version each _v2 came with. */
static enum fn_id proc_by_name(const char *sym, int ver)
{
	if (str_eq(sym, "cuMemGetInfo"))
		return ver >= 3020 ? R_CU_MEMGETINFO_V2 : R_CU_MEMGETINFO;
	if (str_eq(sym, "cuDeviceTotalMem"))
		return ver >= 3020 ? R_CU_TOTALMEM_V2 : R_CU_TOTALMEM;
	if (str_eq(sym, "cuGetProcAddress"))
		return ver >= 12000 ? R_CU_GETPROCADDRESS_V2 : R_CU_GETPROCADDRESS;
	return R_COUNT;
}

/* proc_map: what a cuGetProcAddress caller gets instead of p, the real
 * driver's answer for sym: our function for the variant p is (known by
 * its address); if the driver gave an address other than its export's,
 * ours for the variant the version names (which calls the export, the
 * same function); else p. */
static void *proc_map(const char *sym, void *p, int ver)
{
	void *o = ours_for_cuda(p);
	enum fn_id f;

	TRACE("cuGetProcAddress", sym, ver);
	if (o) {
		TRACE("cuGetProcAddress: ours by address", sym, ver);
		return o;
	}
	f = proc_by_name(sym, ver);
	if (f != R_COUNT && real_fn(f)) {
		TRACE("cuGetProcAddress: ours by name", sym, ver);
		return ours(f);
	}
	return p;
}

HIDDEN CUresult view_cuGetProcAddress_v2(const char *sym, void **pfn, int ver,
					 cuuint64_t flags, int *status)
{
	cu_gpa_v2_fn real = real_fn(R_CU_GETPROCADDRESS_V2);
	CUresult rc;
	int e;

	if (!real)
		return missing(R_CU_GETPROCADDRESS_V2);
	rc = real(sym, pfn, ver, flags, status);
	e = errno;
	if (rc == CUDA_SUCCESS && sym && pfn && *pfn)
		*pfn = proc_map(sym, *pfn, ver);
	errno = e;
	return rc;
}

HIDDEN CUresult view_cuGetProcAddress(const char *sym, void **pfn, int ver, cuuint64_t flags)
{
	cu_gpa_fn real = real_fn(R_CU_GETPROCADDRESS);
	CUresult rc;
	int e;

	if (!real)
		return missing(R_CU_GETPROCADDRESS);
	rc = real(sym, pfn, ver, flags);
	e = errno;
	if (rc == CUDA_SUCCESS && sym && pfn && *pfn)
		*pfn = proc_map(sym, *pfn, ver);
	errno = e;
	return rc;
}

/* ---- the exports ---- */

#define VIEW_ALIAS(id, name, lib) \
	EXPORT __typeof__(view_##name) name __attribute__((alias("view_" #name)));
VIEW_HOOKED(VIEW_ALIAS)

#define VIEW_OURS(id, name, lib) [R_##id] = (void *)view_##name,
static void *const ours_by_id[R_HOOKED] = { VIEW_HOOKED(VIEW_OURS) };

void *ours(enum fn_id f)
{
	return (int)f < R_HOOKED ? ours_by_id[f] : NULL;
}

void *ours_for_cuda(const void *p)
{
	int i;

	if (!p)
		return NULL;
	for (i = 0; i < R_HOOKED; i++)
		if (fn_lib((enum fn_id)i) == LIB_CUDA && real_fn((enum fn_id)i) == p)
			return ours_by_id[i];
	return NULL;
}
