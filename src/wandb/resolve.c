/*
 * resolve.c - map many runs to W&B run paths with few requests.
 *
 * Phases, each over every run still unresolved, strongest evidence first:
 *   local-id      ids of local wandb/run-*-ID dirs, confirmed with a Run
 *                 query (one id in the project) or `name $in` Runs
 *                 queries of up to 50 ids;
 *   slurm         the Slurm job id against config.save_folder, one $regex
 *                 query per 50 ids: "/(123|456)$";
 *   display-name  wandb.name (+ group) from config.yaml or the RunRecord,
 *                 one $or query per 50 names.
 * Candidates from the searches must match the training config
 * (ckpt_wandb_config_match); one match wins, several are reported as
 * ambiguous unless they are requeues of one job (same save_folder), in
 * which case the latest wins and checkpoint steps are split between them
 * by each run's last logged step.
 *
 * Runs of one project share queries: keys are pooled per project, sorted,
 * deduplicated and chunked, every distinct (project, filter) is sent once,
 * and the queries of a phase run in parallel on the pool.
 */
#include "resolve_int.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/pool.h"
#include "ckpt/util.h"

/* ---- small helpers ---- */

void wb_strv_push(struct strv *s, const char *x)
{
    s->v = ckpt_xreallocarray(s->v, s->n + 1, sizeof(*s->v));
    s->v[s->n++] = ckpt_xstrdup(x);
}

void wb_strv_release(struct strv *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
    s->v = NULL;
    s->n = 0;
}

int wb_strv_has(const struct strv *s, const char *x)
{
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->v[i], x))
            return 1;
    return 0;
}

/* ---- queries ---- */

static int same(const char *a, const char *b)
{
    return (!a && !b) || (a && b && !strcmp(a, b));
}

static size_t add_query(struct resolver *r, const char *e, const char *p,
                        const char *filter, const char *name)
{
    for (size_t i = 0; i < r->nq; i++) {
        struct query *q = r->q[i];
        if (!strcmp(q->entity, e) && !strcmp(q->project, p) &&
            same(q->filter, filter) && same(q->name, name))
            return i;
    }
    struct query *q = ckpt_xcalloc(1, sizeof(*q));
    q->r = r;
    q->entity = ckpt_xstrdup(e);
    q->project = ckpt_xstrdup(p);
    q->filter = filter ? ckpt_xstrdup(filter) : NULL;
    q->name = name ? ckpt_xstrdup(name) : NULL;
    r->q = ckpt_xreallocarray(r->q, r->nq + 1, sizeof(*r->q));
    r->q[r->nq] = q;
    return r->nq++;
}

static void job_use(struct job *j, size_t qi)
{
    for (size_t i = 0; i < j->nqs; i++)
        if (j->qs[i] == qi)
            return;
    j->qs = ckpt_xreallocarray(j->qs, j->nqs + 1, sizeof(*j->qs));
    j->qs[j->nqs++] = qi;
}

static void note_auth(struct resolver *r, const struct ckpt_err *err)
{
    if (err->code != CKPT_EAUTH || err->http_status != 401)
        return;
    pthread_mutex_lock(&r->mu);
    if (!atomic_load(&r->auth_failed))
        r->auth_err = *err;
    atomic_store(&r->auth_failed, 1);
    pthread_mutex_unlock(&r->mu);
}

static void run_query(void *arg)
{
    struct query *q = arg;
    struct resolver *r = q->r;
    int rc;
    if (atomic_load(&r->auth_failed)) {
        /* The key was rejected: every further request would be too. */
        pthread_mutex_lock(&r->mu);
        q->err = r->auth_err;
        pthread_mutex_unlock(&r->mu);
        q->failed = 1;
        return;
    }
    if (q->filter) {
        rc = ckpt_wandb_list_runs(r->c, q->entity, q->project, q->filter,
                                  &q->runs, &q->err);
    } else {
        struct ckpt_wandb_run run;
        int found = 0;
        rc = ckpt_wandb_get_run(r->c, q->entity, q->project, q->name, &run,
                                &found, &q->err);
        if (rc == 0 && found) {
            q->runs.v = ckpt_xmalloc(sizeof(*q->runs.v));
            q->runs.v[0] = run;
            q->runs.n = 1;
        }
    }
    if (rc != 0) {
        q->failed = 1;
        note_auth(r, &q->err);
    }
}

