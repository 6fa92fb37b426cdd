/*
 * startbench (a measurement, not a test; tenant/test/bench.sh runs it):
 * what a preloaded library costs each start of a program that never
 * touches CUDA, as the CPU time the started processes use (their own
 * user + system time, from wait4: the kernel's exec, the dynamic loader,
 * the program), not wall time, which a loaded machine blurs.
 *
 *   startbench [-m env|file] [-n STARTS] [-r ROUNDS] LIB -- CMD [ARG...]
 *
 * A round is two blocks of STARTS starts of CMD, one without LIB (A) and
 * one with it (B), in the order AB in even rounds and BA in odd ones
 * (ABBA: a drift of the machine's speed falls on both sides alike). With
 * -m env (the default) B has LD_PRELOAD=LIB; with -m file B has
 * /etc/ld.so.preload naming LIB and A has no /etc/ld.so.preload at all,
 * as a container with and without the view: the file is written and
 * removed between blocks, so run it where /etc is yours (bench.sh gives it
 * an overlay in a mount namespace of its own).
 *
 * Prints, in microseconds of CPU per start: each side's median over the
 * rounds, the median of the rounds' ratios B/A and a distribution-free
 * 95% confidence interval of that median (order statistics of the
 * binomial), and the rounds. CMD's output goes to /dev/null.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static const char *preload_file = "/etc/ld.so.preload";

static double cpu_us(const struct rusage *r)
{
	return (r->ru_utime.tv_sec + r->ru_stime.tv_sec) * 1e6 + r->ru_utime.tv_usec + r->ru_stime.tv_usec;
}

/* block: the mean CPU microseconds of n starts of argv with envp. */
static double block(int n, char **argv, char **envp)
{
	posix_spawn_file_actions_t fa;
	double sum = 0;
	int i;

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	for (i = 0; i < n; i++) {
		struct rusage ru;
		pid_t pid;
		int st, e;

		e = posix_spawn(&pid, argv[0], &fa, NULL, argv, envp);
		if (e != 0) {
			fprintf(stderr, "startbench: %s: %s\n", argv[0], strerror(e));
			exit(1);
		}
		if (wait4(pid, &st, 0, &ru) != pid) {
			perror("startbench: wait4");
			exit(1);
		}
		if (!WIFEXITED(st)) {
			fprintf(stderr, "startbench: %s did not exit (status %#x)\n", argv[0], st);
			exit(1);
		}
		sum += cpu_us(&ru);
	}
	posix_spawn_file_actions_destroy(&fa);
	return sum / n;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	double *s = malloc(n * sizeof *s);
	double m;

	memcpy(s, v, n * sizeof *s);
	qsort(s, n, sizeof *s, cmp);
	m = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
	free(s);
	return m;
}

/* ci: the 95% interval of the median of v: the k-th smallest and largest
 * (1-based), k the largest with P(Binomial(n, 1/2) <= k - 1) <= 0.025 (at
 * least 1: with few rounds, the smallest and largest). */
static void ci(double *v, int n, double *lo, double *hi)
{
	double *s = malloc(n * sizeof *s), p = 0, c = pow(0.5, n);
	int k = 0;

	memcpy(s, v, n * sizeof *s);
	qsort(s, n, sizeof *s, cmp);
	/* c: C(n, j) / 2^n, P: P(X <= j) */
	for (int j = 0; j < n; j++) {
		if (p + c > 0.025)
			break;
		p += c;
		k = j + 1;
		c = c * (n - j) / (j + 1);
	}
	if (k < 1)
		k = 1;
	*lo = s[k - 1];
	*hi = s[n - k];
	free(s);
}

static void set_file(const char *lib, int on)
{
	if (on) {
		FILE *f = fopen(preload_file, "w");
		if (!f || fprintf(f, "%s\n", lib) < 0 || fclose(f) != 0) {
			perror("startbench: /etc/ld.so.preload");
			exit(1);
		}
	} else if (unlink(preload_file) != 0 && errno != ENOENT) {
		perror("startbench: /etc/ld.so.preload");
		exit(1);
	}
}

int main(int argc, char **argv)
{
	int n = 100, rounds = 40, file = 0, i, nenv;
	const char *lib;
	char **cmd, **env_a, **env_b, *pre;
	double *a, *b, *ratio, lo, hi;

	for (i = 1; i < argc && argv[i][0] == '-' && strcmp(argv[i], "--"); i += 2) {
		if (i + 1 >= argc)
			goto usage;
		if (!strcmp(argv[i], "-n"))
			n = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "-r"))
			rounds = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "-m"))
			file = !strcmp(argv[i + 1], "file");
		else
			goto usage;
	}
	if (i + 2 >= argc || strcmp(argv[i + 1], "--") || n < 1 || rounds < 6)
		goto usage;
	lib = argv[i];
	cmd = argv + i + 2;

	/* The environments: this one less any LD_PRELOAD (A), and with ours (B). */
	for (nenv = 0; environ[nenv]; nenv++)
		;
	env_a = calloc(nenv + 1, sizeof *env_a);
	env_b = calloc(nenv + 2, sizeof *env_b);
	pre = malloc(strlen(lib) + sizeof "LD_PRELOAD=");
	sprintf(pre, "LD_PRELOAD=%s", lib);
	for (int j = 0, k = 0; j < nenv; j++)
		if (strncmp(environ[j], "LD_PRELOAD=", 11)) {
			env_a[k] = environ[j];
			env_b[k++] = environ[j];
		}
	if (!file)
		for (int k = 0;; k++)
			if (!env_b[k]) {
				env_b[k] = pre;
				break;
			}

	a = calloc(rounds, sizeof *a);
	b = calloc(rounds, sizeof *b);
	ratio = calloc(rounds, sizeof *ratio);
	block(n, cmd, env_a); /* warm the page cache and the CPU */
	for (int r = 0; r < rounds; r++) {
		for (int s = 0; s < 2; s++) {
			int with = (r % 2 == 0) ? s : !s;
			if (file)
				set_file(lib, with);
			if (with)
				b[r] = block(n, cmd, file ? env_a : env_b);
			else
				a[r] = block(n, cmd, env_a);
		}
		ratio[r] = b[r] / a[r];
	}
	if (file)
		set_file(lib, 0);
	ci(ratio, rounds, &lo, &hi);
	printf("without %.1f us  with %.1f us  ratio %.3f  (95%% CI %.3f..%.3f, %d rounds of %d starts, %s)\n",
	       median(a, rounds), median(b, rounds), median(ratio, rounds), lo, hi, rounds, n,
	       file ? "/etc/ld.so.preload" : "LD_PRELOAD");
	printf("rounds:");
	for (int r = 0; r < rounds; r++)
		printf(" %.1f/%.1f", a[r], b[r]);
	printf("\n");
	return 0;
usage:
	fprintf(stderr, "usage: startbench [-m env|file] [-n STARTS] [-r ROUNDS] LIB -- CMD [ARG...]\n");
	return 2;
}
