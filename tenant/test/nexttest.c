/*
 * nexttest (test only): linked against libnexta.so then libnextb.so, both
 * defining who(). glibc resolves dlsym(RTLD_NEXT) relative to the object
 * that called it; a dlsym hook that calls glibc's from a frame of its own
 * would make that itself, and libnexta.so's "next who" would be its own.
 * Prints: main-next (from main: a) a-next (from libnexta.so: b) a-vnext
 * (dlvsym: b) default (RTLD_DEFAULT: a).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

const char *next_who(void);
const char *next_vwho(void);

int main(void)
{
	const char *(*m)(void) = (const char *(*)(void))dlsym(RTLD_NEXT, "who");
	const char *(*d)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "who");

	printf("main-next=%s a-next=%s a-vnext=%s default=%s\n", m ? m() : "none", next_who(),
	       next_vwho(), d ? d() : "none");
	return 0;
}
