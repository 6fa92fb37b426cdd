/*
 * viewfiles (test only): the library's parser of the view file
 * (view_parse, tenant/viewfile.c, linked in) against the table of cases
 * both readers share, tenant/test/viewfiles.txt (its head says the
 * format). Prints one line per case, "ok NAME" or "FAIL NAME: want ...,
 * got ..."; exit status 1 on a FAIL or a table it cannot read.
 *
 *   viewfiles TABLE
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "view.h"

#define MAX_IN (1 << 16)

static int hex(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* unquote: the bytes of the quoted string at s (after "in ") and its
 * " *N" appended to buf at *n; 0 on a malformed line. */
static int unquote(const char *s, char *buf, size_t *n)
{
	char one[4096];
	size_t k = 0, i;
	long times = 1;

	if (*s++ != '"')
		return 0;
	for (; *s && *s != '"'; s++) {
		char c = *s;

		if (c == '\\') {
			switch (*++s) {
			case 'n': c = '\n'; break;
			case 'r': c = '\r'; break;
			case 't': c = '\t'; break;
			case '\\': c = '\\'; break;
			case '"': c = '"'; break;
			case 'x':
				if (hex(s[1]) < 0 || hex(s[2]) < 0)
					return 0;
				c = (char)(hex(s[1]) * 16 + hex(s[2]));
				s += 2;
				break;
			default: return 0;
			}
		}
		if (k >= sizeof one)
			return 0;
		one[k++] = c;
	}
	if (*s++ != '"')
		return 0;
	if (*s == ' ' && s[1] == '*')
		times = strtol(s + 2, NULL, 10);
	else if (*s && *s != '\n')
		return 0;
	for (; times > 0; times--)
		for (i = 0; i < k; i++) {
			if (*n >= MAX_IN)
				return 0;
			buf[(*n)++] = one[i];
		}
	return 1;
}

int main(int argc, char **argv)
{
	static char line[8192], in[MAX_IN];
	char name[8192], want[8192], got[128];
	FILE *f = argc == 2 ? fopen(argv[1], "r") : NULL;
	size_t n = 0;
	int fails = 0, cases = 0, lineno = 0;

	if (!f) {
		fprintf(stderr, "usage: viewfiles TABLE\n");
		return 2;
	}
	while (fgets(line, sizeof line, f)) {
		lineno++;
		if (!strncmp(line, "case ", 5)) {
			snprintf(name, sizeof name, "%s", line + 5);
			name[strcspn(name, "\n")] = 0;
			n = 0;
		} else if (!strncmp(line, "in ", 3)) {
			if (!unquote(line + 3, in, &n)) {
				fprintf(stderr, "%s:%d: a malformed in line\n", argv[1], lineno);
				return 2;
			}
		} else if (!strncmp(line, "want ", 5)) {
			struct view v = { 0, 0 };
			int ok = view_parse(in, n, &v);

			snprintf(want, sizeof want, "%s", line + 5);
			want[strcspn(want, "\n")] = 0;
			if (ok)
				snprintf(got, sizeof got, "%llu %llu", (unsigned long long)v.total, (unsigned long long)v.used);
			else
				snprintf(got, sizeof got, "invalid");
			if (strcmp(want, got)) {
				printf("FAIL %s: want %s, got %s\n", name, want, got);
				fails++;
			} else
				printf("ok %s\n", name);
			cases++;
		} else if (line[0] != '#' && line[0] != '\n') {
			fprintf(stderr, "%s:%d: not a case, in or want line\n", argv[1], lineno);
			return 2;
		}
	}
	if (cases == 0) {
		fprintf(stderr, "%s: no cases\n", argv[1]);
		return 2;
	}
	return fails != 0;
}
