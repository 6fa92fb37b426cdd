/*
 * libyunion-mps-view.so: the slice's view of its GPU, inside a tenant's
 * process (docs/containers.md, "The view library"). Internal declarations
 * shared by its files; nothing here is exported (-fvisibility=hidden:
 * only what is marked EXPORT, and trampoline.S's dlsym and dlvsym, are).
 *
 * The rules every file keeps: no stdio, no malloc, no locks, no thread
 * library; lazy state is a word written with an atomic store and read with
 * an atomic load, computed again by a thread that finds it empty (every
 * value is the same whoever computes it); errno is as the real function
 * left it; any failure gives the real answer.
 */
#ifndef VIEW_H
#define VIEW_H

#include <stddef.h>
#include <stdint.h>

#define HIDDEN __attribute__((visibility("hidden")))
#define EXPORT __attribute__((visibility("default")))

/* The CUDA driver's and NVML's types, as their ABI has them. */
typedef int CUresult;
typedef int CUdevice;
typedef struct { unsigned char bytes[16]; } CUuuid;
typedef unsigned long long cuuint64_t;
typedef int nvmlReturn_t;
typedef void *nvmlDevice_t;
typedef struct {
	unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
	unsigned int version;
	unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
#define CUDA_SUCCESS 0
#define CUDA_ERROR_NOT_INITIALIZED 3
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1

/* ---- viewfile.c: the view file the daemon writes ---- */

/* The directory the daemon's per-device directories are mounted under
 * (docs/containers.md): <root><GPU UUID>/memory. */
#define VIEW_ROOT "/run/yunion-mps/view/"
#define VIEW_FILE_MAX 4096
/* Longest UUID accepted ("GPU-" and 36, or "MIG-..."; NVML's buffer is 96). */
#define VIEW_UUID_MAX 80

struct view {
	uint64_t total; /* total_bytes: the device's cap */
	uint64_t used;  /* used_bytes: what all its processes hold */
};

/* view_parse: 1 and *v when buf[0..n) is a valid view file, else 0. */
HIDDEN int view_parse(const char *buf, size_t n, struct view *v);
/* view_read: 1 and *v when the view file of the GPU with this UUID exists
 * and is valid, else 0 (the caller then leaves the real answer). */
HIDDEN int view_read(const char *uuid, struct view *v);
/* view_free: what the slice can still get, given the real free memory:
 * min(real_free, total - used), never below 0. */
HIDDEN uint64_t view_free(const struct view *v, uint64_t real_free);
/* view_uuid_cuda: "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" into out
 * (at least 41 bytes). */
HIDDEN void view_uuid_cuda(const CUuuid *u, char *out);

/* ---- real.c: the real functions ---- */

/* Index of every real function the library calls. */
enum fn_id {
	R_CU_MEMGETINFO,      /* cuMemGetInfo (v1: unsigned int) */
	R_CU_MEMGETINFO_V2,   /* cuMemGetInfo_v2 */
	R_CU_TOTALMEM,        /* cuDeviceTotalMem (v1: unsigned int) */
	R_CU_TOTALMEM_V2,     /* cuDeviceTotalMem_v2 */
	R_CU_GETPROCADDRESS,  /* cuGetProcAddress (CUDA 11.3: 4 arguments) */
	R_CU_GETPROCADDRESS_V2, /* cuGetProcAddress_v2 (CUDA 12: 5 arguments) */
	R_CU_CTXGETDEVICE,    /* cuCtxGetDevice */
	R_CU_GETUUID_V2,      /* cuDeviceGetUuid_v2 */
	R_CU_GETUUID,         /* cuDeviceGetUuid */
	R_NVML_MEMINFO,       /* nvmlDeviceGetMemoryInfo */
	R_NVML_MEMINFO_V2,    /* nvmlDeviceGetMemoryInfo_v2 */
	R_NVML_GETUUID,       /* nvmlDeviceGetUUID */
	R_COUNT
};

/* real_fn: the real library's function, resolved once and kept; NULL when
 * there is none. The library is the one already loaded, else (load != 0)
 * loaded now. */
HIDDEN void *real_fn(enum fn_id f, int load);
/* real_index: the real function our export of this name stands for (only
 * our exported names), or -1. */
HIDDEN int real_index(const char *name);
/* real_dlsym / real_dlvsym: glibc's own, found in libc.so.6 (glibc 2.34
 * and later) or libdl.so.2 (before) by reading its dynamic symbol table,
 * since our exports hide both names from the dynamic linker. NULL if not
 * found. */
typedef void *(*dlsym_fn)(void *, const char *);
typedef void *(*dlvsym_fn)(void *, const char *, const char *);
HIDDEN dlsym_fn real_dlsym(void);
HIDDEN dlvsym_fn real_dlvsym(void);

/* ---- answer.c: our versions of the functions ---- */

/* ours: our function for the real function f (only the hooked ones). */
HIDDEN void *ours(enum fn_id f);
/* ours_for_cuda: our function standing for p when p is one of the real
 * CUDA driver's functions we stand in for, else NULL. */
HIDDEN void *ours_for_cuda(const void *p);

/* ---- lib.c: small helpers without libc ---- */
HIDDEN int str_eq(const char *a, const char *b);

/* TRACE(what, s, n): a line on stderr, only in a library built with
 * -DVIEW_TRACE (tests/gpu/view-probe.sh, to see what the CUDA runtime
 * asks); the shipped library has none. */
#ifdef VIEW_TRACE
HIDDEN void view_trace(const char *what, const char *s, long long n);
#define TRACE(what, s, n) view_trace(what, s, n)
#else
#define TRACE(what, s, n) ((void)0)
#endif

#endif
