/*
 * outputs.c - the unshard outputs of a `ckpt process` run at DEST.
 *
 * Unshard outputs are written straight to their place at DEST by the
 * unshard library (no local copy), through DEST's own storage; each one
 * (path, size, checksum) is recorded in the state as soon as its step is
 * done. Before anything is judged droppable or deleted, every recorded
 * output is checked at DEST: there with its size and checksum, its step's
 * "-unfinished" marker gone. The upload passes never touch them. Outputs
 * at DEST that the state does not record are adopted only when unsharding
 * again gives the same bytes.
 */
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ckpt/gate.h"
#include "ckpt/tempname.h"
#include "ckpt/text.h"
#include "ckpt/interrupt.h"
#include "ckpt/unshard.h"
#include "ckpt/util.h"
#include "process_int.h"

/* What this file removes of its own (gate.h). */
#define OWN_SCRATCH CKPT_GATE_OWN(CKPT_GATE_OWN_TEMP, \
                          "process's scratch directory of a proof")

/* An output directory below the run's DEST directory: "" for the run's
 * own (a run that is one checkpoint), else "stepN-unsharded". */
static const char *out_rel(const struct proc_run *o, const char *out)
{
    size_t n = strlen(o->dkey);
    if (strncmp(out, o->dkey, n) != 0)
        return NULL;
    return out[n] == '/' ? out + n + 1 : out[n] ? NULL : out + n;
}

/* The output directory of a recorded output path ("step1000-unsharded"
 * of "step1000-unsharded/model.pt"; "" for a run that is one
 * checkpoint), malloced. */
static char *out_dir(const char *path)
{
    const char *slash = strchr(path, '/');
    return slash ? ckpt_xstrndup(path, (size_t)(slash - path))
                 : ckpt_xstrdup("");
}

static int has_str(char *const *v, size_t n, const char *s)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(v[i], s))
            return 1;
    return 0;
}

/* STEPS of the row and the state: the unsharded steps at DEST that the
 * state records (the output directories of its outputs), plus extra[n]
 * (-n: the ones the pass would make or adopt), each once; not what one
 * pass unsharded (a rerun after a kill makes only what was missing). */
uint64_t proc_out_steps(const struct proc_state *s, char *const *extra,
                        size_t n)
{
    char **dirs = NULL;
    size_t nd = 0;
    for (size_t i = 0; i < s->nouts + n; i++) {
        char *d = i < s->nouts ? out_dir(s->outs[i].path)
                               : ckpt_xstrdup(extra[i - s->nouts]);
        if (has_str(dirs, nd, d)) {
            free(d);
            continue;
        }
        dirs = ckpt_xreallocarray(dirs, nd + 1, sizeof(*dirs));
        dirs[nd++] = d;
    }
    for (size_t i = 0; i < nd; i++)
        free(dirs[i]);
    free(dirs);
    return nd;
}

/* A step's outputs, written and committed: recorded in the state at once,
 * so that a worker killed after this never loses track of them. */
static void record_outputs(struct proc_run *o,
                           const struct ckpt_unshard_step_event *ev)
{
    const char *rel = out_rel(o, ev->out);
    struct ckpt_err err = CKPT_ERR_INIT;
    if (!rel)
        return;
    for (size_t i = 0; i < ev->res->nfiles; i++) {
        char *path = ckpt_path_join(rel, ev->res->files[i].name);
        proc_state_add_out(&o->s, path, ev->res->files[i].size,
                           ev->res->files[i].checksum,
                           ev->res->files[i].etag);
        free(path);
    }
    if (!o->s.src)
        o->s.src = ckpt_xstrdup(o->r->srcid);
    o->s.steps = proc_out_steps(&o->s, NULL, 0);
    if (proc_state_write(o->p->cfg.dst, o->state_key, o->r->id, &o->s,
                         &err) != 0 && !o->state_failed) {
        o->state_failed = 1;
        ckpt_buf_reset(&o->fail);
        ckpt_buf_addstr(&o->fail, err.msg);
    }
}

