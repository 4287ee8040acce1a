#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/gate.h"
#include "ckpt/buf.h"
#include "ckpt/pool.h"
#include "ckpt/tempname.h"
#include "ckpt/text.h"
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

static void check_escape(const char *in, const char *want)
{
    char *s = ckpt_escape(in);
    CHECK_STR(s, want);
    char *back = ckpt_unescape(s);
    CHECK_STR(back, in);
    free(back);
    CHECK_EQ(ckpt_escape_needed(in, strlen(in)), strcmp(in, want) != 0);
    CHECK(ckpt_utf8_valid(s, strlen(s)));
    free(s);
}

static void test_util__escape(void)
{
    check_escape("plain-name_1.x", "plain-name_1.x");
    check_escape("tab\tname", "tab\\tname");
    check_escape("tab\\tname", "tab\\\\tname");
    check_escape("a\tb\nc\rd", "a\\tb\\nc\\rd");
    check_escape("e\033[31m", "e\\x1b[31m");
    /* control bytes, ESC, DEL, backslash */
    check_escape("a\x01" "b\x1b[2J\x7f", "a\\x01b\\x1b[2J\\x7f");
    check_escape("a\nb\tc\rd\\e", "a\\nb\\tc\\rd\\\\e");
    /* valid UTF-8 stays; invalid bytes and C1 controls are escaped */
    check_escape("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
                 "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    check_escape("x\xffy", "x\\xffy");
    check_escape("\xc2\x9b" "31m", "\\xc2\\x9b31m");
    check_escape("\xc0\xaf", "\\xc0\\xaf");             /* overlong */
    check_escape("\xed\xa0\x80", "\\xed\\xa0\\x80");  /* surrogate */
    check_escape("\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80");
    check_escape("\xe2\x82", "\\xe2\\x82");             /* truncated */
    check_escape("\xc2", "\\xc2");
    CHECK(ckpt_utf8_valid("\xf0\x9f\x98\x80", 4));
    /* Not escapes of the scheme: kept as they are. */
    char *u = ckpt_unescape("a\\qb\\x0g\\x00c\\");
    CHECK_STR(u, "a\\qb\\x0g\\x00c\\");
    free(u);
    CHECK(!ckpt_utf8_valid("\xf0\x9f\x98", 3));
}

static void check_redact(const char *in, const char *want)
{
    struct ckpt_buf b = CKPT_BUF_INIT;
    ckpt_redact_add(&b, in, strlen(in));
    CHECK_STR(b.ptr, want);
    ckpt_buf_release(&b);
}

static void test_util__redact(void)
{
    check_redact("project not found", "project not found");
    check_redact("run ab12cd34 of ai2-llm/olmo-small: HTTP 500",
                 "run ab12cd34 of ai2-llm/olmo-small: HTTP 500");
    check_redact("Authorization: Basic YXBpOmxvY2Fs\r\nHost: x",
                 "[redacted]\r\nHost: x");
    check_redact("{'Authorization': 'Basic YXBpOmxvY2Fs', 'Accept': 'a'}",
                 "{'[redacted]', 'Accept': 'a'}");
    check_redact("\"authorization\":\"Bearer abc.def\"",
                 "\"[redacted]\"");
    check_redact("sent Basic YXBpOmxvY2Fs by", "sent [redacted] by");
    check_redact("Bearer ya29.a0AfH6SM", "[redacted]");
    check_redact("basic auth failed", "basic auth failed");
    check_redact("AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/2024"
                 "0101/us-east-1/s3/aws4_request, SignedHeaders=host, "
                 "Signature=fe5f80f77d5fa3beca038a248ff027d0445342fe2855d"
                 "db\nnext",
                 "[redacted]\nnext");
    check_redact("GET /b/k?X-Amz-Signature=abc123&X-Amz-Credential=AKIA%2F"
                 "x&X-Amz-Security-Token=FwoG&y=1",
                 "GET /b/k?[redacted]&[redacted]&[redacted]&y=1");
    check_redact("<Signature>abc</Signature>",
                 "<[redacted]</Signature>");
    check_redact("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG",
                 "AWS_[redacted]");
    check_redact("id AKIAIOSFODNN7EXAMPLE here", "id [redacted] here");
    check_redact("secret wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY end",
                 "secret [redacted] end");
    check_redact("key=local-0123, token: t0k, password = 'pw'",
                 "[redacted], [redacted], [redacted]'");
    check_redact("x 0123456789abcdef0123456789abcdef01234567 y",
                 "x [redacted] y");
    /* long, but only letters (or only digits): not a secret */
    check_redact("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
    char msg[64] = "W&B: bad key sekrit-1 (sekrit-1)";
    ckpt_redact_secret(msg, sizeof(msg), "sekrit-1");
    CHECK_STR(msg, "W&B: bad key [redacted] ([redacted])");
    char small[16] = "a sekrit-1 b";
    ckpt_redact_secret(small, sizeof(small), "sekrit-1");
    CHECK_STR(small, "a [redacted] b");
    ckpt_redact_secret(small, sizeof(small), "");
    CHECK_STR(small, "a [redacted] b");
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

/* A file longer than the cap is an error, never its truncated prefix. */
static void test_util__is_del_name(void)
{
    CHECK(ckpt_is_del_name(".step10.ckpt-del-vm-1-42"));
    CHECK(ckpt_is_del_name("run/.2871001.ckpt-del-host-7"));
    CHECK(ckpt_is_del_name("..ckpt-del-x.ckpt-del-h-9"));
    CHECK(!ckpt_is_del_name("step10.ckpt-del-vm-42"));    /* no dot */
    CHECK(!ckpt_is_del_name(".ckpt-del-vm-42"));         /* no X */
    CHECK(!ckpt_is_del_name(".step10.ckpt-del-vm-042"));
    CHECK(!ckpt_is_del_name(".step10.ckpt-del-vm-4x"));
    CHECK(!ckpt_is_del_name(".step10.ckpt-del--42"));
    CHECK(!ckpt_is_del_name(".step10.ckpt-del-vm"));
}

static void test_util__read_small_file(void)
{
    char dir[] = "/tmp/ckpt-test-util-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char *p = ckpt_path_join(dir, "f");
    FILE *f = fopen(p, "wb");
    CHECK(f && fputs("0123456789", f) >= 0 && fclose(f) == 0);
    char *t = ckpt_read_small_file(p, 10);
    CHECK_STR(t, "0123456789");
    free(t);
    errno = 0;
    CHECK(ckpt_read_small_file(p, 9) == NULL && errno == EFBIG);
    CHECK(unlink(p) == 0);
    CHECK(ckpt_read_small_file(p, 9) == NULL && errno == ENOENT);
    CHECK(rmdir(dir) == 0);
    free(p);
}

static pid_t dead_pid(void)
{
    pid_t pid = fork();
    if (pid == 0)
        _exit(0);
    waitpid(pid, NULL, 0);
    return pid;
}

/* Rename-first delete names: ".X.ckpt-del-HOST-PID", ours only when HOST
 * is this host and PID a dead process; X may hold the mark itself. */
static void test_util__del_names(void)
{
    char host[256] = "", name[600], *x = NULL;
    gethostname(host, sizeof(host) - 1);
    long dead = (long)dead_pid(), me = (long)getpid();
    char *t = ckpt_del_temp("a/step10");
    snprintf(name, sizeof(name), "a/.step10.ckpt-del-%s-%ld", host, me);
    CHECK_STR(t, name);
    free(t);
    char longbase[300];
    memset(longbase, 'n', 250);
    longbase[250] = '\0';
    CHECK(ckpt_del_temp(longbase) == NULL);      /* above NAME_MAX */
    CHECK(!ckpt_del_dead(name, NULL));           /* a live pid: ours */
    snprintf(name, sizeof(name), ".step10.ckpt-del-%s-%ld", host, dead);
    CHECK(ckpt_del_dead(name, &x) == 1);
    CHECK_STR(x, "step10");
    free(x);
    snprintf(name, sizeof(name), "d/.a.ckpt-del-b.ckpt-del-%s-%ld", host,
             dead);
    CHECK(ckpt_del_dead(name, &x) == 1);
    CHECK_STR(x, "a.ckpt-del-b");
    free(x);
    snprintf(name, sizeof(name), ".step10.ckpt-del-%s-%ld", "otherhost",
             dead);
    CHECK(!ckpt_del_dead(name, NULL));
    snprintf(name, sizeof(name), ".ckpt-del-%s-%ld", host, dead);
    CHECK(!ckpt_del_dead(name, NULL));           /* no X */
    snprintf(name, sizeof(name), ".s.ckpt-del-%s-0%ld", host, dead);
    CHECK(!ckpt_del_dead(name, NULL));
    snprintf(name, sizeof(name), ".s.ckpt-del-%s-%ldx", host, dead);
    CHECK(!ckpt_del_dead(name, NULL));
    snprintf(name, sizeof(name), "s.ckpt-del-%s-%ld", host, dead);
    CHECK(!ckpt_del_dead(name, NULL));           /* not hidden */

    /* In a directory: siblings found, sorted; the tree goes. */
    char dir[] = "/tmp/ckpt-test-del-XXXXXX", p[700];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(p, sizeof(p), "%s/.b.ckpt-del-%s-%ld", dir, host, dead);
    CHECK(mkdir(p, 0755) == 0);
    snprintf(p, sizeof(p), "%s/.b.ckpt-del-%s-%ld/sub", dir, host, dead);
    CHECK(mkdir(p, 0755) == 0);
    snprintf(p, sizeof(p), "%s/.a.ckpt-del-%s-%ld", dir, host, dead);
    CHECK(mkdir(p, 0755) == 0);
    snprintf(p, sizeof(p), "%s/.c.ckpt-del-%s-%ld", dir, host, me);
    CHECK(mkdir(p, 0755) == 0);
    size_t n;
    char **v = ckpt_del_dead_in(dir, &n);
    CHECK(n == 2);
    snprintf(name, sizeof(name), ".a.ckpt-del-%s-%ld", host, dead);
    CHECK(n == 2 && !strcmp(v[0], name));
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
    snprintf(name, sizeof(name), "%s/b", dir);
    t = ckpt_del_dead_sibling(name);
    snprintf(p, sizeof(p), "%s/.b.ckpt-del-%s-%ld", dir, host, dead);
    CHECK(t && !strcmp(t, p));
    free(t);
    snprintf(name, sizeof(name), "%s/c", dir);
    CHECK(ckpt_del_dead_sibling(name) == NULL);  /* a live pid's */
    (void)ckpt_gate_rm_tree(CKPT_GATE_OWN(CKPT_GATE_OWN_TEMP, "test"), dir, NULL);
    CHECK(access(dir, F_OK) != 0);
}

static void test_util__deadline_in(void)
{
    struct timespec before, ts, after;
    clock_gettime(CLOCK_REALTIME, &before);
    ckpt_deadline_in(&ts, 999999999L);
    clock_gettime(CLOCK_REALTIME, &after);
    CHECK(ts.tv_nsec >= 0 && ts.tv_nsec < 1000000000L);
#define NS(t) ((int64_t)(t).tv_sec * 1000000000 + (t).tv_nsec)
    CHECK(NS(ts) >= NS(before) + 999999999L);
    CHECK(NS(ts) <= NS(after) + 999999999L);
#undef NS
}

TEST_MAIN(T(test_util__parse_size), T(test_util__paths), T(test_util__buf),
          T(test_util__err), T(test_util__pool), T(test_util__die_oom),
          T(test_util__escape), T(test_util__redact), T(test_util__tempname),
          T(test_util__read_small_file), T(test_util__del_names),
          T(test_util__is_del_name), T(test_util__deadline_in))
