/*
 * dlsym and dlvsym: how software that does not link the CUDA driver or
 * NVML (pynvml's ctypes, nvidia-smi, XLA, the CUDA runtime looking for
 * cuGetProcAddress) reaches their functions. Only lookups of our names
 * are answered here: on a real handle, if glibc's dlsym finds there the
 * real library's function of that name, the caller gets ours instead; in
 * the global scope (RTLD_DEFAULT, or the program's own handle) before the
 * real library is loaded, the caller gets what it would get without us
 * (usually nothing), so a probe for the driver is not fooled by our
 * exports.
 *
 * Everything else must reach glibc exactly as if we were not here: for
 * RTLD_NEXT and RTLD_DEFAULT glibc resolves relative to the object that
 * called, which it knows from the return address. So dlsym and dlvsym
 * themselves are the assembly trampolines of trampoline.S: they ask
 * view_dlsym_route where to go and jump there with the caller's return
 * address and arguments untouched.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>

#include "view.h"

HIDDEN void *view_dlsym_answer(void *handle, const char *name);
HIDDEN void *view_dlvsym_answer(void *handle, const char *name, const char *version);
HIDDEN void *view_dlsym_absent(void *handle, const char *name);

enum route { GLIBC, ANSWER, ABSENT };

/* route: where a lookup of name on handle goes. GLIBC: everything but our
 * names, and RTLD_NEXT (glibc gives a caller after us the next definition,
 * never ours; one before us, ours). ANSWER: one of our names on a handle.
 * ABSENT: one of our names in the global scope (RTLD_DEFAULT), which finds
 * ours first, while the real library is not loaded: a program asking "is
 * the driver here?" must hear no. */
static enum route route(void *handle, const char *name)
{
	int f, e, loaded;

	if (handle == RTLD_NEXT || (f = real_index(name)) < 0)
		return GLIBC;
	if (handle != RTLD_DEFAULT)
		return ANSWER;
	e = errno;
	loaded = real_loaded(fn_lib((enum fn_id)f));
	errno = e;
	return loaded ? GLIBC : ABSENT;
}

/* view_dlsym_route: where dlsym(handle, name) goes: glibc's dlsym, or
 * view_dlsym_answer or _absent; NULL (dlsym returns NULL) only if glibc's
 * dlsym could not be found. */
HIDDEN void *view_dlsym_route(void *handle, const char *name)
{
	dlsym_fn real = real_dlsym();

	if (!real)
		return NULL;
	switch (route(handle, name)) {
	case ANSWER: return (void *)view_dlsym_answer;
	case ABSENT: return (void *)view_dlsym_absent;
	default: return (void *)real;
	}
}

/* view_dlvsym_route: as view_dlsym_route, but a lookup in the global
 * scope always goes to glibc: dlvsym accepts only a definition of the
 * version asked for, and our exports have none ("Base"), so it never
 * finds ours there (tenant/test/run.sh, the probe: vsym). */
HIDDEN void *view_dlvsym_route(void *handle, const char *name, const char *version)
{
	dlvsym_fn real = real_dlvsym();

	(void)version;
	if (!real)
		return NULL;
	if (handle != RTLD_DEFAULT && route(handle, name) == ANSWER)
		return (void *)view_dlvsym_answer;
	return (void *)real;
}

/* swap: ours for p when p is the real function of that name. */
static void *swap(const char *name, void *p)
{
	int e, f;

	if (!p)
		return p;
	e = errno;
	f = real_index(name);
	if (f >= 0 && real_fn((enum fn_id)f) == p) {
		TRACE("dlsym: ours", name, 0);
		p = ours((enum fn_id)f);
	} else
		TRACE("dlsym: not the real library's", name, 0);
	errno = e;
	return p;
}

/* HERE(p): p passes through here, so the call that made it is never a
 * tail call: glibc must see this library as the caller of the lookups
 * below (RTLD_NEXT: the objects after ours), not the program that called
 * the trampoline. */
#define HERE(p) __asm__ volatile("" : "+r"(p))

/* ours_early: p, found by a lookup of name on a handle, is our export
 * while the real library is not loaded. Only a handle whose scope holds
 * us finds it: the program's own, dlopen(NULL) (ctypes.CDLL(None)), whose
 * scope is the global one; that lookup then gets what RTLD_DEFAULT's does
 * (view_dlsym_absent). dlvsym never finds our exports, which have no
 * version of the caller's asking. */
static int ours_early(const char *name, void *p)
{
	int f = real_index(name);

	return p && p == ours((enum fn_id)f) && !real_loaded(fn_lib((enum fn_id)f));
}

void *view_dlsym_answer(void *handle, const char *name)
{
	void *p = real_dlsym()(handle, name);

	HERE(p);
	if (ours_early(name, p)) {
		p = real_dlsym()(RTLD_NEXT, name);
		HERE(p);
		TRACE("dlsym: no real library yet", name, p != NULL);
	}
	return swap(name, p);
}

void *view_dlvsym_answer(void *handle, const char *name, const char *version)
{
	return swap(name, real_dlvsym()(handle, name, version));
}

/* view_dlsym_absent: the global scope's definition as if we were not in
 * it: another object's before ours (the program's own, say), else the
 * next one after ours; NULL, with glibc's "undefined symbol" pending for
 * dlerror(), when there is none, as without us. */
void *view_dlsym_absent(void *handle, const char *name)
{
	void *p = real_dlsym()(RTLD_DEFAULT, name);
	int f = real_index(name);

	(void)handle;
	HERE(p);
	if (p && p == ours((enum fn_id)f)) {
		p = real_dlsym()(RTLD_NEXT, name);
		HERE(p);
	}
	TRACE("dlsym: no real library yet", name, p != NULL);
	return p;
}