static void on_step(void *ud, const struct ckpt_unshard_step_event *ev)
{
    struct proc_run *o = ud;
    if (!strcmp(ev->action, "unsharded") ||
        !strcmp(ev->action, "would-unshard"))
        o->steps++;
    if (!strcmp(ev->action, "would-unshard")) {
        const char *rel = ev->out ? out_rel(o, ev->out) : NULL;
        o->wdirs = ckpt_xreallocarray(o->wdirs, o->nwdirs + 1,
                                      sizeof(*o->wdirs));
        o->wdirs[o->nwdirs] = rel ? ckpt_xstrdup(rel)
                                  : ckpt_xasprintf("/%zu", o->nwdirs);
        o->nwdirs++;
    }
    if (!strcmp(ev->action, "unsharded") && ev->res && ev->out)
        record_outputs(o, ev);
    if (!strcmp(ev->action, "skip") && ev->out && out_rel(o, ev->out)) {
        o->have = ckpt_xreallocarray(o->have, o->nhave + 1,
                                     sizeof(*o->have));
        o->have[o->nhave++] = ckpt_xstrdup(out_rel(o, ev->out));
    }
    if (!strcmp(ev->action, "would-unshard") && ev->ckpt && ev->res) {
        o->would = ckpt_xreallocarray(o->would, o->nwould + 1,
                                      sizeof(*o->would));
        o->would[o->nwould++] = ev->ckpt->step;
        for (size_t i = 0; ev->out && i < ev->res->nfiles; i++) {
            char *key = ckpt_path_join(ev->out, ev->res->files[i].name);
            char *disp = ckpt_storage_display(o->p->cfg.dst, key);
            proc_predict_file(o, disp, ev->res->files[i].size, 0);
            free(disp);
            free(key);
        }
    }
    else if (!strcmp(ev->action, "error") && !o->fail.len)
        ckpt_buf_addf(&o->fail, "%s: %s", ev->ckpt ? ev->ckpt->name : "run",
                      ev->detail);
}

/* Is path one of the recorded outputs of directory dir? */
static int recorded_in(const struct proc_state *s, const char *dir)
{
    size_t n = strlen(dir);
    for (size_t i = 0; i < s->nouts; i++)
        if (!n || (!strncmp(s->outs[i].path, dir, n) &&
                   s->outs[i].path[n] == '/'))
            return 1;
    return 0;
}

/* MD5 (hex) of a file at DEST, read back. */
static int dest_md5(struct ckpt_storage *st, const char *key, uint64_t size,
                     char *hex, struct ckpt_err *err)
{
    size_t cap = 4u << 20;
    char *buf = ckpt_xmalloc(cap);
    unsigned char d[16];
    unsigned dlen = 0;
    EVP_MD_CTX *m = EVP_MD_CTX_new();
    int rc = m && EVP_DigestInit_ex(m, EVP_md5(), NULL) ? 0
           : ckpt_err_set(err, CKPT_ENOMEM, "MD5");
    for (uint64_t off = 0; rc == 0 && off < size;) {
        size_t n = size - off < cap ? (size_t)(size - off) : cap, got = 0;
        rc = ckpt_storage_read(st, key, off, buf, n, &got, err);
        if (rc == 0 && got != n)
            rc = ckpt_err_set(err, CKPT_EIO, "%s: shorter than its size",
                              key);
        if (rc == 0)
            EVP_DigestUpdate(m, buf, n);
        off += n;
    }
    if (rc == 0) {
        EVP_DigestFinal_ex(m, d, &dlen);
        ckpt_hex_encode(d, sizeof(d), hex);
    }
    EVP_MD_CTX_free(m);
    free(buf);
    return rc;
}

/* ---- outputs at DEST that this run did not record ---- */

/* The step an output directory at DEST was made from: NAME-unsharded, or
 * with --unshard-format hf NAME-hf. 1 with *step, else 0. */
