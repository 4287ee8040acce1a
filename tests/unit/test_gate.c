/* The delete gate (gate.h): what it refuses stays. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/gate.h"
#include "ckpt/err.h"
#include "ckpt/storage.h"
#include "ckpt/tempname.h"
#include "ckpt/util.h"
#include "test.h"

static char *file_in(const char *name)
{
    char *p = ckpt_path_join(test_tmpdir(), name);
    CHECK(test_write_file(p, "data", 4) == 0);
    return p;
}

static int exists(const char *p)
{
    struct stat sb;
    return lstat(p, &sb) == 0;
}

static int calls;

static int fails(void *data, struct ckpt_err *err)
{
    (void)data;
    calls++;
    return ckpt_err_set(err, CKPT_EUNSAFE, "run changed; not deleted");
}

static int passes(void *data, struct ckpt_err *err)
{
    (void)data;
    (void)err;
    calls++;
    return 0;
}

static int gone(void *data, struct ckpt_err *err)
{
    (void)data;
    (void)err;
    calls++;
    return 1;
}

/* A re-check that fails: refused with its message, the file stays. */
static void test_gate__recheck_fails(void)
{
    char *p = file_in("a");
    struct ckpt_err err = CKPT_ERR_INIT;
    struct ckpt_gate_proof proof = {
        .rule = CKPT_GATE_BAD_RUN, .evidence = "test", .recheck = fails,
    };
    calls = 0;
    CHECK_EQ(ckpt_gate_unlink(&proof, p, &err), -1);
    CHECK_EQ(calls, 1);
    CHECK_STR(err.msg, "run changed; not deleted");
    CHECK(exists(p));
    CHECK_EQ(ckpt_gate_rm_tree(&proof, p, &err), -1);
    CHECK_EQ(ckpt_gate_rename(&proof, p, "/nonexistent-x", &err), -1);
    CHECK(exists(p));
    /* and through storage */
    struct ckpt_storage *st = NULL;
    struct ckpt_loc loc;
    CHECK(ckpt_loc_parse(&loc, "/", &err) == 0);
    CHECK(ckpt_storage_open(&st, &loc, NULL, &err) == 0);
    ckpt_loc_release(&loc);
    CHECK_EQ(ckpt_gate_delete(&proof, st, p, &err), -1);
    CHECK_EQ(ckpt_gate_delete_tree(&proof, st, p, &err), -1);
    CHECK(exists(p));
    CHECK_EQ(calls, 5);
    /* it passes: deleted */
    proof.recheck = passes;
    CHECK_EQ(ckpt_gate_delete(&proof, st, p, &err), 0);
    CHECK(!exists(p));
    ckpt_storage_close(st);
    free(p);
}

/* No proof, no rule, no evidence, or a rule over data ckpt did not
 * write without a re-check: refused, the file stays. */
static void test_gate__missing_proof(void)
{
    char *p = file_in("b");
    struct ckpt_err err = CKPT_ERR_INIT;
    CHECK_EQ(ckpt_gate_unlink(NULL, p, &err), -1);
    CHECK_STR(err.msg, "delete gate: no proof; not deleted");
    struct ckpt_gate_proof none = { .evidence = "x" };
    CHECK_EQ(ckpt_gate_unlink(&none, p, &err), -1);
    CHECK_STR(err.msg, "delete gate: no proof; not deleted");
    struct ckpt_gate_proof bare = { .rule = CKPT_GATE_OWN_TEMP };
    CHECK_EQ(ckpt_gate_unlink(&bare, p, &err), -1);
    CHECK_STR(err.msg, "delete gate: rule own-temp without evidence; not "
              "deleted");
    enum ckpt_gate_rule need[] = { CKPT_GATE_BAD_RUN, CKPT_GATE_PRUNED,
                                   CKPT_GATE_COPIED, CKPT_GATE_UNSHARDED,
                                   CKPT_GATE_DROPPED, CKPT_GATE_ASIDE };
    for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++) {
        struct ckpt_gate_proof q = { .rule = need[i], .evidence = "ev" };
        char want[200];
        snprintf(want, sizeof(want), "delete gate: rule %s (ev) without a "
                 "re-check; not deleted", ckpt_gate_rule_name(need[i]));
        CHECK_EQ(ckpt_gate_rm_tree(&q, p, &err), -1);
        CHECK_STR(err.msg, want);
    }
    CHECK(exists(p));
    /* ckpt's own file, with evidence: no re-check needed */
    CHECK_EQ(ckpt_gate_unlink(CKPT_GATE_OWN(CKPT_GATE_OWN_TEMP, "test"), p,
                              &err), 0);
    CHECK(!exists(p));
    free(p);
}

