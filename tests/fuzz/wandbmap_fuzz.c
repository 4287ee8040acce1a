/*
 * wandbmap_fuzz - the reader of the W&B mapping file that
 * `ckpt map-wandb --output` writes: ckpt_wandb_map_parse (src/wandb/map.c;
 * map-wandb's --update and upload's --wandb-map both use it), TSV and
 * JSON lines.
 *
 * Input: the mapping file's bytes.
 * Properties: never crashes or leaks; every path it accepts is
 * ENTITY/PROJECT/RUN_ID (three components, no "." or "..", so it cannot
 * climb out of upload's DEST); the map's text (TSV and JSON) parses back
 * to the same runs and paths.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/wandb.h"

static int same(const char *a, const char *b)
{
    return (!a && !b) || (a && b && !strcmp(a, b));
}

static void check_path(const char *p)
{
    if (!p)
        return;
    int parts = 0;
    while (*p) {
        size_t n = strcspn(p, "/");
        if (n == 0 || (n == 1 && p[0] == '.') ||
            (n == 2 && p[0] == '.' && p[1] == '.'))
            __builtin_trap();
        parts++;
        p += n;
        if (*p == '/')
            p++;
    }
    if (parts != 3)
        __builtin_trap();
}

static void round_trip(const struct ckpt_wandb_map *m, int json)
{
    char *text = ckpt_wandb_map_text(m, json);
    struct ckpt_wandb_map *b;
    struct ckpt_err err;
    if (ckpt_wandb_map_parse(&b, text, strlen(text), "again", &err) != 0)
        __builtin_trap();
    if (b->n != m->n)
        __builtin_trap();
    for (size_t i = 0; i < m->n; i++) {
        const struct ckpt_wandb_map_entry *e = &m->v[i], *f = &b->v[i];
        if (strcmp(e->run, f->run) || !same(e->path, f->path) ||
            e->nsteps != f->nsteps)
            __builtin_trap();
        for (size_t k = 0; k < e->nsteps; k++)
            if (e->steps[k].step != f->steps[k].step ||
                strcmp(e->steps[k].path, f->steps[k].path))
                __builtin_trap();
    }
    ckpt_wandb_map_free(b);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    struct ckpt_err err;
    struct ckpt_wandb_map *m = NULL;
    int mok = ckpt_wandb_map_parse(&m, text, size, "map", &err) == 0;
    if (mok) {
        for (size_t i = 0; i < m->n; i++) {
            check_path(m->v[i].path);
            for (size_t k = 0; k < m->v[i].nsteps; k++)
                check_path(m->v[i].steps[k].path);
        }
        round_trip(m, 0);
        round_trip(m, 1);
    }
    ckpt_wandb_map_free(m);
    return 0;
}
