/*
 * tiny (test only): echo and cat for a minimal root of an architecture
 * that has no coreutils here (tenant/test/run.sh's arm64 image without
 * libdl.so.2). As "cat FILE" it copies FILE to stdout; as anything else it
 * prints its arguments, as echo does.
 */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
	const char *name = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
	int i, c;

	if (!strcmp(name, "cat")) {
		FILE *f = argc > 1 ? fopen(argv[1], "r") : NULL;

		if (!f)
			return 1;
		while ((c = getc(f)) != EOF)
			putchar(c);
		return 0;
	}
	for (i = 1; i < argc; i++)
		printf("%s%s", argv[i], i + 1 < argc ? " " : "");
	printf("\n");
	return 0;
}