static int out_step(const struct ckpt_process_cfg *c, const char *dir,
                    int64_t *step)
{
    int uns = 0;
    if (c->unshard_format != CKPT_FORMAT_HF)
        return ckpt_checkpoint_name(dir, step, &uns) && uns;
    if (!ckpt_str_endswith(dir, "-hf"))
        return 0;
    char *name = ckpt_xstrndup(dir, strlen(dir) - 3);
    int ok = ckpt_checkpoint_name(name, step, &uns) && !uns;
    free(name);
    return ok;
}

/* The step unsharded again into a scratch directory: its files. */
struct rederive {
    struct ckpt_unshard_file *files;    /* owned copies (name owned) */
    size_t n;
    char *err;                          /* owned: the first error */
    int made;
};

static void rederive_step(void *ud, const struct ckpt_unshard_step_event *ev)
{
    struct rederive *r = ud;
    if (!strcmp(ev->action, "unsharded") && ev->res && !r->made) {
        r->made = 1;
        r->n = ev->res->nfiles;
        r->files = ckpt_xcalloc(r->n ? r->n : 1, sizeof(*r->files));
        for (size_t i = 0; i < r->n; i++) {
            r->files[i] = ev->res->files[i];
            r->files[i].name = ckpt_xstrdup(ev->res->files[i].name);
        }
    } else if (!strcmp(ev->action, "error") && !r->err) {
        r->err = ckpt_xstrdup(ev->detail);
    }
}

struct cmp_out {
    struct proc_run *o;
    const char *dir;                    /* below the run's DEST key */
    struct rederive *r;
    int record;                         /* record what matches */
    size_t seen;
    char *bad;                          /* owned: the first difference */
};

/* One file of the output at DEST against the same file unsharded again:
 * same name, size and MD5 (DEST's bytes read back). */
static int cmp_out_file(void *ud, const struct ckpt_entry *e)
{
    struct cmp_out *c = ud;
    struct ckpt_storage *st = c->o->p->cfg.dst;
    if (e->type != CKPT_ENTRY_FILE || c->bad || ckpt_is_temp_name(e->name))
        return 0;
    char *path = ckpt_path_join(c->dir, e->name);
    char *key = ckpt_path_join(c->o->dkey, path);
    char *disp = ckpt_storage_display(st, key);
    const struct ckpt_unshard_file *f = NULL;
    for (size_t i = 0; i < c->r->n && !f; i++)
        if (!strcmp(c->r->files[i].name, e->name))
            f = &c->r->files[i];
    char sum[33] = "";
    struct ckpt_err err = CKPT_ERR_INIT;
    if (!f)
        c->bad = ckpt_xasprintf("%s: not a file the step unshards to", disp);
    else if (f->size != e->size)
        c->bad = ckpt_xasprintf("%s: %llu bytes at DEST, %llu unsharded "
                                "again", disp, (unsigned long long)e->size,
                                (unsigned long long)f->size);
    else if (dest_md5(st, key, e->size, sum, &err) != 0)
        c->bad = ckpt_xasprintf("%s: %s", disp, err.msg);
    else if (strcasecmp(sum, f->checksum) != 0)
        c->bad = ckpt_xasprintf("%s: MD5 %s at DEST, %s unsharded again",
                                disp, sum, f->checksum);
    else {
        c->seen++;
        if (c->record)
            proc_state_add_out(&c->o->s, path, e->size, sum,
                               ckpt_storage_is_local(st) ? NULL : e->etag);
    }
    free(disp);
    free(key);
    free(path);
    return 0;
}

/* An output directory dir found complete at DEST that this run's state
 * does not record (a worker killed between a step's commit and its state
 * write, an earlier `ckpt unshard`, another source's run, or a stub):
 * never taken on trust. Unshard is deterministic, so the step is
 * unsharded again into a scratch directory and every file compared
 * (names, sizes, MD5 of DEST's bytes); equal: adopted (recorded when
 * record), else a conflict that fails the run and keeps its source
 * (DEST is not replaced: it is not this run's). 0, or -1 after the
 * run's row. */
