#include <pthread.h>
#include <stdatomic.h>

#include "ckpt/buf.h"
#include "ckpt/pool.h"
#include "ckpt/tempname.h"
#include "ckpt/util.h"
#include "test.h"

static void test_util__parse_size(void)
{
    uint64_t v;
    struct ckpt_err err;
    CHECK(ckpt_parse_size("5G", &v, &err) == 0 && v == 5ULL << 30);
    CHECK(ckpt_parse_size("512MiB", &v, &err) == 0 && v == 512ULL << 20);
    CHECK(ckpt_parse_size("100k", &v, &err) == 0 && v == 102400);
    CHECK(ckpt_parse_size("42", &v, &err) == 0 && v == 42);
    CHECK(ckpt_parse_size("7B", &v, &err) == 0 && v == 7);
    CHECK(ckpt_parse_size("", &v, &err) == -1);
    CHECK(ckpt_parse_size("G", &v, &err) == -1);
    CHECK(ckpt_parse_size("5X", &v, &err) == -1);
    CHECK_STR(err.msg, "invalid size '5X'");
    CHECK(ckpt_parse_size("99999999999P", &v, &err) == -1);
}

static void test_util__paths(void)
{
    char *s;
    CHECK_STR(s = ckpt_path_join("a", "b"), "a/b"); free(s);
    CHECK_STR(s = ckpt_path_join("a/", "/b"), "a/b"); free(s);
    CHECK_STR(s = ckpt_path_join("", "b"), "b"); free(s);
    CHECK_STR(s = ckpt_path_basename("a/b/"), "b"); free(s);
    CHECK_STR(s = ckpt_path_basename("b"), "b"); free(s);
    CHECK_STR(s = ckpt_path_dirname("a/b/c"), "a/b"); free(s);
    CHECK_STR(s = ckpt_path_dirname("c"), ""); free(s);
    CHECK_STR(s = ckpt_path_dirname("/c"), "/"); free(s);
}

static void test_util__buf(void)
{
    struct ckpt_buf b = CKPT_BUF_INIT;
    CHECK_STR(b.ptr, "");
    ckpt_buf_addf(&b, "%d-%s", 12, "x");
    ckpt_buf_add(&b, "\0y", 2);
    CHECK_EQ(b.len, 6);
    CHECK(memcmp(b.ptr, "12-x\0y", 7) == 0);
    ckpt_buf_setlen(&b, 2);
    CHECK_STR(b.ptr, "12");
    size_t len;
    char *d = ckpt_buf_detach(&b, &len);
    CHECK_EQ(len, 2);
    CHECK_STR(d, "12");
    CHECK_STR(b.ptr, "");
    free(d);
    ckpt_buf_release(&b);
}

static void test_util__err(void)
{
    struct ckpt_err err;
    errno = ENOENT;
    CHECK(ckpt_err_sys(&err, "open '%s'", "/x") == -1);
    CHECK_STR(err.msg, "open '/x': No such file or directory");
    CHECK_EQ(err.code, CKPT_ENOTFOUND);
    ckpt_err_prefix(&err, "run %s", "r1");
    CHECK_STR(err.msg, "run r1: open '/x': No such file or directory");
}

static _Atomic int counter;

static void add_one(void *arg)
{
    atomic_fetch_add(&counter, *(int *)arg);
}

static void test_util__pool(void)
{
    struct ckpt_pool *p = ckpt_pool_new(4, 2);
    CHECK(p != NULL);
    static int one = 1;
    for (int i = 0; i < 1000; i++)
        ckpt_pool_submit(p, add_one, &one);
    ckpt_pool_wait(p);
    CHECK_EQ(atomic_load(&counter), 1000);
    ckpt_pool_free(p);
}

/* Short names with host and pid; parse accepts exactly that form. */
static void test_util__tempname(void)
{
    char *a = ckpt_temp_path("some/dir"), *b = ckpt_temp_path("");
    uint32_t host = 0;
    long pid = 0;
    CHECK(strncmp(a, "some/dir/.ckpt-", 15) == 0);
    CHECK(strlen(a) < 9 + 40);
    CHECK(ckpt_temp_parse(a, &host, &pid) == 1);
    CHECK(host == ckpt_temp_host() && pid == (long)getpid());
    CHECK(strchr(b, '/') == NULL && ckpt_temp_parse(b, NULL, NULL) == 1);
    CHECK(strcmp(a + 9, b) != 0);   /* unique within the process */
    CHECK(ckpt_temp_parse(".ckpt-0123abcd-42-0.tmp", &host, &pid) == 1 &&
          host == 0x0123abcd && pid == 42);
    CHECK(!ckpt_temp_parse(".ckpt-0123abcd-42-0.tmpx", NULL, NULL));
    CHECK(!ckpt_temp_parse(".ckpt-0123abc-42-0.tmp", NULL, NULL));
    CHECK(!ckpt_temp_parse(".ckpt-0123abcd--42-0.tmp", NULL, NULL));
    CHECK(!ckpt_temp_parse(".ckpt-0123abcd-0-0.tmp", NULL, NULL));
    CHECK(!ckpt_temp_parse(".ckpt-0123abcd-42-0.old", NULL, NULL));
    CHECK(!ckpt_temp_parse("model.pt", NULL, NULL));
    CHECK(ckpt_is_temp_name("d/.model.pt.ckpt-up-1-2-3"));
    CHECK(ckpt_is_temp_name(".ckpt-tmp-77"));
    CHECK(ckpt_is_temp_name(a));
    CHECK(!ckpt_is_temp_name("d/ckpt-tmp-77"));
    free(a);
    free(b);
}

TEST_MAIN(T(test_util__parse_size), T(test_util__paths), T(test_util__buf),
          T(test_util__err), T(test_util__pool), T(test_util__tempname))
