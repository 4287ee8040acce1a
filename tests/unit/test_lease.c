#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>

#include "ckpt/gate.h"
#include "ckpt/lease.h"
#include "ckpt/storage.h"
#include "ckpt/util.h"
#include "test.h"

#define ROUNDS 200
#define RACERS 8

static struct ckpt_storage *local(void)
{
    struct ckpt_loc loc;
    struct ckpt_storage *st = NULL;
    ckpt_loc_parse(&loc, "/", NULL);
    ckpt_storage_open(&st, &loc, NULL, NULL);
    ckpt_loc_release(&loc);
    return st;
}

/* A clock the tests move. */
static _Atomic int64_t fake_now = 1700000000;

static int64_t fake_clock(void *ud)
{
    (void)ud;
    return atomic_load(&fake_now);
}

static struct ckpt_lease_cfg cfg_for(const char *host, long pid, int64_t ttl)
{
    struct ckpt_lease_cfg c;
    memset(&c, 0, sizeof(c));
    c.host = host;
    c.pid = pid;
    c.ttl = ttl;
    c.clock = fake_clock;
    return c;
}

static char *lease_path(const char *name)
{
    return ckpt_xasprintf("%s/%s", test_tmpdir(), name);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = ckpt_xcalloc(1, 4096);
    size_t n = fread(buf, 1, 4095, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void test_lease__two_acquirers_one_wins(void)
{
    struct ckpt_storage *st = local();
    char *key = lease_path("two/run1.lease");
    struct ckpt_lease_cfg a = cfg_for("hostA", 11, 600);
    struct ckpt_lease_cfg b = cfg_for("hostB", 22, 600);
    struct ckpt_lease *la = NULL, *lb = NULL;
    struct ckpt_lease_holder h;
    struct ckpt_err err;
    int64_t t0 = atomic_load(&fake_now);
    CHECK_EQ(ckpt_lease_acquire(st, key, "run1", &a, &la, &h, &err),
             CKPT_LEASE_ACQUIRED);
    CHECK(la != NULL);
    CHECK_EQ(ckpt_lease_expires(la), t0 + 600);
    CHECK_EQ(ckpt_lease_renew_interval(la), 200);
    CHECK_EQ(strlen(ckpt_lease_token(la)), 32);
    CHECK_EQ(ckpt_lease_acquire(st, key, "run1", &b, &lb, &h, &err),
             CKPT_LEASE_LEASED);
    CHECK(lb == NULL);
    CHECK_STR(h.host, "hostA");
    CHECK_EQ(h.pid, 11);
    CHECK_STR(h.run, "run1");
    CHECK_EQ(h.acquired, t0);
    CHECK_EQ(h.expires, t0 + 600);
    CHECK_STR(h.token, ckpt_lease_token(la));
    char msg[128];
    struct ckpt_lease_holder fixed = h;
    fixed.expires = 1700000600;
    ckpt_lease_holder_str(&fixed, msg, sizeof(msg));
    CHECK_STR(msg, "hostA:11 until 2023-11-14T22:23:20Z");
    /* The object is the documented JSON. */
    char *body = slurp(key);
    char *want = ckpt_xasprintf("{\"host\":\"hostA\",\"pid\":11,\"run\":"
                                "\"run1\",\"acquired\":%lld,\"expires\":"
                                "%lld,\"token\":\"%s\"}\n", (long long)t0,
                                (long long)t0 + 600, ckpt_lease_token(la));
    CHECK_STR(body, want);
    free(want);
    free(body);
    CHECK_EQ(ckpt_lease_release(la, &err), 0);
    CHECK(access(key, F_OK) != 0);
    /* Released: the next acquirer gets it at once. */
    CHECK_EQ(ckpt_lease_acquire(st, key, "run1", &b, &lb, &h, &err),
             CKPT_LEASE_ACQUIRED);
    CHECK_EQ(ckpt_lease_release(lb, &err), 0);
    free(key);
    ckpt_storage_close(st);
}

static void test_lease__renew_extends(void)
{
    struct ckpt_storage *st = local();
    char *key = lease_path("renew.lease");
    struct ckpt_lease_cfg a = cfg_for("hostA", 11, 60);
    struct ckpt_lease *la = NULL;
    struct ckpt_err err;
    int64_t t0 = atomic_load(&fake_now);
    CHECK_EQ(ckpt_lease_acquire(st, key, "r", &a, &la, NULL, &err),
             CKPT_LEASE_ACQUIRED);
    atomic_store(&fake_now, t0 + 20);
    CHECK_EQ(ckpt_lease_renew(la, NULL, &err), CKPT_LEASE_ACQUIRED);
    CHECK_EQ(ckpt_lease_expires(la), t0 + 80);
    CHECK(ckpt_lease_valid(la, 30));
    CHECK(!ckpt_lease_valid(la, 60));
    /* A reader sees the new expiry; the acquisition time stays. */
    struct ckpt_lease_cfg b = cfg_for("hostB", 22, 60);
    struct ckpt_lease *lb = NULL;
    struct ckpt_lease_holder h;
    atomic_store(&fake_now, t0 + 70);  /* past the first expiry */
    CHECK_EQ(ckpt_lease_acquire(st, key, "r", &b, &lb, &h, &err),
             CKPT_LEASE_LEASED);
    CHECK_EQ(h.expires, t0 + 80);
    CHECK_EQ(h.acquired, t0);
    CHECK_EQ(ckpt_lease_renew(la, NULL, &err), CKPT_LEASE_ACQUIRED);
    CHECK_EQ(ckpt_lease_release(la, &err), 0);
    atomic_store(&fake_now, t0);
    free(key);
    ckpt_storage_close(st);
}

static void test_lease__expired_takeover_then_old_holder_lost(void)
{
    struct ckpt_storage *st = local();
    char *key = lease_path("take.lease");
    struct ckpt_lease_cfg a = cfg_for("hostA", 11, 60);
    struct ckpt_lease_cfg b = cfg_for("hostB", 22, 60);
    struct ckpt_lease *la = NULL, *lb = NULL;
    struct ckpt_lease_holder h;
    struct ckpt_err err;
    int64_t t0 = atomic_load(&fake_now);
    CHECK_EQ(ckpt_lease_acquire(st, key, "r", &a, &la, NULL, &err),
             CKPT_LEASE_ACQUIRED);
    /* At the expiry second itself the lease has lapsed. */
    atomic_store(&fake_now, t0 + 60);
    CHECK(!ckpt_lease_valid(la, 0));
    CHECK_EQ(ckpt_lease_acquire(st, key, "r", &b, &lb, &h, &err),
             CKPT_LEASE_TAKEN_OVER);
    CHECK(lb != NULL);
    CHECK_EQ(ckpt_lease_expires(lb), t0 + 120);
    /* A's renew loses the compare-and-swap and names the new holder. */
    memset(&h, 0, sizeof(h));
    CHECK_EQ(ckpt_lease_renew(la, &h, &err), CKPT_LEASE_LOST);
    CHECK_STR(h.host, "hostB");
    CHECK_EQ(h.pid, 22);
    CHECK(!ckpt_lease_valid(la, -1000));
    CHECK_EQ(ckpt_lease_renew(la, NULL, &err), CKPT_LEASE_LOST);
    /* A's release leaves B's lease alone. */
    CHECK_EQ(ckpt_lease_release(la, &err), CKPT_LEASE_LOST);
    char *body = slurp(key);
    CHECK(body && strstr(body, ckpt_lease_token(lb)));
    free(body);
    CHECK_EQ(ckpt_lease_renew(lb, NULL, &err), CKPT_LEASE_ACQUIRED);
    CHECK_EQ(ckpt_lease_release(lb, &err), 0);
    CHECK(access(key, F_OK) != 0);
    atomic_store(&fake_now, t0);
    free(key);
    ckpt_storage_close(st);
}

/* A holder that never saw the takeover (renew not called) still must not
 * delete the new holder's lease: release compares tokens. */
static void test_lease__release_by_non_holder_refused(void)
{
    struct ckpt_storage *st = local();
    char *key = lease_path("rel.lease");
    struct ckpt_lease_cfg a = cfg_for("hostA", 11, 60);
    struct ckpt_lease_cfg b = cfg_for("hostB", 22, 60);
    struct ckpt_lease *la = NULL, *lb = NULL;
    struct ckpt_err err;
    int64_t t0 = atomic_load(&fake_now);
    CHECK_EQ(ckpt_lease_acquire(st, key, "r", &a, &la, NULL, &err),
             CKPT_LEASE_ACQUIRED);
    atomic_store(&fake_now, t0 + 61);
    CHECK_EQ(ckpt_lease_acquire(st, key, "r", &b, &lb, NULL, &err),
             CKPT_LEASE_TAKEN_OVER);
    CHECK_EQ(ckpt_lease_release(la, &err), CKPT_LEASE_LOST);
    CHECK(access(key, F_OK) == 0);
    CHECK_EQ(ckpt_lease_release(lb, &err), 0);
    CHECK(access(key, F_OK) != 0);
    atomic_store(&fake_now, t0);
    free(key);
    ckpt_storage_close(st);
}

static void test_lease__not_a_lease_is_never_overwritten(void)
{
    struct ckpt_storage *st = local();
    char *key = lease_path("junk.lease");
    CHECK_EQ(test_write_file(key, "{\"host\":1}", 10), 0);
    struct ckpt_lease_cfg a = cfg_for("hostA", 11, 60);
    struct ckpt_lease *la = NULL;
    struct ckpt_err err;
    CHECK_EQ(ckpt_lease_acquire(st, key, "r", &a, &la, NULL, &err), -1);
    CHECK_EQ(err.code, CKPT_EFORMAT);
    CHECK(strstr(err.msg, "not a ckpt lease") != NULL);
    char *body = slurp(key);
    CHECK_STR(body, "{\"host\":1}");
    free(body);
    /* An expiry no int64 holds is not a lease either. */
    const char *huge = "{\"host\":\"h\",\"pid\":1,\"run\":\"r\",\"acquired\":0,"
                       "\"expires\":1e300,\"token\":\"t\"}";
    CHECK_EQ(test_write_file(key, huge, strlen(huge)), 0);
    CHECK_EQ(ckpt_lease_acquire(st, key, "r", &a, &la, NULL, &err), -1);
    CHECK_EQ(err.code, CKPT_EFORMAT);
    free(key);
    ckpt_storage_close(st);
}

/* The storage primitives under the lease: a stale version loses. */
static void test_lease__storage_compare_and_swap(void)
{
    struct ckpt_storage *st = local();
    char *key = lease_path("cas/obj");
    struct ckpt_err err;
    char v1[CKPT_VERSION_MAX], v2[CKPT_VERSION_MAX], v3[CKPT_VERSION_MAX];
    char *data = NULL;
    size_t len = 0;
    CHECK_EQ(ckpt_storage_put_if_absent(st, key, "one", 3, &err), 0);
    CHECK_EQ(ckpt_storage_get_versioned(st, key, 100, &data, &len, v1, &err),
             0);
    CHECK_STR(data, "one");
    free(data);
    /* MD5("one") */
    CHECK_STR(v1, "f97c5d29941bfb1b2fdab0874906ab82");
    CHECK_EQ(ckpt_storage_put_if_match(st, key, "two", 3, v1, v2, &err), 0);
    CHECK(strcmp(v1, v2) != 0);
    CHECK_EQ(ckpt_storage_put_if_match(st, key, "three", 5, v1, v3, &err),
             -1);
    CHECK_EQ(err.code, CKPT_EEXIST);
    CHECK_EQ(ckpt_gate_delete_if_match(CKPT_GATE_OWN(CKPT_GATE_OWN_TEMP, "test"), st, key, v1, &err), -1);
    CHECK_EQ(err.code, CKPT_EEXIST);
    data = slurp(key);
    CHECK_STR(data, "two");
    free(data);
    CHECK_EQ(ckpt_gate_delete_if_match(CKPT_GATE_OWN(CKPT_GATE_OWN_TEMP, "test"), st, key, v2, &err), 0);
    CHECK(access(key, F_OK) != 0);
    /* Gone: a replace loses, a delete has nothing to do. */
    CHECK_EQ(ckpt_storage_put_if_match(st, key, "x", 1, v2, NULL, &err), -1);
    CHECK_EQ(err.code, CKPT_EEXIST);
    CHECK(access(key, F_OK) != 0);
    CHECK_EQ(ckpt_gate_delete_if_match(CKPT_GATE_OWN(CKPT_GATE_OWN_TEMP, "test"), st, key, v2, &err), 0);
    free(key);
    ckpt_storage_close(st);
}

/* ---- races: exactly one winner per round ---- */

struct racer {
    struct ckpt_storage *st;
    const char *key;
    pthread_barrier_t *go;
    int id;
    int result;
    struct ckpt_lease *lease;
};

static void *race_one(void *ud)
{
    struct racer *r = ud;
    char host[16];
    snprintf(host, sizeof(host), "h%d", r->id);
    struct ckpt_lease_cfg c = cfg_for(host, 100 + r->id, 60);
    struct ckpt_err err;
    pthread_barrier_wait(r->go);
    r->result = ckpt_lease_acquire(r->st, r->key, "run", &c, &r->lease,
                                   NULL, &err);
    if (r->result < 0)
        fprintf(stderr, "  racer %d: %s\n", r->id, err.msg);
    return NULL;
}

/* Plant an expired lease at key (odd rounds race for a takeover). */
static void plant_expired(struct ckpt_storage *st, const char *key)
{
    struct ckpt_lease_cfg c = cfg_for("old", 1, 60);
    struct ckpt_lease *l = NULL;
    struct ckpt_err err;
    atomic_fetch_sub(&fake_now, 120);
    CHECK_EQ(ckpt_lease_acquire(st, key, "run", &c, &l, NULL, &err),
             CKPT_LEASE_ACQUIRED);
    atomic_fetch_add(&fake_now, 120);
    ckpt_lease_free(l);
}

static void test_lease__threads_race_one_winner_per_round(void)
{
    struct ckpt_storage *st = local();
    char *key = lease_path("race/threads.lease");
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, RACERS);
    int bad_rounds = 0, takeovers = 0;
    for (int round = 0; round < ROUNDS; round++) {
        int expired = round % 2;
        if (expired)
            plant_expired(st, key);
        struct racer r[RACERS];
        pthread_t t[RACERS];
        for (int i = 0; i < RACERS; i++) {
            r[i] = (struct racer){ st, key, &go, i, -1, NULL };
            pthread_create(&t[i], NULL, race_one, &r[i]);
        }
        int won = 0, leased = 0, winner = -1;
        for (int i = 0; i < RACERS; i++) {
            pthread_join(t[i], NULL);
            int want = expired ? CKPT_LEASE_TAKEN_OVER : CKPT_LEASE_ACQUIRED;
            if (r[i].result == want) {
                won++;
                winner = i;
            }
            leased += r[i].result == CKPT_LEASE_LEASED;
        }
        if (won != 1 || leased != RACERS - 1)
            bad_rounds++;
        takeovers += expired && won == 1;
        struct ckpt_err err;
        if (winner >= 0)
            CHECK_EQ(ckpt_lease_release(r[winner].lease, &err), 0);
        for (int i = 0; i < RACERS; i++)
            if (i != winner)
                ckpt_lease_free(r[i].lease);
    }
    CHECK_EQ(bad_rounds, 0);
    CHECK_EQ(takeovers, ROUNDS / 2);
    pthread_barrier_destroy(&go);
    free(key);
    ckpt_storage_close(st);
}

/* Separate processes (separate storage handles, flock across processes):
 * children wait on a pipe, then race; exit 10 = won, 11 = leased. */
static int child_race(const char *key, int fd, int id, int expired)
{
    char c;
    if (read(fd, &c, 1) != 1)
        _exit(3);
    struct ckpt_storage *st = local();
    char host[16];
    snprintf(host, sizeof(host), "p%d", id);
    struct ckpt_lease_cfg cfg = cfg_for(host, 0, 60);
    struct ckpt_lease *l = NULL;
    struct ckpt_err err;
    int r = ckpt_lease_acquire(st, key, "run", &cfg, &l, NULL, &err);
    ckpt_lease_free(l);
    ckpt_storage_close(st);
    int want = expired ? CKPT_LEASE_TAKEN_OVER : CKPT_LEASE_ACQUIRED;
    _exit(r == want ? 10 : r == CKPT_LEASE_LEASED ? 11 : 12);
}

static void test_lease__processes_race_one_winner_per_round(void)
{
    struct ckpt_storage *st = local();
    char *key = lease_path("race/procs.lease");
    enum { PROCS = 4 };
    int bad_rounds = 0;
    for (int round = 0; round < ROUNDS; round++) {
        int expired = round % 2;
        if (expired)
            plant_expired(st, key);
        int p[2];
        CHECK_EQ(pipe(p), 0);
        pid_t kids[PROCS];
        for (int i = 0; i < PROCS; i++) {
            kids[i] = fork();
            if (kids[i] == 0) {
                close(p[1]);
                child_race(key, p[0], i, expired);
            }
        }
        close(p[0]);
        CHECK_EQ(write(p[1], "gggg", PROCS), PROCS);
        close(p[1]);
        int won = 0, leased = 0;
        for (int i = 0; i < PROCS; i++) {
            int status = 0;
            waitpid(kids[i], &status, 0);
            int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
            won += code == 10;
            leased += code == 11;
        }
        if (won != 1 || leased != PROCS - 1)
            bad_rounds++;
        struct ckpt_err err;
        CHECK_EQ(ckpt_gate_delete(CKPT_GATE_OWN(CKPT_GATE_OWN_TEMP, "test"), st, key, &err), 0);
    }
    CHECK_EQ(bad_rounds, 0);
    free(key);
    ckpt_storage_close(st);
}

/* A lease of a process of this host that no longer exists is taken over
 * at once, before its expiry; a live one's, or another host's, is not. */
static void test_lease__dead_holder_of_this_host_taken_over(void)
{
    struct ckpt_storage *st = local();
    char *key = lease_path("dead.lease");
    pid_t kid = fork();
    if (kid == 0)
        _exit(0);
    waitpid(kid, NULL, 0);      /* reaped: that pid is gone */
    struct ckpt_lease_cfg dead = cfg_for("hostA", (long)kid, 600);
    struct ckpt_lease_cfg live = cfg_for("hostA", (long)getppid(), 600);
    struct ckpt_lease_cfg other = cfg_for("hostB", (long)kid, 600);
    struct ckpt_lease_cfg me = cfg_for("hostA", 0, 600);
    struct ckpt_lease *l = NULL, *lm = NULL;
    struct ckpt_lease_holder h;
    struct ckpt_err err;
    int64_t t0 = atomic_load(&fake_now);
    /* Another host's dead pid means nothing here. */
    CHECK_EQ(ckpt_lease_acquire(st, key, "r", &other, &l, &h, &err),
             CKPT_LEASE_ACQUIRED);
    ckpt_lease_free(l);
    CHECK_EQ(ckpt_lease_acquire(st, key, "r", &me, &lm, &h, &err),
             CKPT_LEASE_LEASED);
    CHECK_EQ(ckpt_gate_delete(CKPT_GATE_OWN(CKPT_GATE_OWN_TEMP, "test"), st, key, &err), 0);
    /* A live process of this host keeps it. */
    CHECK_EQ(ckpt_lease_acquire(st, key, "r", &live, &l, &h, &err),
             CKPT_LEASE_ACQUIRED);
    ckpt_lease_free(l);
    CHECK_EQ(ckpt_lease_acquire(st, key, "r", &me, &lm, &h, &err),
             CKPT_LEASE_LEASED);
    CHECK_EQ(ckpt_gate_delete(CKPT_GATE_OWN(CKPT_GATE_OWN_TEMP, "test"), st, key, &err), 0);
    /* A dead one of this host: taken over now, its holder reported. */
    CHECK_EQ(ckpt_lease_acquire(st, key, "r", &dead, &l, &h, &err),
             CKPT_LEASE_ACQUIRED);
    ckpt_lease_free(l);
    CHECK_EQ(ckpt_lease_acquire(st, key, "r", &me, &lm, &h, &err),
             CKPT_LEASE_TAKEN_OVER);
    CHECK(lm != NULL);
    CHECK_STR(h.host, "hostA");
    CHECK_EQ(h.pid, (long)kid);
    CHECK_EQ(h.expires, t0 + 600);
    CHECK_EQ(ckpt_lease_release(lm, &err), 0);
    free(key);
    ckpt_storage_close(st);
}

TEST_MAIN(T(test_lease__two_acquirers_one_wins),
          T(test_lease__dead_holder_of_this_host_taken_over),
          T(test_lease__renew_extends),
          T(test_lease__expired_takeover_then_old_holder_lost),
          T(test_lease__release_by_non_holder_refused),
          T(test_lease__not_a_lease_is_never_overwritten),
          T(test_lease__storage_compare_and_swap),
          T(test_lease__threads_race_one_winner_per_round),
          T(test_lease__processes_race_one_winner_per_round))
