/* Small string helpers, so that nothing here depends on libc's (which
 * another preloaded library may wrap) on the paths of dlsym. */
#include "view.h"

int str_eq(const char *a, const char *b)
{
	while (*a && *a == *b)
		a++, b++;
	return *a == *b;
}
