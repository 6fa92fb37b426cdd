/*
 * dlsym and dlvsym: how software that does not link the CUDA driver or
 * NVML (pynvml's ctypes, nvidia-smi, XLA, the CUDA runtime looking for
 * cuGetProcAddress) reaches their functions. Only a lookup of one of our
 * names on a real handle is answered here: if glibc's dlsym finds there
 * the real library's function of that name, the caller gets ours instead.
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

static int ours_to_answer(void *handle, const char *name)
{
	return handle != RTLD_DEFAULT && handle != RTLD_NEXT && real_index(name) >= 0;
}

/* view_dlsym_route: where dlsym(handle, name) goes: glibc's dlsym, or
 * view_dlsym_answer; NULL (dlsym returns NULL) only if glibc's dlsym
 * could not be found. */
HIDDEN void *view_dlsym_route(void *handle, const char *name)
{
	dlsym_fn real = real_dlsym();

	if (real && ours_to_answer(handle, name))
		return (void *)view_dlsym_answer;
	return (void *)real;
}

HIDDEN void *view_dlvsym_route(void *handle, const char *name, const char *version)
{
	dlvsym_fn real = real_dlvsym();

	(void)version;
	if (real && ours_to_answer(handle, name))
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
	if (f >= 0 && real_fn((enum fn_id)f, 0) == p) {
		TRACE("dlsym: ours", name, 0);
		p = ours((enum fn_id)f);
	} else
		TRACE("dlsym: not the real library's", name, 0);
	errno = e;
	return p;
}

void *view_dlsym_answer(void *handle, const char *name)
{
	return swap(name, real_dlsym()(handle, name));
}

void *view_dlvsym_answer(void *handle, const char *name, const char *version)
{
	return swap(name, real_dlvsym()(handle, name, version));
}
