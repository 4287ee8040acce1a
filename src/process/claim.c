/*
 * claim.c - a run's claim within a batch of workers (`ckpt process
 * --batch ID`, a Slurm array): DEST/.ckpt-process/RUN_ID.claim, one small
 * JSON object {"batch","host","pid","run","token","done"}.
 *
 * Every worker of a batch walks the whole queue; the first to create the
 * claim (a conditional create) handles the run, and the others of the
 * batch leave it alone without a row: each run is handled once per batch
 * whatever the array's numbering, its slots and its start order, and a
 * task that starts after the others finished finds nothing left to take.
 * The lease (lease.c) still keeps the run from workers outside the batch.
 *
 * A claim of another batch is replaced (compare-and-swap on the version
 * read). One of this batch is taken over only when it is not "done" and
 * its worker is a process of this host that no longer exists (killed).
 * An interrupted worker deletes the claims of the runs it did not finish,
 * so a worker still walking takes them (queue.c walks the runs it found
 * claimed once more at its end).
 */
#include "process_int.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "ckpt/gate.h"
#include "ckpt/interrupt.h"
#include "ckpt/util.h"

#define CLAIM_MAX 4096
#define TAKE_TRIES 4

static void new_token(char out[40])
{
    unsigned char r[16];
    size_t got = 0;
    while (got < sizeof(r)) {
        ssize_t n = getrandom(r + got, sizeof(r) - got, 0);
        if (n < 0) {
            /* No entropy source: time and pid still tell us apart from
             * every other worker of the batch. */
            snprintf(out, 40, "%08lx%08lx", (unsigned long)time(NULL),
                     (unsigned long)getpid());
            return;
        }
        got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof(r); i++)
        snprintf(out + 2 * i, 3, "%02x", r[i]);
}

char *proc_claim_format(const struct proc_claim_holder *h)
{
    cJSON *j = cJSON_CreateObject();
    char pid[24];
    snprintf(pid, sizeof(pid), "%ld", h->pid);
    cJSON_AddStringToObject(j, "batch", h->batch);
    cJSON_AddStringToObject(j, "host", h->host);
    cJSON_AddRawToObject(j, "pid", pid);
    cJSON_AddStringToObject(j, "run", h->run);
    cJSON_AddStringToObject(j, "token", h->token);
    cJSON_AddBoolToObject(j, "done", h->done);
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!s)
        ckpt_die_oom("claim JSON");
    char *out = ckpt_xasprintf("%s\n", s);
    cJSON_free(s);
    return out;
}

/* Our claim's bytes. */
static char *format(const struct proc_run *o, int done)
{
    struct proc_claim_holder h;
    memset(&h, 0, sizeof(h));
    snprintf(h.batch, sizeof(h.batch), "%s", o->p->cfg.batch);
    snprintf(h.host, sizeof(h.host), "%s", o->cl.host);
    snprintf(h.run, sizeof(h.run), "%s", o->r->id);
    snprintf(h.token, sizeof(h.token), "%s", o->cl.token);
    h.pid = (long)getpid();
    h.done = done;
    return proc_claim_format(&h);
}

static int get_str(const cJSON *j, const char *name, char *out, size_t cap)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);
    if (!cJSON_IsString(v) || strlen(v->valuestring) >= cap)
        return -1;
    memcpy(out, v->valuestring, strlen(v->valuestring) + 1);
    return 0;
}

int proc_claim_parse(const char *data, size_t len,
                     struct proc_claim_holder *h)
{
    memset(h, 0, sizeof(*h));
    cJSON *j = cJSON_ParseWithLength(data, len);
    const cJSON *pid = j ? cJSON_GetObjectItemCaseSensitive(j, "pid") : NULL;
    const cJSON *done = j ? cJSON_GetObjectItemCaseSensitive(j, "done")
                          : NULL;
    /* A pid past 2^53 is no pid; within it the cast is exact. */
    int rc = j && cJSON_IsObject(j) &&
             get_str(j, "batch", h->batch, sizeof(h->batch)) == 0 &&
             get_str(j, "host", h->host, sizeof(h->host)) == 0 &&
             get_str(j, "run", h->run, sizeof(h->run)) == 0 &&
             get_str(j, "token", h->token, sizeof(h->token)) == 0 &&
             h->batch[0] && h->token[0] && cJSON_IsNumber(pid) &&
             pid->valuedouble >= -9007199254740992.0 &&
             pid->valuedouble <= 9007199254740992.0 &&
             cJSON_IsBool(done) ? 0 : -1;
    if (rc == 0) {
        h->pid = (long)pid->valuedouble;
        h->done = cJSON_IsTrue(done);
    } else {
        memset(h, 0, sizeof(*h));
    }
    cJSON_Delete(j);
    return rc;
}

/* The claim at DEST: 0 with *h and version, or -1 (CKPT_ENOTFOUND when
 * there is none, CKPT_EFORMAT when it is not a claim). */
