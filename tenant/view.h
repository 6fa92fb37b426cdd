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
 *
 * The files call downwards only, never back: hook.c (with trampoline.S)
 * calls answer.c and real.c; answer.c calls real.c and viewfile.c; real.c
 * and viewfile.c call lib.c.
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

/* ---- the functions: one declaration ---- */

/* VIEW_HOOKED(X): the functions the library stands in for (exported under
 * these names; answer.c), one X(ID, NAME, LIBRARY) each; VIEW_CALLED(X):
 * the real libraries' other functions it calls. Every list of them in the
 * C (the enum, the names, the exports, ours(), the lookups) is made from
 * these two. */
#define VIEW_HOOKED(X)                                                   \
	X(CU_MEMGETINFO, cuMemGetInfo, CUDA) /* v1: unsigned int */          \
	X(CU_MEMGETINFO_V2, cuMemGetInfo_v2, CUDA)                           \
	X(CU_TOTALMEM, cuDeviceTotalMem, CUDA) /* v1: unsigned int */        \
	X(CU_TOTALMEM_V2, cuDeviceTotalMem_v2, CUDA)                         \
	X(CU_GETPROCADDRESS, cuGetProcAddress, CUDA) /* CUDA 11.3: 4 args */ \
	X(CU_GETPROCADDRESS_V2, cuGetProcAddress_v2, CUDA) /* CUDA 12: 5 */  \
	X(NVML_MEMINFO, nvmlDeviceGetMemoryInfo, NVML)                       \
	X(NVML_MEMINFO_V2, nvmlDeviceGetMemoryInfo_v2, NVML)
#define VIEW_CALLED(X)                           \
	X(CU_CTXGETDEVICE, cuCtxGetDevice, CUDA)     \
	X(CU_GETUUID_V2, cuDeviceGetUuid_v2, CUDA)   \
	X(CU_GETUUID, cuDeviceGetUuid, CUDA)         \
	X(NVML_GETUUID, nvmlDeviceGetUUID, NVML)

#define VIEW_ENUM(id, name, lib) R_##id,
#define VIEW_ONE(id, name, lib) +1
/* fn_id: every real function the library calls; the hooked ones first. */
enum fn_id { VIEW_HOOKED(VIEW_ENUM) VIEW_CALLED(VIEW_ENUM) R_COUNT };
enum { R_HOOKED = 0 VIEW_HOOKED(VIEW_ONE) };

/* The real libraries. */
enum lib { LIB_CUDA, LIB_NVML, LIB_COUNT };

/* ---- real.c: the real functions ---- */

/* fn_name, fn_lib: a real function's name and library. */
HIDDEN const char *fn_name(enum fn_id f);
HIDDEN enum lib fn_lib(enum fn_id f);
/* real_loaded: the real library is loaded in this process (then kept
 * loaded: RTLD_NODELETE). Never loads it. */
HIDDEN int real_loaded(enum lib l);
/* real_fn: the real library's function, resolved once and kept; NULL when
 * the library is not loaded (nothing of ours ever loads it) or has no such
 * function. */
HIDDEN void *real_fn(enum fn_id f);
/* real_index: the hooked function of this name (0 .. R_HOOKED-1), or -1. */
HIDDEN int real_index(const char *name);
/* real_dlsym / real_dlvsym: glibc's own, found in libc.so.6 (glibc 2.34
 * and later) or libdl.so.2 (before) by reading its dynamic symbol table,
 * since our exports hide both names from the dynamic linker; so are
 * dlopen and dlerror (the library needs nothing of libdl.so.2, which an
 * image of glibc 2.34 or later may lack). NULL if not found. */
typedef void *(*dlsym_fn)(void *, const char *);
typedef void *(*dlvsym_fn)(void *, const char *, const char *);
HIDDEN dlsym_fn real_dlsym(void);
HIDDEN dlvsym_fn real_dlvsym(void);

/* ---- answer.c: our versions of the functions ---- */

/* ours: our function for the hooked function f. */
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
