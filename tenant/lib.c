/* Small string helpers, so that nothing here depends on libc's (which
 * another preloaded library may wrap) on the paths of dlsym. */
#include "view.h"

#ifdef VIEW_TRACE
#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>

void view_trace(const char *what, const char *s, long long n)
{
	char b[256], d[24];
	size_t p = 0, i = 0;
	unsigned long long u = n < 0 ? 0ULL - (unsigned long long)n : (unsigned long long)n;
	int e = errno;

	for (const char *q = "view: "; *q; q++)
		b[p++] = *q;
	for (; what && *what && p < 100; what++)
		b[p++] = *what;
	b[p++] = ' ';
	for (; s && *s && p < 200; s++)
		b[p++] = *s;
	b[p++] = ' ';
	if (n < 0)
		b[p++] = '-';
	do
		d[i++] = (char)('0' + u % 10);
	while ((u /= 10) && i < sizeof d);
	while (i)
		b[p++] = d[--i];
	b[p++] = '\n';
	syscall(SYS_write, 2, b, p);
	errno = e;
}
#endif

int str_eq(const char *a, const char *b)
{
	while (*a && *a == *b)
		a++, b++;
	return *a == *b;
}
