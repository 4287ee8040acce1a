#include "ckpt/util.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void ckpt_die_oom(const char *fmt, ...)
{
    /* One write, no allocation: a whole line even among other threads. */
    char line[256] = "ckpt: out of memory ";
    size_t n = strlen(line);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
    va_end(ap);
    strcat(line, "\n");
    fputs(line, stderr);
    abort();
}

static void die_oom(size_t n)
{
    ckpt_die_oom("allocating %zu bytes", n);
}

void *ckpt_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        die_oom(n);
    return p;
}

void *ckpt_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        die_oom(n * size);
    return p;
}

void *ckpt_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        die_oom(n);
    return q;
}

void *ckpt_xreallocarray(void *p, size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size)
        die_oom(SIZE_MAX);
    return ckpt_xrealloc(p, n * size);
}

char *ckpt_xstrdup(const char *s)
{
    return ckpt_xstrndup(s, strlen(s));
}

void ckpt_strv_free(char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i]);
    free(v);
}

char *ckpt_xstrndup(const char *s, size_t n)
{
    size_t l = strnlen(s, n);
    char *p = ckpt_xmalloc(l + 1);
    memcpy(p, s, l);
    p[l] = '\0';
    return p;
}

char *ckpt_xasprintf(const char *fmt, ...)
{
    va_list ap, cp;
    va_start(ap, fmt);
    va_copy(cp, ap);
    int n = vsnprintf(NULL, 0, fmt, cp);
    va_end(cp);
    if (n < 0)
        n = 0;
    char *p = ckpt_xmalloc((size_t)n + 1);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

int ckpt_add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    if (a > UINT64_MAX - b)
        return -1;
    *out = a + b;
    return 0;
}

int ckpt_mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    if (a && b > UINT64_MAX / a)
        return -1;
    *out = a * b;
    return 0;
}

int ckpt_parse_u64(const char *s, uint64_t *out)
{
    if (!s || !isdigit((unsigned char)s[0]))
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v > INT64_MAX)
        return -1;
    *out = v;
    return 0;
}

int ckpt_parse_size(const char *s, uint64_t *out, struct ckpt_err *err)
{
    if (!s || !isdigit((unsigned char)s[0]))
        return ckpt_err_set(err, CKPT_EUSAGE, "invalid size '%s'", s ? s : "");
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return ckpt_err_set(err, CKPT_EUSAGE, "invalid size '%s'", s);
    uint64_t mul = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K': mul = 1ULL << 10; end++; break;
    case 'M': mul = 1ULL << 20; end++; break;
    case 'G': mul = 1ULL << 30; end++; break;
    case 'T': mul = 1ULL << 40; end++; break;
    case 'P': mul = 1ULL << 50; end++; break;
    default: break;
    }
    if (mul > 1 && *end == 'i')
        end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end || ckpt_mul_u64(v, mul, out) != 0)
        return ckpt_err_set(err, CKPT_EUSAGE, "invalid size '%s'", s);
    return 0;
}

const char *ckpt_fmt_size(uint64_t n, char *buf, size_t len)
{
    static const char *units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
    double v = (double)n;
    int u = 0;
    while (v >= 1024 && u < 5) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%llu B", (unsigned long long)n);
    else
        snprintf(buf, len, "%.1f %s", v, units[u]);
    return buf;
}

char *ckpt_path_join(const char *a, const char *b)
{
    if (!a || !*a)
        return ckpt_xstrdup(b);
    if (!b || !*b)
        return ckpt_xstrdup(a);
    size_t la = strlen(a);
    while (*b == '/')
        b++;
    if (a[la - 1] == '/')
        return ckpt_xasprintf("%s%s", a, b);
    return ckpt_xasprintf("%s/%s", a, b);
}

char *ckpt_path_basename(const char *p)
{
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/')
        n--;
    size_t s = n;
    while (s > 0 && p[s - 1] != '/')
        s--;
    return ckpt_xstrndup(p + s, n - s);
}

char *ckpt_path_dirname(const char *p)
{
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/')
        n--;
    while (n > 0 && p[n - 1] != '/')
        n--;
    while (n > 1 && p[n - 1] == '/')
        n--;
    return ckpt_xstrndup(p, n);
}

int ckpt_str_endswith(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && memcmp(s + a - b, suffix, b) == 0;
}

int ckpt_str_startswith(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

char *ckpt_read_small_file(const char *path, size_t max)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    /* One byte more than allowed tells a file that is too long from one
     * that fits exactly: a truncated credentials file or profile must
     * fail, not parse as a shorter (and different) one. */
    char *buf = ckpt_xmalloc(max + 2);
    size_t n = fread(buf, 1, max + 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad || n > max) {
        free(buf);
        errno = bad ? EIO : EFBIG;
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

int ckpt_pwrite_all(int fd, const void *p, size_t n, uint64_t off,
                    const char *name, struct ckpt_err *err)
{
    while (n) {
        ssize_t w = pwrite(fd, p, n, (off_t)off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return ckpt_err_sys(err, "write '%s'", name);
        if (w == 0)     /* no progress and no errno: do not spin */
            return ckpt_err_set(err, CKPT_EIO, "write '%s': no progress",
                                name);
        p = (const char *)p + w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

double ckpt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void ckpt_deadline_in(struct timespec *ts, long ns)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_nsec += ns;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

int ckpt_mkdirs(const char *dir, struct ckpt_err *err)
{
    struct stat sb;
    if (!*dir || stat(dir, &sb) == 0)
        return 0;
    char *parent = ckpt_path_dirname(dir);
    int rc = strcmp(parent, dir) ? ckpt_mkdirs(parent, err) : 0;
    free(parent);
    if (rc == 0 && mkdir(dir, 0777) != 0 && errno != EEXIST)
        rc = ckpt_err_sys(err, "create directory '%s'", dir);
    return rc;
}

int ckpt_is_file_in(const char *dir, const char *name)
{
    char *p = ckpt_path_join(dir, name);
    struct stat sb;
    int r = stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
    free(p);
    return r;
}