static int rederive(struct proc_run *o, const char *dir, int record)
{
    const struct ckpt_process_cfg *c = &o->p->cfg;
    char *disp = ckpt_storage_display(c->dst, o->dkey);
    char *why = NULL;
    int64_t step;
    struct rederive r = { NULL, 0, NULL, 0 };
    char *tmpl = ckpt_path_join(o->p->tmp, "ckpt-rederive-XXXXXX");
    char *tmp = NULL;
    if (!out_step(c, dir, &step))
        why = ckpt_xstrdup("not a step this run unshards to");
    else if (!(tmp = mkdtemp(tmpl)))
        why = ckpt_xasprintf("cannot make a scratch directory in %s",
                             o->p->tmp);
    else {
        struct ckpt_unshard_run_cfg u = {
            .uo = { .sync = 0, .tmp_dir = o->p->tmp, .storage_cfg = c->storage,
                    .cancel = ckpt_interrupt_flag(), .checksum = 1,
                    .rank_values = c->rank_values,
                    .format = (enum ckpt_unshard_format)c->unshard_format,
                    .memory = o->p->run_mem, .jobs = o->p->run_jobs },
            .has_step = 1, .step = step, .tmp_dir = o->p->tmp,
            .on_step = rederive_step, .ud = &r,
        };
        if (ckpt_unshard_run(o->r->st, o->r->key, o->r->display, tmp, &u)
            != 0 || !r.made)
            why = ckpt_xasprintf("its step could not be unsharded again "
                                 "to compare: %s", r.err ? r.err
                                 : "no output");
    }
    if (!why) {
        struct cmp_out cmp = { o, dir, &r, record, 0, NULL };
        struct ckpt_err err = CKPT_ERR_INIT;
        char *key = ckpt_path_join(o->dkey, dir);
        if (ckpt_storage_list(c->dst, key, CKPT_LIST_RECURSIVE, cmp_out_file,
                              &cmp, &err) != 0)
            why = ckpt_xstrdup(err.msg);
        else if (cmp.bad)
            why = cmp.bad;
        else if (cmp.seen != r.n)
            why = ckpt_xasprintf("%zu of the %zu files the step unshards "
                                 "to are there", cmp.seen, r.n);
        if (why != cmp.bad)
            free(cmp.bad);
        free(key);
    }
    if (tmp)
        (void)ckpt_gate_rm_tree(OWN_SCRATCH, tmp, NULL);
    free(tmpl);
    for (size_t i = 0; i < r.n; i++)
        free(r.files[i].name);
    free(r.files);
    free(r.err);
    if (why) {
        char *d = ckpt_xasprintf("conflict: %s/%s at DEST was not written "
                                 "by this run and is not what it unshards "
                                 "to (%s); not replaced, source kept",
                                 disp, dir, why);
        proc_fail_run(o, CKPT_PROC_UNSHARD, d);
        free(d);
        free(why);
    }
    free(disp);
    return why ? -1 : 0;
}

/* Outputs unshard found complete at DEST that the state does not record:
 * adopted only when unsharding again gives the same bytes (rederive).
 * 0, or -1 after the run's row. */
static int adopt_outputs(struct proc_run *o)
{
    size_t before = o->s.nouts;
    for (size_t i = 0; i < o->nhave; i++)
        if (!recorded_in(&o->s, o->have[i]) && rederive(o, o->have[i], 1))
            return -1;
    return o->s.nouts == before ? 0
         : proc_save_state(o, PROC_NEW, CKPT_PROC_UNSHARD);
}

/* Unshard the run's sharded steps straight to DEST/.../stepN-unsharded/
 * through DEST's storage, with the run's share of -j as threads (a
 * remote output's parts are sent by the thread that completes them, so
 * threads wait on the network: more than the cores keep them busy) and
 * of the memory budget for part buffers. A remote output is marked
 * unfinished until complete, a local one appears by rename; a step whose
 * output is complete at DEST is skipped, so a rerun redoes only what a
 * killed worker left unfinished. 0, or -1 after the run's row. */
