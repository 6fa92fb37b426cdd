/* libown.so (test only): an image's own LD_PRELOAD library. It wraps
 * dlsym the common way, through dlvsym(RTLD_NEXT, "dlsym", <glibc's
 * base version>), so the view library's dlsym comes after it in the chain. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

#if defined(__x86_64__)
#define BASE "GLIBC_2.2.5"
#else
#define BASE "GLIBC_2.17"
#endif

void *dlsym(void *h, const char *name)
{
	static void *(*next)(void *, const char *);

	if (!next)
		next = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", BASE);
	return next ? next(h, name) : NULL;
}
