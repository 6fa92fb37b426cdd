/*
 * The real functions: glibc's dlsym, dlvsym, dlopen and dlerror, and the
 * CUDA driver's and NVML's functions the library calls or stands in for.
 *
 * dlsym and dlvsym are exported by this library, so any reference to them
 * from here would bind to our own; and a reference to dlopen would make the
 * library need libdl.so.2 (where it is before glibc 2.34), which an image
 * of a later glibc may not have: every process of such an image would then
 * fail to start. So glibc's four are found the way the dynamic linker finds
 * symbols: in the dynamic symbol table of the loaded object whose soname is
 * libc.so.6 (glibc 2.34 and later) or libdl.so.2 (before), through its GNU
 * or SysV hash table. Every version of each name is the same function, so
 * any one found will do. Before 2.34, a process that has not loaded
 * libdl.so.2 has none of them: it has no dlsym to call either, nor the real
 * libcuda or NVML (both need libdl.so.2 there), so nothing is lost.
 *
 * The CUDA and NVML functions come from the real libraries through glibc's
 * dlsym on their handle, which searches that library's own scope: never
 * our exports. A library is only ever found already loaded (RTLD_NOLOAD):
 * nothing here loads libcuda or NVML into a process that had not. Once
 * found it is kept loaded (RTLD_NODELETE), so a pointer kept here never
 * outlives its code.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>

#include "view.h"

/* ---- glibc's dlsym and dlvsym ---- */

struct elf_syms {
	uintptr_t base;
	const ElfW(Sym) *sym;
	const char *str;
	const uint32_t *gnu_hash;
	const uint32_t *hash;
};

/* at: a d_ptr of the dynamic section as an address: glibc relocates most
 * of them in place when it loads an object, but not on every architecture
 * nor for the vDSO. */
static uintptr_t at(uintptr_t base, ElfW(Addr) p)
{
	return p < base ? base + p : p;
}

static uint32_t gnu_hash(const char *s)
{
	uint32_t h = 5381;

	for (; *s; s++)
		h = h * 33 + (unsigned char)*s;
	return h;
}

static uint32_t sysv_hash(const char *s)
{
	uint32_t h = 0, g;

	for (; *s; s++) {
		h = (h << 4) + (unsigned char)*s;
		g = h & 0xf0000000u;
		if (g)
			h ^= g >> 24;
		h &= ~g;
	}
	return h;
}

static void *defined(const struct elf_syms *e, uint32_t i, const char *name)
{
	const ElfW(Sym) *s = &e->sym[i];

	if (s->st_shndx == SHN_UNDEF || ELF64_ST_TYPE(s->st_info) /* the same for ELF32 */ != STT_FUNC ||
	    !str_eq(e->str + s->st_name, name))
		return NULL;
	return (void *)(e->base + s->st_value);
}

static void *elf_lookup(const struct elf_syms *e, const char *name)
{
	void *p;
	uint32_t i;

	if (e->gnu_hash) {
		const uint32_t *g = e->gnu_hash;
		uint32_t nbuckets = g[0], symoffset = g[1], bloom = g[2];
		const uint32_t *buckets, *chain;
		uint32_t h = gnu_hash(name);

		if (nbuckets == 0)
			return NULL;
		buckets = (const uint32_t *)((const ElfW(Addr) *)(g + 4) + bloom);
		chain = buckets + nbuckets;
		i = buckets[h % nbuckets];
		if (i < symoffset)
			return NULL;
		for (;; i++) {
			uint32_t h2 = chain[i - symoffset];
			if ((h | 1) == (h2 | 1) && (p = defined(e, i, name)))
				return p;
			if (h2 & 1)
				return NULL;
		}
	}
	if (e->hash) {
		uint32_t nbucket = e->hash[0];
		const uint32_t *bucket = e->hash + 2, *chain = bucket + nbucket;
		uint32_t n;

		if (nbucket == 0)
			return NULL;
		/* At most nchain steps: a broken table cannot loop us. */
		for (i = bucket[sysv_hash(name) % nbucket], n = 0;
		     i != 0 && n < e->hash[1]; i = chain[i], n++)
			if ((p = defined(e, i, name)))
				return p;
	}
	return NULL;
}

/* glibc's functions this file needs, by name. */
enum dl { DL_SYM, DL_VSYM, DL_OPEN, DL_ERROR, DL_COUNT };
static const char *const dl_names[DL_COUNT] = { "dlsym", "dlvsym", "dlopen", "dlerror" };

struct found {
	void *fn[DL_COUNT];
};

/* glibc_file: the path the loader opened is one of glibc's two files that
 * may hold dlsym. Only those are read: never the vDSO or another object
 * whose dynamic section we would have to guess about. */
static int glibc_file(const char *path)
{
	const char *base = path;

	if (!path)
		return 0;
	for (; *path; path++)
		if (*path == '/')
			base = path + 1;
	return str_eq(base, "libc.so.6") || str_eq(base, "libdl.so.2");
}