/* Send every query not sent yet, in parallel when there are several. */
static void run_pending(struct resolver *r)
{
    size_t pending = 0;
    for (size_t i = 0; i < r->nq; i++)
        pending += !r->q[i]->ran;
    int jobs = r->o->jobs > 0 ? r->o->jobs : 4;
    if (pending > 1 && jobs > 1 && !r->pool)
        r->pool = ckpt_pool_new(jobs, (size_t)jobs * 2);
    for (size_t i = 0; i < r->nq; i++) {
        struct query *q = r->q[i];
        if (q->ran)
            continue;
        q->ran = 1;
        if (pending > 1 && r->pool &&
            ckpt_pool_submit(r->pool, run_query, q) == 0)
            continue;
        run_query(q);
    }
    if (r->pool)
        ckpt_pool_wait(r->pool);
}

/* ---- results ---- */

void wb_note(struct job *j, const char *fmt, ...)
{
    va_list ap;
    if (j->notes.len)
        ckpt_buf_addstr(&j->notes, "; ");
    va_start(ap, fmt);
    ckpt_buf_vaddf(&j->notes, fmt, ap);
    va_end(ap);
}

char *wb_path_of(const struct job *j, const char *id)
{
    return ckpt_xasprintf("%s/%s/%s", j->entity, j->project, id);
}

void wb_finish(struct job *j, int status, const char *source,
               char *evidence /* owned */)
{
    struct ckpt_wandb_result *res = j->res;
    static const char *const prefix[] = { "", "ambiguous: ", "unknown: ",
                                          "error: " };
    res->status = status;
    res->source = ckpt_xstrdup(source ? source : "");
    res->evidence = ckpt_xasprintf("%s%s", prefix[status], evidence);
    free(evidence);
    j->done = 1;
}

void wb_set_candidates(struct job *j, const struct strv *paths)
{
    struct ckpt_wandb_result *res = j->res;
    res->candidates = ckpt_xcalloc(paths->n ? paths->n : 1, sizeof(char *));
    for (size_t i = 0; i < paths->n; i++)
        res->candidates[i] = ckpt_xstrdup(paths->v[i]);
    res->ncandidates = paths->n;
}

char *wb_joined(const struct strv *s, size_t max)
{
    struct ckpt_buf b = CKPT_BUF_INIT;
    for (size_t i = 0; i < s->n && i < max; i++)
        ckpt_buf_addf(&b, "%s%s", i ? ", " : "", s->v[i]);
    if (s->n > max)
        ckpt_buf_addf(&b, ", ... (%zu in all)", s->n);
    return ckpt_buf_detach(&b, NULL);
}

int wb_cmp_created(const void *a, const void *b)
{
    const struct ckpt_wandb_run *x = *(const struct ckpt_wandb_run *const *)a;
    const struct ckpt_wandb_run *y = *(const struct ckpt_wandb_run *const *)b;
    int c = strcmp(x->created_at ? x->created_at : "",
                   y->created_at ? y->created_at : "");
    return c ? c : strcmp(x->name, y->name);
}

int64_t wb_local_last_step(const struct job *j, const char *id)
{
    for (size_t i = 0; i < j->ev->nruns; i++)
        if (!strcmp(j->ev->runs[i].id, id) && j->ev->runs[i].last_step >= 0)
            return j->ev->runs[i].last_step;
    return -1;
}

/*
 * Split checkpoint steps between the W&B runs of a requeued job, oldest
 * first: run k wrote the steps after run k-1's last logged step up to its
 * own. Only when every run's last step is known and they increase;
 * otherwise every step belongs to the latest run (no per-step entries).
 */
