/* libnexta.so (test only): defines who() and asks glibc for the next
 * definition after itself, as malloc wrappers and profilers do. */
#define _GNU_SOURCE
#include <dlfcn.h>

const char *who(void) { return "a"; }

const char *next_who(void)
{
	const char *(*f)(void) = (const char *(*)(void))dlsym(RTLD_NEXT, "who");
	return f ? f() : "none";
}

const char *next_vwho(void)
{
	const char *(*f)(void) = (const char *(*)(void))dlvsym(RTLD_NEXT, "who", "NEXT_1");
	return f ? f() : "none";
}
