/*
 * lease_tool.c - drive include/ckpt/lease.h from integration tests
 * (tests/integration/lease_s3.py) on any location.
 *
 *   lease_tool acquire LOC [--ttl N] [--shift S] [--host H] [--at T]
 *                          [--release] [--hold]
 *       One acquire; prints "acquired TOKEN", "taken-over TOKEN" or
 *       "leased HOST:PID until T". --shift moves this process's clock by S
 *       seconds (plant an expired lease with a negative shift); --at waits
 *       until UTC time T (a float) first, so racers start together;
 *       --release releases a lease it got and prints "released" (or
 *       "lost"). Without it the lease is left to lapse. --hold: after
 *       the answer, stay alive until stdin closes (a holder of this host
 *       that exited would be taken over at once, as a dead worker's).
 *   lease_tool takeover LOC
 *       A acquires (ttl 60), B takes over 61 s later (fake clock), then A
 *       renews, A releases, B renews, B releases: one line per step,
 *       "STEP RESULT".
 * Failure: "lease_tool: CODE: MESSAGE" on stderr, exit 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/lease.h"
#include "ckpt/storage.h"
#include "ckpt/util.h"

static int die(const struct ckpt_err *err)
{
    fprintf(stderr, "lease_tool: %s: %s\n", ckpt_err_name(err->code),
            err->msg);
    return 1;
}

static int64_t shifted(void *ud)
{
    return (int64_t)time(NULL) + *(int64_t *)ud;
}

static void wait_until(double t)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double left = t - ((double)ts.tv_sec + (double)ts.tv_nsec / 1e9);
    if (left > 5)
        left = 5;   /* a wrong --at must not hang a test */
    if (left > 0)
        usleep((useconds_t)(left * 1e6));
}

static int report(int r, struct ckpt_lease *l,
                  const struct ckpt_lease_holder *h)
{
    char who[512];
    if (r == CKPT_LEASE_LEASED) {
        ckpt_lease_holder_str(h, who, sizeof(who));
        printf("leased %s\n", who);
    } else {
        printf("%s %s\n", ckpt_lease_result_name(r), ckpt_lease_token(l));
    }
    return 0;
}

static int cmd_acquire(struct ckpt_storage *st, const char *key, int argc,
                       char **argv, struct ckpt_err *err)
{
    static int64_t shift;
    struct ckpt_lease_cfg cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.clock = shifted;
    cfg.clock_ud = &shift;
    int release = 0, hold = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "0";
        if (!strcmp(a, "--release") || !strcmp(a, "--hold")) {
            *(a[2] == 'r' ? &release : &hold) = 1;
            continue;
        }
        i++;
        if (!strcmp(a, "--ttl"))
            cfg.ttl = atoll(v);
        else if (!strcmp(a, "--shift"))
            shift = atoll(v);
        else if (!strcmp(a, "--host"))
            cfg.host = v;
        else if (!strcmp(a, "--at"))
            wait_until(atof(v));
        else
            return ckpt_err_set(err, CKPT_EUSAGE, "unknown option %s", a);
    }
    struct ckpt_lease *l = NULL;
    struct ckpt_lease_holder h;
    int r = ckpt_lease_acquire(st, key, "run", &cfg, &l, &h, err);
    if (r < 0)
        return -1;
    report(r, l, &h);
    if (hold) {
        char buf[64];
        fflush(stdout);
        while (fread(buf, 1, sizeof(buf), stdin) > 0)
            ;
    }
    if (!l)
        return 0;
    if (!release) {
        ckpt_lease_free(l);
        return 0;
    }
    r = ckpt_lease_release(l, err);
    if (r < 0)
        return -1;
    printf("%s\n", r == 0 ? "released" : "lost");
    return 0;
}

static int step(const char *name, int r)
{
    if (r < 0)
        return -1;
    const char *ok = strstr(name, "release") ? "released"
                   : strstr(name, "renew") ? "renewed" : "acquired";
    printf("%s %s\n", name, r == 0 ? ok : ckpt_lease_result_name(r));
    return 0;
}

static int cmd_takeover(struct ckpt_storage *st, const char *key,
                        struct ckpt_err *err)
{
    static int64_t shift_a, shift_b = 61;
    struct ckpt_lease_cfg a = { 60, "hostA", 1, shifted, &shift_a };
    struct ckpt_lease_cfg b = { 60, "hostB", 2, shifted, &shift_b };
    struct ckpt_lease *la = NULL, *lb = NULL;
    struct ckpt_lease_holder h;
    if (step("a-acquire", ckpt_lease_acquire(st, key, "run", &a, &la, &h,
                                             err)) != 0)
        return -1;
    int r = ckpt_lease_acquire(st, key, "run", &b, &lb, &h, err);
    if (step("b-acquire", r) != 0 || !lb) {
        ckpt_lease_free(la);
        return -1;
    }
    int rc = step("a-renew", ckpt_lease_renew(la, &h, err));
    if (rc == 0)
        printf("a-renew-holder %s:%ld\n", h.host, h.pid);
    rc = rc ? rc : step("a-release", ckpt_lease_release(la, err));
    rc = rc ? rc : step("b-renew", ckpt_lease_renew(lb, NULL, err));
    rc = rc ? rc : step("b-release", ckpt_lease_release(lb, err));
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: lease_tool acquire|takeover LOC ...\n");
        return 2;
    }
    struct ckpt_err err = CKPT_ERR_INIT;
    struct ckpt_loc loc;
    struct ckpt_storage *st = NULL;
    if (ckpt_loc_parse(&loc, argv[2], &err) != 0 ||
        ckpt_storage_open(&st, &loc, NULL, &err) != 0)
        return die(&err);
    int rc;
    if (!strcmp(argv[1], "acquire"))
        rc = cmd_acquire(st, loc.key, argc - 3, argv + 3, &err);
    else if (!strcmp(argv[1], "takeover"))
        rc = cmd_takeover(st, loc.key, &err);
    else
        rc = ckpt_err_set(&err, CKPT_EUSAGE, "unknown command %s", argv[1]);
    fflush(stdout);
    ckpt_storage_close(st);
    ckpt_loc_release(&loc);
    return rc == 0 ? 0 : die(&err);
}
