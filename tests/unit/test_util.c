#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt/buf.h"
#include "ckpt/pool.h"
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

/* ckpt_die_oom: the one abort, with what was being done on stderr. */
static void test_util__die_oom(void)
{
    int fd[2];
    CHECK(pipe(fd) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGABRT, SIG_DFL);
        dup2(fd[1], 2);
        ckpt_die_oom("allocating %zu bytes", (size_t)42);
    }
    close(fd[1]);
    char msg[128] = "";
    size_t len = 0;
    ssize_t n;
    while (len < sizeof(msg) - 1 &&
           (n = read(fd[0], msg + len, sizeof(msg) - 1 - len)) > 0)
        len += (size_t)n;
    msg[len] = '\0';
    close(fd[0]);
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
    CHECK_STR(msg, "ckpt: out of memory allocating 42 bytes\n");
}

TEST_MAIN(T(test_util__parse_size), T(test_util__paths), T(test_util__buf),
          T(test_util__err), T(test_util__pool), T(test_util__die_oom))