static int map_steps(struct job *j, const char *const *ids,
                     const int64_t *last, size_t n)
{
    const struct ckpt_wandb_evidence *ev = j->ev;
    if (n < 2 || !ev->nsteps)
        return 0;
    for (size_t k = 0; k < n; k++)
        if (last[k] < 0 || (k && last[k] < last[k - 1]))
            return 0;
    size_t *owner = ckpt_xcalloc(ev->nsteps, sizeof(*owner));
    int split = 0;
    for (size_t s = 0; s < ev->nsteps; s++) {
        size_t k = 0;
        while (k + 1 < n && ev->steps[s] > last[k])
            k++;
        owner[s] = k;
        split |= k != owner[0];
    }
    if (split) {
        j->res->steps = ckpt_xcalloc(ev->nsteps, sizeof(*j->res->steps));
        for (size_t s = 0; s < ev->nsteps; s++) {
            j->res->steps[s].step = ev->steps[s];
            j->res->steps[s].path = wb_path_of(j, ids[owner[s]]);
        }
        j->res->nsteps = ev->nsteps;
    }
    free(owner);
    return split;
}

void wb_found_ids(struct job *j, const char *const *ids, const int64_t *last,
                  size_t n, const char *source, char *evidence /* owned */)
{
    j->res->runs = ckpt_xcalloc(n, sizeof(char *));
    for (size_t k = 0; k < n; k++)
        j->res->runs[k] = wb_path_of(j, ids[k]);
    j->res->nruns = n;
    j->res->path = wb_path_of(j, ids[n - 1]);
    if (map_steps(j, ids, last, n)) {
        char *e = ckpt_xasprintf("%s; checkpoint steps split between the "
                                 "%zu W&B runs by last logged step",
                                 evidence, n);
        free(evidence);
        evidence = e;
    }
    wb_finish(j, CKPT_WANDB_FOUND, source, evidence);
}

void wb_found(struct job *j, struct ckpt_wandb_run **runs, size_t n,
              const char *source, char *evidence /* owned */)
{
    const char **ids = ckpt_xcalloc(n, sizeof(*ids));
    int64_t *last = ckpt_xcalloc(n, sizeof(*last));
    for (size_t k = 0; k < n; k++) {
        ids[k] = runs[k]->name;
        /* What the local files say wins: the server summary may have
         * been edited after the run. */
        last[k] = wb_local_last_step(j, ids[k]);
        if (last[k] < 0)
            last[k] = runs[k]->last_step;
    }
    wb_found_ids(j, ids, last, n, source, evidence);
    free(ids);
    free(last);
}

/* ---- phases ---- */

struct pgroup {
    const char *entity, *project;  /* borrowed */
    struct strv keys;
    size_t *chunk_q;               /* owned; query of each chunk */
};

