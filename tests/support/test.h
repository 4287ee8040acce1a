/*
 * test.h - the unit-test harness (header only).
 *
 *   static void test_util__parse_size(void) { CHECK(x == 1); ... }
 *   TEST_MAIN(T(test_util__parse_size), ...)
 *
 * Run a case by name: ./test_util test_util__parse_size. Each binary ends
 * with "N passed, N failed" and exits non-zero on any failure.
 */
#ifndef CKPT_TEST_H
#define CKPT_TEST_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct test_case {
    const char *name;
    void (*fn)(void);
};

static int test_failures_;
static int test_case_failed_;

#define T(fn) { #fn, fn }

#define test_cond(what, expr)                                              \
    do {                                                                   \
        if (!(expr)) {                                                     \
            fprintf(stderr, "  FAIL %s:%d: %s\n", __FILE__, __LINE__,     \
                    what);                                                 \
            test_case_failed_ = 1;                                         \
        }                                                                  \
    } while (0)

#define CHECK(expr) test_cond(#expr, expr)

#define CHECK_EQ(a, b)                                                     \
    do {                                                                   \
        long long a_ = (long long)(a), b_ = (long long)(b);                \
        if (a_ != b_) {                                                    \
            fprintf(stderr, "  FAIL %s:%d: %s == %s (%lld != %lld)\n",    \
                    __FILE__, __LINE__, #a, #b, a_, b_);                   \
            test_case_failed_ = 1;                                         \
        }                                                                  \
    } while (0)

#define CHECK_STR(a, b)                                                    \
    do {                                                                   \
        const char *a_ = (a), *b_ = (b);                                   \
        if (!a_ || !b_ || strcmp(a_, b_) != 0) {                           \
            fprintf(stderr, "  FAIL %s:%d: %s == %s (\"%s\" != \"%s\")\n", \
                    __FILE__, __LINE__, #a, #b, a_ ? a_ : "(null)",        \
                    b_ ? b_ : "(null)");                                   \
            test_case_failed_ = 1;                                         \
        }                                                                  \
    } while (0)

/* A fresh temporary directory for this process (created once). */
static __attribute__((unused)) const char *test_tmpdir(void)
{
    static char dir[256];
    if (!dir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(dir, sizeof(dir), "%s/ckpt-unit-XXXXXX", base ? base : "/tmp");
        if (!mkdtemp(dir)) {
            perror("mkdtemp");
            exit(2);
        }
    }
    return dir;
}

/* Write a file (parents must exist). Returns 0 or -1. */
static __attribute__((unused)) int test_write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int rc = fwrite(data, 1, len, f) == len ? 0 : -1;
    if (fclose(f) != 0)
        rc = -1;
    return rc;
}

static __attribute__((unused)) void test_cleanup_tmp(void)
{
    const char *d = test_tmpdir();
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d);
    if (system(cmd) != 0)
        fprintf(stderr, "warning: could not remove %s\n", d);
}

static __attribute__((unused)) int test_run(const struct test_case *cases, size_t n, int argc,
                    char **argv)
{
    int passed = 0, failed = 0;
    for (size_t i = 0; i < n; i++) {
        if (argc > 1) {
            int want = 0;
            for (int a = 1; a < argc; a++)
                if (!strcmp(argv[a], cases[i].name))
                    want = 1;
            if (!want)
                continue;
        }
        test_case_failed_ = 0;
        cases[i].fn();
        if (test_case_failed_) {
            fprintf(stderr, "FAIL %s\n", cases[i].name);
            failed++;
        } else {
            fprintf(stderr, "ok   %s\n", cases[i].name);
            passed++;
        }
    }
    test_failures_ = failed;
    test_cleanup_tmp();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : (passed ? 0 : 1);
}

#define TEST_MAIN(...)                                                     \
    int main(int argc, char **argv)                                        \
    {                                                                      \
        static const struct test_case cases_[] = { __VA_ARGS__ };          \
        return test_run(cases_, sizeof(cases_) / sizeof(cases_[0]), argc,  \
                        argv);                                             \
    }

#endif