int proc_unshard(struct proc_run *o)
{
    const struct ckpt_process_cfg *c = &o->p->cfg;
    if (c->unshard == CKPT_PROC_UNSHARD_NONE)
        return 0;
    struct ckpt_unshard_run_cfg u = {
        .uo = { .dry_run = c->dry_run, .sync = 1, .tmp_dir = o->p->tmp,
                .cancel = ckpt_interrupt_flag(),
                .storage_cfg = c->storage,
                .dest_storage = c->dst, .checksum = 1,
                .rank_values = c->rank_values,
                .format = (enum ckpt_unshard_format)c->unshard_format,
                .memory = o->p->run_mem, .jobs = o->p->run_jobs,
                /* --bwlimit: outputs written to DEST share the limit */
                .rate = o->p->bw },
        .latest = c->unshard == CKPT_PROC_UNSHARD_LATEST,
        .skip_step0 = !c->unshard_step0, .tmp_dir = o->p->tmp,
        .on_step = on_step, .ud = o,
    };
    ckpt_buf_reset(&o->fail);
    o->steps = 0;
    if (ckpt_unshard_run(o->r->st, o->r->key, o->r->display, o->dkey, &u)
        != 0 || o->state_failed) {
        proc_fail_run(o, CKPT_PROC_UNSHARD, o->fail.len ? o->fail.ptr
                      : "unshard failed");
        return -1;
    }
    if (!c->dry_run && adopt_outputs(o) != 0)
        return -1;
    /* The steps at DEST once the phase is done: recorded ones (adopted
     * included), and -n those it would make or adopt (dry_have). */
    if (c->dry_run) {
        char **x = ckpt_xcalloc(o->nhave + o->nwdirs + 1, sizeof(*x));
        for (size_t i = 0; i < o->nhave; i++)
            x[i] = o->have[i];
        for (size_t i = 0; i < o->nwdirs; i++)
            x[o->nhave + i] = o->wdirs[i];
        o->steps = proc_out_steps(&o->s, x, o->nhave + o->nwdirs);
        free(x);
    } else {
        o->steps = proc_out_steps(&o->s, NULL, 0);
    }
    proc_emit(o, CKPT_PROC_UNSHARD,
              c->dry_run ? CKPT_PROC_WOULD : CKPT_PROC_OK, "", 0, 0);
    return 0;
}

/* ---- the recorded outputs, verified ---- */

/* Why DEST's ETag (remote) or MD5 (local) `got` does not match output
 * out, or NULL: the ETag the store gave it when written must be the one
 * it states now, and an MD5 of the form of ours (computed from the bytes
 * written) must be ours. */
static char *sum_fault(const struct proc_out *out, const char *got)
{
    int gm, om;
    int comparable = *out->sum && ckpt_etag_is_md5(got, &gm) &&
                     ckpt_etag_is_md5(out->sum, &om) && gm == om;
    if (*out->etag && strcasecmp(got, out->etag) != 0)
        return ckpt_xasprintf("checksum (ETag) %s at DEST, %s when written",
                              got, out->etag);
    if (comparable && strcasecmp(got, out->sum) != 0)
        return ckpt_xasprintf("checksum %s at DEST, %s written", got,
                              out->sum);
    /* DEST's answer must be compared with something: a size alone
     * proves no bytes. */
    if (!*out->etag && !comparable)
        return ckpt_xasprintf("checksum %s at DEST cannot be compared with "
                              "the output written (no ETag recorded)", got);
    return NULL;
}

/* Every recorded unshard output, checked at DEST before anything is
 * dropped or deleted: there with its size and checksum (the store's
 * ETag against the one it gave when written and, where it states an MD5
 * of that form, against the MD5 of the bytes written; a local file read
 * back and hashed), and its step's "-unfinished" marker gone (a writer
 * at work, or a killed one's). The verified steps are what
 * --drop-sharded may leave out. 0, or -1 after the run's row. */