static size_t find_group(struct pgroup **gs, size_t *ng, const struct job *j)
{
    for (size_t i = 0; i < *ng; i++)
        if (!strcmp((*gs)[i].entity, j->entity) &&
            !strcmp((*gs)[i].project, j->project))
            return i;
    *gs = ckpt_xreallocarray(*gs, *ng + 1, sizeof(**gs));
    memset(&(*gs)[*ng], 0, sizeof(**gs));
    (*gs)[*ng].entity = j->entity;
    (*gs)[*ng].project = j->project;
    return (*ng)++;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void sort_unique(struct strv *s)
{
    if (s->n < 2)
        return;
    ckpt_sort(s->v, s->n, sizeof(*s->v), cmp_str);
    size_t o = 1;
    for (size_t i = 1; i < s->n; i++) {
        if (strcmp(s->v[i], s->v[o - 1]))
            s->v[o++] = s->v[i];
        else
            free(s->v[i]);
    }
    s->n = o;
}

static void plan_group(struct resolver *r, const struct phase *ph,
                       struct pgroup *g)
{
    sort_unique(&g->keys);
    size_t nchunks = (g->keys.n + CHUNK - 1) / CHUNK;
    g->chunk_q = ckpt_xcalloc(nchunks ? nchunks : 1, sizeof(size_t));
    for (size_t c = 0; c < nchunks; c++) {
        size_t off = c * CHUNK;
        size_t n = g->keys.n - off < CHUNK ? g->keys.n - off : CHUNK;
        char *f = ph->filter(g->keys.v + off, n);
        g->chunk_q[c] = add_query(r, g->entity, g->project, f,
                                  f ? NULL : g->keys.v[off]);
        free(f);
    }
}

static void attach_queries(struct job *j, const struct pgroup *g)
{
    for (size_t k = 0; k < j->keys.n; k++) {
        char *const *hit = bsearch(&j->keys.v[k], g->keys.v, g->keys.n,
                                   sizeof(*g->keys.v), cmp_str);
        if (hit)
            job_use(j, g->chunk_q[(size_t)(hit - g->keys.v) / CHUNK]);
    }
}

static void run_phase(struct resolver *r, const struct phase *ph)
{
    struct pgroup *gs = NULL;
    size_t ng = 0;
    for (size_t i = 0; i < r->n; i++) {
        struct job *j = &r->jobs[i];
        j->nqs = 0;
        wb_strv_release(&j->keys);
        if (j->done || !j->entity || !j->project)
            continue;
        ph->keys(r, j);
        if (!j->keys.n)
            continue;
        j->group_ix = find_group(&gs, &ng, j);
        for (size_t k = 0; k < j->keys.n; k++)
            wb_strv_push(&gs[j->group_ix].keys, j->keys.v[k]);
    }
    for (size_t g = 0; g < ng; g++)
        plan_group(r, ph, &gs[g]);
    for (size_t i = 0; i < r->n; i++)
        if (r->jobs[i].keys.n)
            attach_queries(&r->jobs[i], &gs[r->jobs[i].group_ix]);
    run_pending(r);
    for (size_t i = 0; i < r->n; i++)
        if (r->jobs[i].keys.n)
            ph->eval(r, &r->jobs[i]);
    for (size_t g = 0; g < ng; g++) {
        wb_strv_release(&gs[g].keys);
        free(gs[g].chunk_q);
    }
    free(gs);
}

/* The first failure among j's queries; a missing project is a note. */
static const struct ckpt_err *job_failure(struct resolver *r, struct job *j)
{
    for (size_t i = 0; i < j->nqs; i++) {
        struct query *q = r->q[j->qs[i]];
        if (!q->failed)
            continue;
        if (q->err.code != CKPT_ENOTFOUND)
            return &q->err;
        if (!strstr(j->notes.ptr, q->err.msg))
            wb_note(j, "%s", q->err.msg);
    }
    return NULL;
}

int wb_check_failure(struct resolver *r, struct job *j)
{
    const struct ckpt_err *e = job_failure(r, j);
    if (!e)
        return 0;
    wb_finish(j, CKPT_WANDB_ERROR, NULL, ckpt_xstrdup(e->msg));
    return 1;
}

/* ---- driver ---- */

static const char *latest_rr(const struct ckpt_wandb_evidence *ev,
                             size_t field)
{
    for (size_t i = ev->nruns; i-- > 0;) {
        const struct ckpt_wandb_localrun *l = &ev->runs[i];
        const char *v = field == 0 ? l->entity : field == 1 ? l->project
                      : field == 2 ? l->display_name : l->group;
        if (v && *v)
            return v;
    }
    return NULL;
}

/* Entity and project: --entity/--project, else what wandb recorded in
 * run-ID.wandb, else config.yaml's wandb section, else wandb/settings. */
static void pick_project(struct resolver *r, struct job *j)
{
    const struct ckpt_wandb_evidence *ev = j->ev;
    const struct ckpt_wandb_resolve_opts *o = r->o;
    const char *e = o->entity ? o->entity : latest_rr(ev, 0);
    const char *p = o->project ? o->project : latest_rr(ev, 1);
    j->entity = e ? e : ev->entity ? ev->entity : ev->settings_entity;
    j->project = p ? p : ev->project ? ev->project : ev->settings_project;
    j->name = latest_rr(ev, 2) ? latest_rr(ev, 2) : ev->name;
    j->group = latest_rr(ev, 3) ? latest_rr(ev, 3) : ev->group;
}

static void default_entity(struct resolver *r)
{
    int need = 0;
    for (size_t i = 0; i < r->n; i++)
        need |= !r->jobs[i].entity && r->jobs[i].project;
    if (!need || r->o->offline)
        return;
    struct ckpt_err err = CKPT_ERR_INIT;
    if (ckpt_wandb_default_entity(r->c, &r->viewer, &err) != 0) {
        note_auth(r, &err);
        return;
    }
    /* wandb itself uses the key's default entity when none is given. */
    for (size_t i = 0; i < r->n; i++)
        if (!r->jobs[i].entity && r->jobs[i].project)
            r->jobs[i].entity = r->viewer;
}

static char *unknown_reason(const struct job *j)
{
    const struct ckpt_wandb_evidence *ev = j->ev;
    struct ckpt_buf b = CKPT_BUF_INIT;
    if (!ev->nruns && !ev->config)
        ckpt_buf_addstr(&b, "no W&B evidence (no wandb/ run directory, no "
                            "config.yaml)");
    else if (!j->entity || !j->project)
        ckpt_buf_addstr(&b, "no W&B entity/project (config.yaml has no "
                            "wandb section and no run-*.wandb names one; "
                            "use --entity/--project)");
    else if (j->notes.len)
        ckpt_buf_addstr(&b, j->notes.ptr);
    else
        ckpt_buf_addstr(&b, "no local W&B run id, Slurm job id or display "
                            "name to search for");
    if (ev->problems)
        ckpt_buf_addf(&b, " (unreadable evidence: %s)", ev->problems);
    return ckpt_buf_detach(&b, NULL);
}

static void finish_rest(struct resolver *r)
{
    for (size_t i = 0; i < r->n; i++) {
        struct job *j = &r->jobs[i];
        if (j->done)
            continue;
        /* Runs that had something to look up failed with the key; the
         * others are unknown whatever the API says. */
        if (atomic_load(&r->auth_failed) && j->entity && j->project) {
            wb_finish(j, CKPT_WANDB_ERROR, NULL,
                      ckpt_xstrdup(r->auth_err.msg));
            continue;
        }
        wb_set_candidates(j, &j->cands);
        wb_finish(j, CKPT_WANDB_UNKNOWN, NULL, unknown_reason(j));
    }
}

static void free_resolver(struct resolver *r)
{
    ckpt_pool_free(r->pool);
    for (size_t i = 0; i < r->nq; i++) {
        ckpt_wandb_runs_release(&r->q[i]->runs);
        free(r->q[i]->entity);
        free(r->q[i]->project);
        free(r->q[i]->filter);
        free(r->q[i]->name);
        free(r->q[i]);
    }
    free(r->q);
    for (size_t i = 0; i < r->n; i++) {
        ckpt_buf_release(&r->jobs[i].notes);
        wb_strv_release(&r->jobs[i].cands);
        wb_strv_release(&r->jobs[i].keys);
        free(r->jobs[i].qs);
    }
    free(r->jobs);
    free(r->viewer);
    pthread_mutex_destroy(&r->mu);
}

int ckpt_wandb_resolve(struct ckpt_wandb_client *c,
                       struct ckpt_wandb_evidence *const *ev, size_t n,
                       const struct ckpt_wandb_resolve_opts *opts,
                       struct ckpt_wandb_result *res, struct ckpt_err *err)
{
    struct resolver r = { 0 };
    r.c = c;
    r.o = opts;
    r.n = n;
    r.jobs = ckpt_xcalloc(n ? n : 1, sizeof(*r.jobs));
    pthread_mutex_init(&r.mu, NULL);
    for (size_t i = 0; i < n; i++) {
        r.jobs[i].ev = ev[i];
        r.jobs[i].res = &res[i];
        ckpt_buf_init(&r.jobs[i].notes);
        pick_project(&r, &r.jobs[i]);
    }
    if (opts->offline || !c) {
        for (size_t i = 0; i < n; i++)
            wb_resolve_offline(&r.jobs[i]);
    } else {
        default_entity(&r);
        run_phase(&r, &phase_local);
        run_phase(&r, &phase_slurm);
        run_phase(&r, &phase_name);
    }
    finish_rest(&r);
    int rc = 0;
    if (atomic_load(&r.auth_failed)) {
        if (err)
            *err = r.auth_err;
        rc = -1;
    }
    free_resolver(&r);
    return rc;
}

void ckpt_wandb_result_release(struct ckpt_wandb_result *r)
{
    if (!r)
        return;
    free(r->path);
    free(r->evidence);
    free(r->source);
    for (size_t i = 0; i < r->ncandidates; i++)
        free(r->candidates[i]);
    free(r->candidates);
    for (size_t i = 0; i < r->nruns; i++)
        free(r->runs[i]);
    free(r->runs);
    for (size_t i = 0; i < r->nsteps; i++)
        free(r->steps[i].path);
    free(r->steps);
    memset(r, 0, sizeof(*r));
}
