/*
 * ckpt/util.h - small helpers shared by every module: allocation that
 * aborts on OOM (for metadata-sized allocations), sizes, paths, time.
 */
#ifndef CKPT_UTIL_H
#define CKPT_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "ckpt/err.h"

/* Out of memory where no caller could go on (metadata-sized allocations,
 * library calls that fail only for memory): print "ckpt: out of memory
 * <what>" on stderr and abort. The one abort() in ckpt; every other
 * failure returns an error. */
_Noreturn void ckpt_die_oom(const char *fmt, ...) CKPT_PRINTF(1, 2);

void *ckpt_xmalloc(size_t n);
void *ckpt_xcalloc(size_t n, size_t size);
void *ckpt_xrealloc(void *p, size_t n);
/* realloc for an array of n elements of size, overflow-checked. */
void *ckpt_xreallocarray(void *p, size_t n, size_t size);
char *ckpt_xstrdup(const char *s);
/* Free the n strings of v, then v (NULL v: nothing). */
void ckpt_strv_free(char **v, size_t n);
char *ckpt_xstrndup(const char *s, size_t n);
char *ckpt_xasprintf(const char *fmt, ...) CKPT_PRINTF(1, 2);

/* Overflow-checked arithmetic: return 0 on success, -1 on overflow. */
int ckpt_add_u64(uint64_t a, uint64_t b, uint64_t *out);
int ckpt_mul_u64(uint64_t a, uint64_t b, uint64_t *out);

/* Parse "5G", "512M", "100k", "42" (binary units, K/M/G/T/P, optional
 * trailing B or iB). Returns 0 or -1 with err. */
int ckpt_parse_size(const char *s, uint64_t *out, struct ckpt_err *err);
/* Parse a non-negative decimal integer that fits in int64. 0 or -1. */
int ckpt_parse_u64(const char *s, uint64_t *out);
/* Human size "1.5 GiB" into buf. */
const char *ckpt_fmt_size(uint64_t n, char *buf, size_t len);

/* Path helpers on '/'-separated strings. Results are malloced. */
char *ckpt_path_join(const char *a, const char *b);
/* Last component ("a/b/" -> "b"), malloced. */
char *ckpt_path_basename(const char *p);
/* Everything before the last component ("a/b/c" -> "a/b", "c" -> ""). */
char *ckpt_path_dirname(const char *p);
/* 1 if s ends with suffix. */
int ckpt_str_endswith(const char *s, const char *suffix);
int ckpt_str_startswith(const char *s, const char *prefix);

/* Read a small local file (credentials, netrc, profiles) of at most max
 * bytes into a malloced NUL-terminated string. NULL with errno set when
 * it cannot be opened or read, EFBIG when it is longer than max (never a
 * truncated prefix). */
char *ckpt_read_small_file(const char *path, size_t max);

/* Write all n bytes of p at off (pwrite, EINTR retried); on failure
 * "write 'NAME': strerror" in err and -1. */
int ckpt_pwrite_all(int fd, const void *p, size_t n, uint64_t off,
                    const char *name, struct ckpt_err *err);

/* Monotonic seconds. */
double ckpt_now(void);

struct timespec;
/* *ts = the CLOCK_REALTIME instant ns nanoseconds (under a second) from
 * now: the deadline of a pthread_cond_timedwait. */
void ckpt_deadline_in(struct timespec *ts, long ns);

/* 1 if dir/name is a regular file (symlinks followed), else 0. */
int ckpt_is_file_in(const char *dir, const char *name);

/* mkdir -p: create dir and its missing parents (mode 0777 & umask).
 * 0, or -1 with err naming the directory that could not be made. */
int ckpt_mkdirs(const char *dir, struct ckpt_err *err);

/* qsort that accepts an empty (NULL) array: qsort(NULL, 0, ...) is
 * undefined behaviour, and empty listings are common. */
static inline void ckpt_sort(void *base, size_t n, size_t size,
                             int (*cmp)(const void *, const void *))
{
    if (n > 1)
        qsort(base, n, size, cmp);
}

#endif
