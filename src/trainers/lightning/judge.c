/*
 * lightning/judge.c - PyTorch Lightning's checkpoints (ModelCheckpoint,
 * src/lightning/pytorch/callbacks/model_checkpoint.py): FILES named
 * "epoch=E-step=S.ckpt" (the default "{epoch}-{step}" filename), "last.ckpt",
 * with "-vN" before ".ckpt" when the name was taken, each a whole torch zip
 * (torch.save of a dict: epoch, global_step, state_dict, optimizer_states,
 * ...); or, with the FSDP strategy's sharded state dict, DIRECTORIES of the
 * same names (src/lightning/fabric/strategies/fsdp.py save_checkpoint): the
 * torch DCP files first (.metadata last among them), then rank 0's
 * torch.save of the remaining state to meta.pt. So a directory is complete
 * when its DCP files are and meta.pt is there and whole; DCP complete but
 * no meta.pt is a save cut short (proof). The step is S from "step=S" in
 * the name, else the global_step recorded in the file (meta.pt for a
 * directory); a whole checkpoint whose step cannot be read is unknown,
 * never deleted.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"
#include "trainers/judge.h"
#include "trainers/trainer.h"

/* name is a Lightning checkpoint's ("*.ckpt"); *step is S of "step=S"
 * in it, else -1 (read from the file when judged). */
static int lightning_name(const char *name, int64_t *step)
{
    size_t len = strlen(name);
    *step = -1;
    if (len <= 5 || strcmp(name + len - 5, ".ckpt") != 0 ||
        strchr(name, '/'))
        return 0;
    for (const char *p = name; (p = strstr(p, "step=")) != NULL; p++) {
        if (p != name && p[-1] != '-' && p[-1] != '_')
            continue;
        const char *d = p + 5;
        int64_t v = 0;
        size_t n = 0;
        while (isdigit((unsigned char)d[n]) && n < 18)
            v = v * 10 + (d[n++] - '0');
        if (n && (d[n] == '.' || d[n] == '-' || d[n] == '_')) {
            *step = v;
            break;
        }
    }
    return 1;
}

/* Length of the directory prefix of path where Lightning keeps its
 * checkpoints (checkpoints/, checkpoint/, NAME/version_N/checkpoints/),
 * 0 for the top of the run. */
static size_t lightning_place(const char *path)
{
    /* top, checkpoints/, checkpoint/, or a logger's
     * NAME/version_N/checkpoints/ (lightning_logs/version_0/...) */
    if (ckpt_str_startswith(path, "checkpoints/"))
        return strlen("checkpoints/");
    if (ckpt_str_startswith(path, "checkpoint/"))
        return strlen("checkpoint/");
    const char *a = strchr(path, '/');
    if (!a || !ckpt_str_startswith(a + 1, "version_"))
        return 0;
    const char *b = strchr(a + 1, '/');
    if (!b || !ckpt_str_startswith(b + 1, "checkpoints/"))
        return 0;
    return (size_t)(b + 1 - path) + strlen("checkpoints/");
}

/* Lightning's checkpoints carry no checkpoint name (stepN ...): "*.ckpt"
 * files, or directories of that name (FSDP sharded), at the top, in
 * checkpoints/, or in a logger's NAME/version_N/checkpoints/. */
int lightning_list(const struct ckpt_tree_file *f, size_t *dir_len,
                   size_t *name_at, int64_t *step)
{
    size_t skip = lightning_place(f->path);
    const char *rest = f->path + skip;
    const char *slash = strchr(rest, '/');
    if (!slash && f->type != CKPT_ENTRY_DIR && f->type != CKPT_ENTRY_FILE)
        return 0;
    size_t nl = slash ? (size_t)(slash - rest) : strlen(rest);
    if (nl <= 5 || memcmp(rest + nl - 5, ".ckpt", 5) != 0)
        return 0;  /* (most files: no copy made) */
    char *name = ckpt_xstrndup(rest, nl);
    int ok = lightning_name(name, step);
    free(name);
    *dir_len = skip + nl;
    *name_at = skip;
    return ok;
}

static const char *base(const char *dir)
{
    const char *s = strrchr(dir, '/');
    return s ? s + 1 : dir;
}

int lightning_recognise(const struct judge_view *v)
{
    int64_t step;
    if (v->one_file)
        return v->hi == v->lo + 1 &&
               lightning_name(judge_rel(v, v->lo), &step);
    return *v->dir && lightning_name(base(v->dir), &step);
}

/* The global_step recorded in torch zip rel into c->step; unknown when it
 * cannot be read (the run must not be judged on a step ckpt cannot tell). */
static int lt_step(const struct judge_view *v, struct ckpt_checkpoint *c,
                   const char *rel, struct ckpt_err *err)
{
    struct ckpt_arena *a = ckpt_arena_new((size_t)256 << 20);
    struct ckpt_pv *root = NULL;
    char *why = NULL;
    int rc = judge_torch_pickle(v, rel, a, &root, &why, err);
    int64_t s;
    if (rc == 0 && ckpt_pv_get_int(ckpt_pv_dict_get(
                       ckpt_pv_dict_items(root), "global_step"), &s) == 0 &&
        s >= 0)
        c->step = s;
    else if (rc >= 0)
        judge_unknown(c, "%s records no global_step", rel);
    free(why);
    ckpt_arena_free(a);
    return rc < 0 ? -1 : 0;
}

int lightning_judge(const struct judge_view *v, struct ckpt_checkpoint *c,
                    struct ckpt_err *err)
{
    const char *rec = "meta.pt";
    if (v->one_file) {
        rec = judge_rel(v, v->lo);
        if (judge_whole(v, c, rec, 0, err))
            return -1;
    } else {
        if (judge_dcp_dir(v, c, "", err))
            return -1;
        if (c->complete && !judge_get(v, rec))
            judge_missing(v, c, rec, "Lightning writes it after the DCP "
                          "files");
        else if (c->complete && judge_whole(v, c, rec, 0, err))
            return -1;
    }
    if (c->complete && c->step < 0)
        return lt_step(v, c, rec, err);
    return 0;
}