static int find_glibc_dl(struct dl_phdr_info *info, size_t size, void *data)
{
	struct found *f = data;
	const ElfW(Dyn) *d = NULL;
	struct elf_syms e = { .base = info->dlpi_addr };
	const char *soname = NULL;
	void *fn[DL_COUNT];
	ElfW(Addr) soname_off = 0;
	int i, has_soname = 0;

	(void)size;
	if (!glibc_file(info->dlpi_name))
		return 0;
	for (i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
			d = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
	if (!d || info->dlpi_addr == 0)
		return 0;
	for (; d->d_tag != DT_NULL; d++) {
		switch (d->d_tag) {
		case DT_STRTAB: e.str = (const char *)at(e.base, d->d_un.d_ptr); break;
		case DT_SYMTAB: e.sym = (const ElfW(Sym) *)at(e.base, d->d_un.d_ptr); break;
		case DT_GNU_HASH: e.gnu_hash = (const uint32_t *)at(e.base, d->d_un.d_ptr); break;
		case DT_HASH: e.hash = (const uint32_t *)at(e.base, d->d_un.d_ptr); break;
		case DT_SONAME: soname_off = d->d_un.d_val; has_soname = 1; break;
		}
	}
	if (!e.str || !e.sym || (!e.gnu_hash && !e.hash) || !has_soname)
		return 0;
	soname = e.str + soname_off;
	if (!str_eq(soname, "libc.so.6") && !str_eq(soname, "libdl.so.2"))
		return 0;
	for (i = 0; i < DL_COUNT; i++)
		if (!(fn[i] = elf_lookup(&e, dl_names[i])))
			return 0; /* glibc 2.34's libdl.so.2 has none */
	for (i = 0; i < DL_COUNT; i++)
		f->fn[i] = fn[i];
	return 1; /* stops the walk */
}

/* glibc's four, all or none (dl_fn[DL_SYM] is written last). */
static void *dl_fn[DL_COUNT];

static void *dl(enum dl which)
{
	void *p = __atomic_load_n(&dl_fn[DL_SYM], __ATOMIC_ACQUIRE);
	struct found f = { { 0 } };
	int e, i;

	if (!p) {
		e = errno;
		dl_iterate_phdr(find_glibc_dl, &f);
		errno = e;
		if (!f.fn[DL_SYM])
			return NULL;
		for (i = DL_COUNT - 1; i >= 0; i--)
			__atomic_store_n(&dl_fn[i], f.fn[i], __ATOMIC_RELEASE);
	}
	return __atomic_load_n(&dl_fn[which], __ATOMIC_ACQUIRE);
}

dlsym_fn real_dlsym(void) { return (dlsym_fn)dl(DL_SYM); }
dlvsym_fn real_dlvsym(void) { return (dlvsym_fn)dl(DL_VSYM); }

/* ---- the CUDA driver and NVML ---- */

static const char *const lib_names[LIB_COUNT] = { "libcuda.so.1", "libnvidia-ml.so.1" };

#define VIEW_FN(id, name, lib) [R_##id] = { #name, LIB_##lib },
static const struct {
	const char *name;
	enum lib lib;
} fns[R_COUNT] = { VIEW_HOOKED(VIEW_FN) VIEW_CALLED(VIEW_FN) };

const char *fn_name(enum fn_id f) { return fns[f].name; }
enum lib fn_lib(enum fn_id f) { return fns[f].lib; }

static void *lib_handle[LIB_COUNT];
/* Each real function: NULL not looked up yet, MISSING looked up and absent. */
static void *real_ptr[R_COUNT];
#define MISSING ((void *)1)

/* handle: the real library if it is loaded, else NULL (looked for again
 * next time: it may be loaded later). */
static void *handle(enum lib l)
{
	void *h = __atomic_load_n(&lib_handle[l], __ATOMIC_ACQUIRE);
	void *(*open)(const char *, int);
	char *(*error)(void);
	int e;

	if (h)
		return h;
	open = (void *(*)(const char *, int))dl(DL_OPEN);
	error = (char *(*)(void))dl(DL_ERROR);
	if (!open || !error)
		return NULL;
	e = errno;
	h = open(lib_names[l], RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
	if (!h)
		error(); /* ours, not the caller's: leave none pending */
	errno = e;
	if (h)
		__atomic_store_n(&lib_handle[l], h, __ATOMIC_RELEASE);
	return h;
}

int real_loaded(enum lib l)
{
	return handle(l) != NULL;
}

/* mine: p is in this library (its ELF header to its end): the real
 * library's scope never holds our exports, but a symbol of ours must
 * never be taken for the real one. */
extern const char __ehdr_start[] HIDDEN, _end[] HIDDEN;
static int mine(const void *p)
{
	return (const char *)p >= __ehdr_start && (const char *)p < _end;
}

void *real_fn(enum fn_id f)
{
	void *p = __atomic_load_n(&real_ptr[f], __ATOMIC_ACQUIRE), *h;
	dlsym_fn sym;
	int e;

	if (p)
		return p == MISSING ? NULL : p;
	sym = real_dlsym();
	h = handle(fns[f].lib);
	if (!sym || !h)
		return NULL;
	e = errno;
	p = sym(h, fns[f].name);
	if (!p)
		((char *(*)(void))dl(DL_ERROR))();
	if (p && mine(p))
		p = NULL;
	errno = e;
	__atomic_store_n(&real_ptr[f], p ? p : MISSING, __ATOMIC_RELEASE);
	return p;
}

int real_index(const char *name)
{
	int i;

	/* Cheap refusal first: dlsym is called for every symbol of every
	 * plugin a process loads. */
	if (!name || !((name[0] == 'c' && name[1] == 'u') ||
		       (name[0] == 'n' && name[1] == 'v')))
		return -1;
	for (i = 0; i < R_HOOKED; i++)
		if (str_eq(name, fns[i].name))
			return i;
	return -1;
}