static int read_claim(struct proc_run *o, struct proc_claim_holder *h,
                      char *version, struct ckpt_err *err)
{
    char *data = NULL;
    size_t len = 0;
    struct ckpt_storage *st = o->p->cfg.dst;
    if (ckpt_storage_get_versioned(st, o->cl.key, CLAIM_MAX, &data, &len,
                                   version, err) != 0)
        return -1;
    int rc = proc_claim_parse(data, len, h);
    free(data);
    if (rc != 0) {
        char *what = ckpt_storage_display(st, o->cl.key);
        ckpt_err_set(err, CKPT_EFORMAT, "%s: not a ckpt batch claim (remove "
                     "it if no batch is running)", what);
        free(what);
    }
    return rc;
}

/* A worker of this batch that was killed on this host (its claim never
 * marked done). */
static int holder_dead(const struct proc_run *o,
                       const struct proc_claim_holder *h)
{
    if (h->done || strcmp(h->host, o->cl.host) != 0 || h->pid <= 0 ||
        h->pid > INT_MAX || h->pid == (long)getpid())
        return 0;
    return kill((pid_t)h->pid, 0) != 0 && errno == ESRCH;
}

/* Replace the claim read at version ver with ours: 1, 0 when another
 * worker changed it first (try again), -1. */
static int swap(struct proc_run *o, const char *ver, struct ckpt_err *err)
{
    char *body = format(o, 0);
    int rc = ckpt_storage_put_if_match(o->p->cfg.dst, o->cl.key, body,
                                       strlen(body), ver, o->cl.version,
                                       err);
    free(body);
    if (rc == 0)
        return 1;
    return err->code == CKPT_EEXIST || err->code == CKPT_ENOTFOUND ? 0 : -1;
}

/* One round: 1 ours, 0 another worker's of the batch, 2 try again, -1. */
static int take_once(struct proc_run *o, struct ckpt_err *err)
{
    struct ckpt_storage *st = o->p->cfg.dst;
    struct proc_claim_holder h;
    char ver[CKPT_VERSION_MAX];
    char *body = format(o, 0);
    int rc = ckpt_storage_put_if_absent(st, o->cl.key, body, strlen(body),
                                        err);
    free(body);
    if (rc == 0) {
        /* Ours if our token is what is there now (the version is learnt
         * from the read: a create does not return one). */
        if (read_claim(o, &h, o->cl.version, err) != 0)
            return err->code == CKPT_ENOTFOUND ? 2 : -1;
        return strcmp(h.token, o->cl.token) ? 0 : 1;
    }
    /* 409 ConditionalRequestConflict: a concurrent create won (S3). */
    if (err->code != CKPT_EEXIST && err->http_status != 409)
        return -1;
    if (read_claim(o, &h, ver, err) != 0)
        return err->code == CKPT_ENOTFOUND ? 2 : -1;
    if (!strcmp(h.batch, o->p->cfg.batch) && !holder_dead(o, &h))
        return 0;
    rc = swap(o, ver, err);
    return rc == 0 ? 2 : rc;
}

int proc_claim_take(struct proc_run *o, struct ckpt_err *err)
{
    struct proc_claim *c = &o->cl;
    if (!c->token[0]) {
        new_token(c->token);
        if (gethostname(c->host, sizeof(c->host) - 1) != 0)
            snprintf(c->host, sizeof(c->host), "unknown");
    }
    int rc = 2;
    for (int i = 0; i < TAKE_TRIES && rc == 2; i++)
        rc = take_once(o, err);
    if (rc == 2) {
        char *what = ckpt_storage_display(o->p->cfg.dst, c->key);
        rc = ckpt_err_set(err, CKPT_EEXIST, "%s: the batch claim kept "
                          "changing under %d attempts", what, TAKE_TRIES);
        free(what);
    }
    c->held = rc == 1;
    if (rc < 0 && ckpt_interrupted())
        proc_claim_drop(o);
    return rc;
}

void proc_claim_done(struct proc_run *o)
{
    struct proc_claim *c = &o->cl;
    if (!c->held)
        return;
    struct ckpt_err err = CKPT_ERR_INIT;
    char *body = format(o, 1);
    char ver[CKPT_VERSION_MAX];
    ckpt_interrupt_shield();
    /* Lost to another batch meanwhile: theirs now, left alone. */
    (void)ckpt_storage_put_if_match(o->p->cfg.dst, c->key, body,
                                    strlen(body), c->version, ver, &err);
    ckpt_interrupt_unshield();
    free(body);
    c->held = 0;
}

void proc_claim_drop(struct proc_run *o)
{
    struct proc_claim *c = &o->cl;
    struct proc_claim_holder h;
    char ver[CKPT_VERSION_MAX];
    struct ckpt_err err = CKPT_ERR_INIT;
    ckpt_interrupt_shield();
    if (read_claim(o, &h, ver, &err) == 0 && !strcmp(h.token, c->token))
        (void)ckpt_gate_delete_if_match(CKPT_GATE_OWN(CKPT_GATE_OWN_STATE,
                                                      "a claim holding this "
                                                      "process's token"),
                                        o->p->cfg.dst, c->key, ver, &err);
    ckpt_interrupt_unshield();
    c->held = 0;
}
