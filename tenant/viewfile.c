/*
 * The view file: /run/yunion-mps/view/<GPU UUID>/memory, written by the
 * daemon (replaced by a rename, so a reader sees one whole version), read
 * here on every query the library answers. Format (docs/containers.md):
 * lines "key value\n", at most 4096 bytes, keys in any order, unknown keys
 * ignored; total_bytes (required, not 0) and used_bytes (0 when absent),
 * decimal. Anything else about the file makes it invalid and the caller
 * gives the real answer.
 *
 * Raw system calls, not libc's wrappers: read(2) is a cancellation point
 * and open(2) a favourite of other preloaded libraries, and neither belongs
 * inside a CUDA call of someone else's thread.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <errno.h>

#include "view.h"

/* parse_u64: the decimal in s[0..n) (digits only, at least one, no sign,
 * no overflow) into *out; 1 if it is one. */
static int parse_u64(const char *s, size_t n, uint64_t *out)
{
	uint64_t v = 0;
	size_t i;

	if (n == 0)
		return 0;
	for (i = 0; i < n; i++) {
		unsigned d = (unsigned char)s[i] - '0';
		if (d > 9)
			return 0;
		if (v > (UINT64_MAX - d) / 10)
			return 0;
		v = v * 10 + d;
	}
	*out = v;
	return 1;
}

static int key_is(const char *k, size_t n, const char *want)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (want[i] != k[i] || want[i] == 0)
			return 0;
	return want[n] == 0;
}

static int blank(char c) { return c == ' ' || c == '\t'; }

int view_parse(const char *buf, size_t n, struct view *v)
{
	size_t i = 0;
	int have_total = 0, have_used = 0;
	uint64_t total = 0, used = 0;

	if (n == 0 || n > VIEW_FILE_MAX || buf[n - 1] != '\n')
		return 0;
	while (i < n) {
		size_t k0 = i, k1, v0, v1, e;

		/* The line: [i, e), e at its '\n' (the file ends with one). */
		for (e = i; buf[e] != '\n'; e++)
			if (buf[e] == 0)
				return 0;
		if (e == i) { /* an empty line */
			i = e + 1;
			continue;
		}
		for (k1 = k0; k1 < e && !blank(buf[k1]); k1++)
			;
		if (k1 == k0 || k1 == e) /* no key, or no value */
			return 0;
		for (v0 = k1; v0 < e && blank(buf[v0]); v0++)
			;
		for (v1 = e; v1 > v0 && blank(buf[v1 - 1]); v1--)
			;
		if (key_is(buf + k0, k1 - k0, "total_bytes")) {
			if (have_total || !parse_u64(buf + v0, v1 - v0, &total))
				return 0;
			have_total = 1;
		} else if (key_is(buf + k0, k1 - k0, "used_bytes")) {
			if (have_used || !parse_u64(buf + v0, v1 - v0, &used))
				return 0;
			have_used = 1;
		}
		i = e + 1;
	}
	if (!have_total || total == 0)
		return 0;
	v->total = total;
	v->used = used;
	return 1;
}

uint64_t view_free(const struct view *v, uint64_t real_free)
{
	uint64_t avail = v->used >= v->total ? 0 : v->total - v->used;

	return real_free < avail ? real_free : avail;
}

static int uuid_ok(const char *u)
{
	size_t i;

	for (i = 0; u[i]; i++) {
		char c = u[i];
		if (i >= VIEW_UUID_MAX)
			return 0;
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
		      (c >= 'A' && c <= 'Z') || c == '-'))
			return 0;
	}
	return i > 0;
}

int view_read(const char *uuid, struct view *v)
{
	static const char root[] = VIEW_ROOT, leaf[] = "/memory";
	char path[sizeof root + VIEW_UUID_MAX + sizeof leaf];
	char buf[VIEW_FILE_MAX + 1];
	struct stat st;
	size_t n = 0, p = 0, i;
	long fd, r = -1;
	int tries, ok = 0;

	if (!uuid || !uuid_ok(uuid))
		return 0;
	for (i = 0; root[i]; i++)
		path[p++] = root[i];
	for (i = 0; uuid[i]; i++)
		path[p++] = uuid[i];
	for (i = 0; i < sizeof leaf; i++) /* with its NUL */
		path[p++] = leaf[i];

	fd = syscall(SYS_openat, AT_FDCWD, path,
		     O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
	if (fd < 0)
		return 0;
	if (syscall(SYS_fstat, fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    st.st_size <= 0 || st.st_size > VIEW_FILE_MAX)
		goto out;
	/* Until end of file; one byte more than the limit tells a file that
	 * grew since fstat. A bounded number of reads: no loop forever. */
	for (tries = 0; tries < 64 && n < sizeof buf; tries++) {
		r = syscall(SYS_read, fd, buf + n, sizeof buf - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	if (r == 0 && n <= VIEW_FILE_MAX)
		ok = view_parse(buf, n, v);
out:
	syscall(SYS_close, fd);
	return ok;
}

void view_uuid_cuda(const CUuuid *u, char *out)
{
	static const char hex[] = "0123456789abcdef";
	size_t i, p = 0;

	out[p++] = 'G';
	out[p++] = 'P';
	out[p++] = 'U';
	for (i = 0; i < 16; i++) {
		if (i == 0 || i == 4 || i == 6 || i == 8 || i == 10)
			out[p++] = '-';
		out[p++] = hex[u->bytes[i] >> 4];
		out[p++] = hex[u->bytes[i] & 15];
	}
	out[p] = 0;
}