int proc_verify_outputs(struct proc_run *o)
{
    struct ckpt_storage *st = o->p->cfg.dst;
    int remote = !ckpt_storage_is_local(st);
    struct ckpt_err err = CKPT_ERR_INIT;
    char *bad = NULL;
    o->nmade = 0;
    for (size_t i = 0; i < o->s.nouts && !bad; i++) {
        const struct proc_out *out = &o->s.outs[i];
        char *key = ckpt_path_join(o->dkey, out->path);
        char *disp = ckpt_storage_display(st, key);
        const char *slash = strchr(out->path, '/');
        char *dir = slash ? ckpt_xstrndup(out->path,
                                          (size_t)(slash - out->path))
                          : ckpt_xstrdup("");
        struct ckpt_stat sb;
        char sum[sizeof(sb.etag)] = "";
        if (ckpt_storage_stat(st, key, &sb, &err) != 0)
            bad = ckpt_xasprintf("%s: %s", disp, err.msg);
        else if (sb.type != CKPT_ENTRY_FILE || sb.size != out->size)
            bad = ckpt_xasprintf("%s: %llu bytes at DEST, %llu written",
                                 disp, (unsigned long long)sb.size,
                                 (unsigned long long)out->size);
        else if (!remote && dest_md5(st, key, sb.size, sum, &err) != 0)
            bad = ckpt_xasprintf("%s: %s", disp, err.msg);
        else if (remote)
            snprintf(sum, sizeof(sum), "%s", sb.etag);
        char *why = bad ? NULL : sum_fault(out, sum);
        if (why)
            bad = ckpt_xasprintf("%s: %s", disp, why);
        free(why);
        size_t dl = strlen(dir);
        int first = i == 0 || strncmp(o->s.outs[i - 1].path, dir, dl) != 0 ||
                    o->s.outs[i - 1].path[dl] != '/';
        if (!bad && *dir && first) {
            char *m = ckpt_path_join(o->dkey, dir);
            char *mkey = ckpt_xasprintf("%s-unfinished", m);
            char *md = ckpt_storage_display(st, mkey);
            if (ckpt_storage_stat(st, mkey, &sb, &err) == 0)
                bad = ckpt_xasprintf("%s: marked unfinished (a writer at "
                                     "work, or a killed one's)", md);
            else if (err.code != CKPT_ENOTFOUND)
                bad = ckpt_xasprintf("%s: %s", md, err.msg);
            ckpt_err_clear(&err);
            free(m);
            free(mkey);
            free(md);
        }
        int64_t step;
        int uns = 0;
        if (!bad && ckpt_checkpoint_name(dir, &step, &uns) && uns) {
            o->made = ckpt_xreallocarray(o->made, o->nmade + 1,
                                         sizeof(*o->made));
            o->made[o->nmade++] = step;
        }
        free(dir);
        free(disp);
        free(key);
    }
    if (!bad)
        return 0;
    proc_fail_run(o, CKPT_PROC_VERIFY, bad);
    free(bad);
    return -1;
}

/* -n: outputs unshard found complete at DEST that the state does not
 * record are compared as the real run compares them (rederive: a
 * conflict fails the run here too), and their steps, like those of
 * recorded ones, count as made for --drop-sharded. 0, or -1 after the
 * run's row. */
int proc_dry_have(struct proc_run *o)
{
    for (size_t i = 0; i < o->nhave; i++) {
        if (!recorded_in(&o->s, o->have[i]) && rederive(o, o->have[i], 0))
            return -1;
        int64_t step;
        int uns = 0;
        if (ckpt_checkpoint_name(o->have[i], &step, &uns) && uns) {
            o->would = ckpt_xreallocarray(o->would, o->nwould + 1,
                                          sizeof(*o->would));
            o->would[o->nwould++] = step;
        }
    }
    return 0;
}