/* A re-check that finds it gone: success, nothing done, gone set. */
static void test_gate__recheck_gone(void)
{
    char *p = file_in("c");
    struct ckpt_err err = CKPT_ERR_INIT;
    struct ckpt_gate_proof proof = {
        .rule = CKPT_GATE_COPIED, .evidence = "test", .recheck = gone,
    };
    CHECK_EQ(ckpt_gate_unlink(&proof, p, &err), 0);
    CHECK_EQ(proof.gone, 1);
    CHECK(exists(p));
    (void)ckpt_gate_unlink(CKPT_GATE_OWN(CKPT_GATE_OWN_TEMP, "test"), p,
                           NULL);
    free(p);
}

/* A backend's held syscall outside the gate deletes nothing. */
static void test_gate__held_outside(void)
{
    char *p = file_in("d");
    errno = 0;
    CHECK_EQ(ckpt_gate_held_unlink(p), -1);
    CHECK_EQ(errno, EPERM);
    CHECK_EQ(ckpt_gate_held_unlinkat(AT_FDCWD, p, 0), -1);
    CHECK(exists(p));
    (void)ckpt_gate_unlink(CKPT_GATE_OWN(CKPT_GATE_OWN_TEMP, "test"), p,
                           NULL);
    free(p);
}

/* rm_tree: never follows a link, never removes a FIFO (nor the
 * directories holding it). */
static void test_gate__rm_tree_special(void)
{
    char *d = ckpt_path_join(test_tmpdir(), "tree");
    char *sub = ckpt_path_join(d, "sub");
    char *fifo = ckpt_path_join(sub, "fifo");
    char *outside = file_in("outside");
    char *link = ckpt_path_join(d, "link");
    char *f = ckpt_path_join(d, "f");
    CHECK(mkdir(d, 0755) == 0 && mkdir(sub, 0755) == 0);
    CHECK(mkfifo(fifo, 0644) == 0);
    CHECK(symlink(outside, link) == 0);
    CHECK(test_write_file(f, "x", 1) == 0);
    struct ckpt_err err = CKPT_ERR_INIT;
    CHECK_EQ(ckpt_gate_rm_tree(CKPT_GATE_OWN(CKPT_GATE_OWN_TEMP, "test"), d,
                               &err), -1);
    CHECK(strstr(err.msg, "is a FIFO; only regular files, links and "
                 "directories are deleted") != NULL);
    CHECK(exists(fifo) && exists(outside));
    CHECK(!exists(link) && !exists(f));
    CHECK(unlink(fifo) == 0);  /* the test's own FIFO */
    CHECK_EQ(ckpt_gate_rm_tree(CKPT_GATE_OWN(CKPT_GATE_OWN_TEMP, "test"), d,
                               &err), 0);
    CHECK(!exists(d) && exists(outside));
    free(d);
    free(sub);
    free(fifo);
    free(outside);
    free(link);
    free(f);
}

TEST_MAIN(T(test_gate__recheck_fails), T(test_gate__missing_proof),
          T(test_gate__recheck_gone), T(test_gate__held_outside),
          T(test_gate__rm_tree_special))
