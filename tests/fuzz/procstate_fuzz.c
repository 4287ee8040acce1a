/*
 * procstate_fuzz - the state object `ckpt process` keeps per run under
 * DEST/.ckpt-process/ (src/process/state.c): read back from storage by
 * every later worker, so its bytes are whatever DEST holds.
 *
 * Input: the object's bytes.
 * Properties: never crashes or leaks; a finished upload ("uploaded",
 * "done") always says where the run went; every place it names ("dest",
 * each unshard output's path) is a safe place below DEST: relative, no
 * empty, ".", ".." or hidden component, "dest" at most three of them
 * (issue 20 class 10: an edited state must not send a run outside DEST,
 * into its .ckpt-process/, or over another place); what parses, written again and
 * re-read, gives the same state (phase, dest, why, src, the unshard outputs,
 * and every count up to 2^53, which a JSON number holds exactly; the
 * dropped steps' files with their versions exactly); every dropped file
 * lies below one of the dropped steps.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "process/process_int.h"

static int same_u64(uint64_t a, uint64_t b)
{
    return a == b || (a >= (1ull << 53) && b >= (1ull << 53));
}

static int same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && !strcmp(a, b));
}

static int same_outs(const struct proc_state *a, const struct proc_state *b)
{
    if (a->nouts != b->nouts)
        return 0;
    for (size_t i = 0; i < a->nouts; i++)
        if (strcmp(a->outs[i].path, b->outs[i].path) ||
            strcmp(a->outs[i].sum, b->outs[i].sum) ||
            strcmp(a->outs[i].etag, b->outs[i].etag) ||
            !same_u64(a->outs[i].size, b->outs[i].size))
            return 0;
    return 1;
}

/* The dropped steps ("uploaded": files a rerun deletes on their word):
 * the same dirs, files and versions. */
static int same_dropped(const struct proc_drops *a, const struct proc_drops *b)
{
    if (a->n != b->n || a->nfiles != b->nfiles)
        return 0;
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->dirs[i], b->dirs[i]))
            return 0;
    for (size_t i = 0; i < a->nfiles; i++) {
        const struct proc_drop_file *x = &a->files[i], *y = &b->files[i];
        if (strcmp(x->rel, y->rel) || strcmp(x->etag, y->etag) ||
            !same_str(x->changed, y->changed) ||
            !same_u64(x->v.size, y->v.size) ||
            x->v.mtime_ns != y->v.mtime_ns ||
            x->v.ctime_ns != y->v.ctime_ns || x->v.ino != y->v.ino)
            return 0;
    }
    return 1;
}

/* Every dropped file a path below a dropped step, never absolute, never
 * through "..". */
static int dropped_inside(const struct proc_drops *d)
{
    for (size_t i = 0; i < d->nfiles; i++) {
        const char *p = d->files[i].rel;
        size_t hits = 0;
        if (p[0] == '/' || !strncmp(p, "../", 3) || strstr(p, "/../") ||
            strstr(p, "//"))
            return 0;
        for (size_t k = 0; k < d->n; k++) {
            size_t n = strlen(d->dirs[k]);
            hits += !strncmp(p, d->dirs[k], n) && p[n] == '/';
        }
        if (!hits)
            return 0;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct proc_state s, t;
    if (proc_state_parse((const char *)data, size, &s) != 0)
        return 0;
    if ((s.phase == PROC_UPLOADED || s.phase == PROC_DONE) && !s.dest)
        __builtin_trap();
    if (s.dest && (!proc_path_safe(s.dest, 3) || s.dest[0] == '/' ||
                   strstr(s.dest, "..") == s.dest ||
                   strstr(s.dest, "/.")))
        __builtin_trap();
    for (size_t i = 0; i < s.nouts; i++)
        if (s.outs[i].path[0] == '/' || s.outs[i].path[0] == '.' ||
            strstr(s.outs[i].path, "/.") || strstr(s.outs[i].path, "//"))
            __builtin_trap();
    if (!dropped_inside(&s.dropped))
        __builtin_trap();
    char *text = proc_state_format("run", &s);
    if (proc_state_parse(text, strlen(text), &t) != 0 ||
        t.phase != s.phase || !same_str(t.dest, s.dest) ||
        !same_str(t.why, s.why) || !same_str(t.src, s.src) ||
        !same_u64(t.files, s.files) ||
        !same_u64(t.bytes, s.bytes) || !same_u64(t.steps, s.steps) ||
        !same_u64(t.freed, s.freed) || !same_outs(&s, &t) ||
        !same_dropped(&s.dropped, &t.dropped))
        __builtin_trap();
    free(text);
    proc_state_release(&s);
    proc_state_release(&t);
    return 0;
}
