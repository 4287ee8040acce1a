/*
 * accounting_fuzz.c - property (issue 27, the accounting rule): when
 * clean's judgement deletes a run, or prunes a checkpoint of a kept one,
 * every entry in what goes is accounted for by an oracle written here from
 * the rule's text (docs/reliability.md "Delete by accounting"), not by the
 * judge: no special file, no symlink but OLMo's `latest` naming a
 * checkpoint of the run, every other file run debris, or a file of a step-0
 * checkpoint, or a file its checkpoint's layout owns in a checkpoint
 * proven incomplete; a run that holds other runs is never deleted as one;
 * a run with a step > 0 checkpoint the oracle itself proves complete (a
 * lone whole torch zip `model.pt`) is never deleted.
 *
 * The oracle takes one fact from the judge: which checkpoint directories
 * it calls incomplete (proofs of incompleteness are the layouts' business,
 * fuzzed by layout_fuzz.c and archtree_fuzz.c). Which files count, where
 * checkpoints are, what a layout owns, what debris is, and the complete
 * case above are its own.
 *
 * Input: one flags byte (bit 0: --keep-last 1), then records separated by
 * 0xff, each "T NAME \0 CONTENT" (T one byte): 'f' a file of CONTENT, 'p'
 * a FIFO, 'l' a symlink to CONTENT, 'd' a directory, 'z' a sparse file of
 * 64 MiB plus CONTENT's length, 't' a template directory NAME of kind
 * CONTENT ("zip": a whole torch zip model.pt; "cut": the same cut short;
 * "dcp": DCP shards without .metadata; "gap": OLMo rank files 0 and 2).
 * NAME is a relative path below the run (at most 6 components, no "..",
 * no empty component). The run is a fresh temporary directory `run/`,
 * judged in-process with min_age 0 and dry_run (ckpt_clean_judge, then
 * ckpt_clean_act, which changes nothing).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <ctype.h>
#include <errno.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/clean.h"
#include "ckpt/run.h"
#include "ckpt/storage.h"
#include "ckpt/util.h"
#include "fuzztree.h"

/* A whole torch.save zip: one stored record archive/data.pkl. */
static const unsigned char torch_zip[] =
    "PK\x03\x04\x14\x00\x00\x00\x00\x00\x00\x00\x21\x50\x51\xea\x49\x3c"
    "\x24\x00\x00\x00\x24\x00\x00\x00\x10\x00\x00\x00" "archive/data.pkl"
    "ckpt oracle model ckpt oracle model "
    "PK\x01\x02\x14\x03\x14\x00\x00\x00\x00\x00\x00\x00\x21\x50\x51\xea"
    "\x49\x3c\x24\x00\x00\x00\x24\x00\x00\x00\x10\x00\x00\x00\x00\x00\x00"
    "\x00\x00\x00\x00\x00\x80\x01\x00\x00\x00\x00" "archive/data.pkl"
    "PK\x05\x06\x00\x00\x00\x00\x01\x00\x01\x00\x3e\x00\x00\x00\x52\x00"
    "\x00\x00\x00\x00";
#define TORCH_ZIP_LEN (sizeof(torch_zip) - 1)

/* ---------------------------------------------------------------------
 * The rule, from its text. Keep in step with the Python oracle
 * (tests/integration/accounting_oracle.py, section THE RULE).
 * --------------------------------------------------------------------- */

#define DEBRIS_MAX (64ull << 20)

static int ends_with(const char *s, const char *suf)
{
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static int weights_like(const char *name)
{
    static const char *const ext[] = {
        ".safetensors", ".pt", ".pth", ".bin", ".ckpt", ".distcp",
        ".msgpack", ".h5", ".hdf5", ".onnx", ".gguf", ".pkl", ".pickle",
        ".npy", ".npz", ".tar", ".tgz", ".zip", ".metadata", NULL };
    static const char *const names[] = {
        "_CHECKPOINT_METADATA", "_METADATA", "manifest.ocdbt", ".zgroup",
        ".zarray", "zarr.json", "commit_success.txt", NULL };
    char low[256];
    size_t n = strlen(name);
    if (n >= sizeof(low))
        n = sizeof(low) - 1;
    for (size_t i = 0; i < n; i++)
        low[i] = (char)tolower((unsigned char)name[i]);
    low[n] = '\0';
    for (int i = 0; ext[i]; i++)
        if (ends_with(low, ext[i]))
            return 1;
    for (int i = 0; names[i]; i++)
        if (!strcmp(name, names[i]))
            return 1;
    return strstr(low, ".tar.") != NULL;
}

/* rel: the path below the run's top. */
static int debris(const char *rel, uint64_t size)
{
    const char *name = base_name(rel);
    const char *slash = strchr(rel, '/');
    size_t top = slash ? (size_t)(slash - rel) : 0;
    if (slash && top == 10 && !strncmp(rel, "train_data", 10) &&
        ends_with(name, ".npy"))
        return 1;
    if (weights_like(name))
        return 0;
    if (size < DEBRIS_MAX)
        return 1;
    if (slash && ((top == 5 && !strncmp(rel, "wandb", 5)) ||
                  (top == 10 && !strncmp(rel, "train_data", 10)) ||
                  (top == 4 && !strncmp(rel, "logs", 4))))
        return 1;
    return ends_with(name, ".log") || ends_with(name, ".out") ||
           ends_with(name, ".err") || ends_with(name, ".jsonl") ||
           !strncmp(name, "events.out.tfevents.", 20);
}

/* The step of a checkpoint directory name, or -1: a prefix in any case,
 * digits (at most 18), then nothing, "-unsharded", or a suffix after '-'
 * or '.'; a bare number only "-unsharded" or Orbax's
 * ".orbax-checkpoint-tmp-<digits>". */
static int64_t ckpt_step(const char *name)
{
    static const char *const pre[] = { "global_step", "step_", "step-",
        "step=", "step", "iter_", "checkpoint-", "checkpoint_", "ckpt_",
        "ckpt-", "epoch_", "dist_epoch_", "", NULL };
    for (int i = 0; pre[i]; i++) {
        size_t n = strlen(pre[i]);
        if (strncasecmp(name, pre[i], n))
            continue;
        const char *d = name + n;
        size_t k = 0;
        while (isdigit((unsigned char)d[k]))
            k++;
        if (!k || k > 18)
            continue;
        const char *rest = d + k;
        int ok = !*rest || !strcmp(rest, "-unsharded");
        if (!ok && *pre[i])
            ok = (*rest == '-' || *rest == '.') && rest[1];
        if (!ok && !*pre[i] &&
            !strncmp(rest, ".orbax-checkpoint-tmp-", 22) && rest[22]) {
            ok = 1;
            for (const char *q = rest + 22; *q; q++)
                ok &= isdigit((unsigned char)*q) != 0;
        }
        if (ok)
            return strtoll(d, NULL, 10);
    }
    return -1;
}

/* Never a (named) checkpoint, whatever it holds. */
static int never_named(const char *b)
{
    static const char *const names[] = { "wandb", "train_data", "logs",
        "checkpoints", "checkpoint", "train", "model", "optim",
        "model_and_optim", "sharded", NULL };
    static const char *const pre[] = { "pytorch_model_fsdp_", "optimizer_",
        "mp_rank_", "ocdbt.process_", ".", NULL };
    for (int i = 0; names[i]; i++)
        if (!strcmp(b, names[i]))
            return 1;
    for (int i = 0; pre[i]; i++)
        if (!strncmp(b, pre[i], strlen(pre[i])))
            return 1;
    return 0;
}

struct ent {
    char *rel;          /* below the run */
    mode_t mode;
    uint64_t size;
    char *link;         /* symlink target */
};

struct tree {
    struct ent *v;
    size_t n;
};

static struct tree *walk_tree;
static size_t walk_root;

static int walk_one(const char *p, const struct stat *sb, int flag,
                    struct FTW *ftw)
{
    (void)flag;
    if (ftw->level == 0)
        return 0;
    struct tree *t = walk_tree;
    t->v = ckpt_xreallocarray(t->v, t->n + 1, sizeof(*t->v));
    struct ent *e = &t->v[t->n++];
    e->rel = ckpt_xstrdup(p + walk_root + 1);
    e->mode = sb->st_mode;
    e->size = (uint64_t)sb->st_size;
    e->link = NULL;
    if (S_ISLNK(sb->st_mode)) {
        char buf[4096];
        ssize_t n = readlink(p, buf, sizeof(buf) - 1);
        buf[n > 0 ? n : 0] = '\0';
        e->link = ckpt_xstrdup(buf);
    }
    return 0;
}

static void tree_load(struct tree *t, const char *root)
{
    t->v = NULL;
    t->n = 0;
    walk_tree = t;
    walk_root = strlen(root);
    nftw(root, walk_one, 16, FTW_PHYS);
}

static void tree_free(struct tree *t)
{
    for (size_t i = 0; i < t->n; i++) {
        free(t->v[i].rel);
        free(t->v[i].link);
    }
    free(t->v);
}

static const struct ent *find(const struct tree *t, const char *rel)
{
    for (size_t i = 0; i < t->n; i++)
        if (!strcmp(t->v[i].rel, rel))
            return &t->v[i];
    return NULL;
}

static int is_dir(const struct tree *t, const char *rel)
{
    const struct ent *e = find(t, rel);
    return e && S_ISDIR(e->mode);
}

/* The directory part of rel ("" at the top), in buf. */
static const char *parent(const char *rel, char *buf, size_t len)
{
    const char *s = strrchr(rel, '/');
    size_t n = s ? (size_t)(s - rel) : 0;
    if (n >= len)
        n = len - 1;
    memcpy(buf, rel, n);
    buf[n] = '\0';
    return buf;
}

static const char *layout_of(const struct tree *t, const char *dir);

/* A named checkpoint (docs: a directory at a checkpoint's place under a
 * name without a step whose files a layout recognises): here, a layout
 * of the oracle's own reading, OLMo's rank*.pt alone aside. */
static int named_dir(const struct tree *t, const char *rel)
{
    const char *l = never_named(base_name(rel)) ? NULL : layout_of(t, rel);
    return l && strcmp(l, "olmo-legacy") != 0;
}

/* A checkpoint directory of the run: a recognised name (or a named one)
 * at the top, in checkpoints/ or checkpoint/. */
static int ckpt_dir(const struct tree *t, const char *rel)
{
    char par[4096];
    parent(rel, par, sizeof(par));
    if (!is_dir(t, rel))
        return 0;
    if (par[0] && strcmp(par, "checkpoints") && strcmp(par, "checkpoint"))
        return 0;
    return ckpt_step(base_name(rel)) >= 0 || named_dir(t, rel);
}

/* The checkpoint directory holding rel, in buf, or NULL. */
static const char *ckpt_of(const struct tree *t, const char *rel, char *buf,
                           size_t len)
{
    snprintf(buf, len, "%s", rel);
    for (;;) {
        char *s = strrchr(buf, '/');
        if (!s)
            return NULL;
        *s = '\0';
        if (ckpt_dir(t, buf))
            return buf;
    }
}

/* Some file is below directory dir. */
static int holds_file(const struct tree *t, const char *dir)
{
    size_t dl = strlen(dir);
    for (size_t i = 0; i < t->n; i++)
        if (!S_ISDIR(t->v[i].mode) && !strncmp(t->v[i].rel, dir, dl) &&
            t->v[i].rel[dl] == '/')
            return 1;
    return 0;
}

/* Some directory below the run (not inside a checkpoint directory, not a
 * container) holds config.yaml with wandb/ or train_data/, or a
 * checkpoint-named directory holding a file. */
static int holds_runs(const struct tree *t)
{
    for (size_t i = 0; i < t->n; i++) {
        const struct ent *e = &t->v[i];
        char par[4096], buf[4096];
        if (!S_ISDIR(e->mode))
            continue;
        parent(e->rel, par, sizeof(par));
        if (!par[0])
            continue;       /* held by the run itself */
        if (ckpt_of(t, e->rel, buf, sizeof(buf)))
            continue;       /* inside a checkpoint */
        const char *pb = base_name(par);
        if (!strcmp(pb, "checkpoints") || !strcmp(pb, "checkpoint"))
            continue;
        const char *eb = base_name(e->rel);
        if (ckpt_step(eb) >= 0 && !isdigit((unsigned char)eb[0]) &&
            holds_file(t, e->rel))
            return 1;   /* (a bare integer counts only when it holds a
                           checkpoint: not decided here; an empty
                           directory is no checkpoint) */
        if (!strcmp(base_name(e->rel), "wandb") ||
            !strcmp(base_name(e->rel), "train_data")) {
            char cfg[4200];
            snprintf(cfg, sizeof(cfg), "%s/config.yaml", par);
            const struct ent *c = find(t, cfg);
            if (c && S_ISREG(c->mode))
                return 1;
        }
    }
    return 0;
}

/* A whole zip by its own structure: the end-of-central-directory record
 * found, every central directory entry's local header and data inside the
 * file. */
static int zip_whole(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    unsigned char b[65536 + 22];
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    long start = size > (long)sizeof(b) ? size - (long)sizeof(b) : 0;
    fseek(f, start, SEEK_SET);
    size_t n = fread(b, 1, sizeof(b), f);
    int ok = 0;
    for (long i = (long)n - 22; i >= 0 && !ok; i--) {
        if (memcmp(b + i, "PK\x05\x06", 4))
            continue;
        uint32_t cd_size = b[i + 12] | b[i + 13] << 8 | b[i + 14] << 16 |
                           (uint32_t)b[i + 15] << 24;
        uint32_t cd_off = b[i + 16] | b[i + 17] << 8 | b[i + 18] << 16 |
                          (uint32_t)b[i + 19] << 24;
        unsigned entries = b[i + 10] | b[i + 11] << 8;
        if ((uint64_t)cd_off + cd_size != (uint64_t)(start + i) ||
            entries == 0)
            break;
        unsigned char *cd = malloc(cd_size ? cd_size : 1);
        fseek(f, cd_off, SEEK_SET);
        ok = fread(cd, 1, cd_size, f) == cd_size;
        size_t at = 0;
        for (unsigned k = 0; ok && k < entries; k++) {
            if (at + 46 > cd_size || memcmp(cd + at, "PK\x01\x02", 4)) {
                ok = 0;
                break;
            }
            uint32_t csize = cd[at + 20] | cd[at + 21] << 8 |
                             cd[at + 22] << 16 | (uint32_t)cd[at + 23] << 24;
            unsigned nl = cd[at + 28] | cd[at + 29] << 8;
            unsigned xl = cd[at + 30] | cd[at + 31] << 8;
            unsigned cl = cd[at + 32] | cd[at + 33] << 8;
            uint32_t lho = cd[at + 42] | cd[at + 43] << 8 |
                           cd[at + 44] << 16 | (uint32_t)cd[at + 45] << 24;
            if ((uint64_t)lho + 30 + nl + csize > cd_off)
                ok = 0;
            at += 46 + nl + xl + cl;
        }
        free(cd);
    }
    fclose(f);
    return ok;
}

/* The one complete case the oracle proves itself: a step > 0 checkpoint
 * directory holding a whole torch zip model.pt and no other weights-like
 * file, no sibling NAME-unfinished marker. */
static int proven_complete(const struct tree *t, const char *root,
                           const char *dir)
{
    char buf[4200];
    if (ckpt_step(base_name(dir)) <= 0)
        return 0;
    snprintf(buf, sizeof(buf), "%s-unfinished", dir);
    if (find(t, buf))
        return 0;
    snprintf(buf, sizeof(buf), "%s/model.pt", dir);
    const struct ent *m = find(t, buf);
    if (!m || !S_ISREG(m->mode))
        return 0;
    size_t dl = strlen(dir);
    for (size_t i = 0; i < t->n; i++) {
        const struct ent *e = &t->v[i];
        if (strncmp(e->rel, dir, dl) || e->rel[dl] != '/' || e == m)
            continue;
        if (!S_ISDIR(e->mode) && (!S_ISREG(e->mode) ||
                                  weights_like(base_name(e->rel))))
            return 0;
        if (S_ISDIR(e->mode))
            return 0;       /* model/, model_and_optim/: other layouts */
    }
    char *p = ckpt_xasprintf("%s/%s", root, m->rel);
    int ok = zip_whole(p);
    free(p);
    return ok;
}

/* The layout of checkpoint directory dir, by its own files: "dcp",
 * "olmo-legacy", "olmo-local", "deepspeed", "unsharded", or NULL (others:
 * no file is taken for foreign there). */
static const char *layout_of(const struct tree *t, const char *dir)
{
    size_t dl = strlen(dir);
    int dcp = 0, legacy = 0, local = 0, ds = 0, uns = 0, other = 0;
    for (size_t i = 0; i < t->n; i++) {
        const char *r = t->v[i].rel;
        if (strncmp(r, dir, dl) || r[dl] != '/')
            continue;
        const char *in = r + dl + 1, *b = base_name(r);
        dcp |= ends_with(b, ".distcp") || ends_with(b, ".metadata");
        legacy |= !strchr(in, '/') && !strncmp(b, "rank", 4) &&
                  ends_with(b, ".pt");
        local |= (!strncmp(in, "model/rank", 10) ||
                  !strncmp(in, "optim/rank", 10));
        ds |= ends_with(b, "_model_states.pt") ||
              ends_with(b, "_optim_states.pt");
        uns |= !strchr(in, '/') && (!strcmp(b, "model.pt") ||
                                    ends_with(b, ".safetensors"));
        /* layouts the oracle does not model (HF Trainer, Megatron, Orbax,
         * zarr, OLMo-core, Lightning, DCP's HF writer): it takes no file
         * there for foreign */
        other |= !strcmp(b, "trainer_state.json") ||
                 !strcmp(b, "training_args.bin") ||
                 !strncmp(b, "rng_state", 9) ||
                 !strncmp(in, "pytorch_model_fsdp_", 19) ||
                 !strncmp(in, "optimizer_", 10) ||
                 !strncmp(in, "mp_rank_", 8) || !strcmp(b, "metadata.json") ||
                 !strcmp(b, "_CHECKPOINT_METADATA") ||
                 !strcmp(b, "commit_success.txt") ||
                 !strcmp(b, "manifest.ocdbt") || !strcmp(b, "_METADATA") ||
                 !strcmp(b, ".zgroup") || !strncmp(b, "rank_", 5) ||
                 ends_with(b, ".ckpt") || !strncmp(b, "shard-", 6) ||
                 !strncmp(in, "sharded/", 8);
    }
    if (other)
        return NULL;
    return ds ? "deepspeed" : dcp ? "dcp" : local ? "olmo-local" :
           legacy ? "olmo-legacy" : uns ? "unsharded" : NULL;
}

/* Whether file in (below its checkpoint directory) is one of the layout's
 * own files. */
static int owned(const char *layout, const char *in)
{
    const char *b = base_name(in);
    if (!layout)
        return 1;
    if (!strcmp(b, "config.yaml") || !strcmp(b, "metadata.yaml") ||
        !strcmp(b, "metadata.json"))
        return 1;
    if (!strcmp(layout, "dcp"))
        return ends_with(b, ".distcp") || ends_with(b, ".metadata") ||
               (!strncmp(in, "train/rank", 10) && ends_with(b, ".pt"));
    if (!strcmp(layout, "olmo-legacy"))
        return !strchr(in, '/') && !strncmp(b, "rank", 4) &&
               ends_with(b, ".pt");
    if (!strcmp(layout, "olmo-local"))
        return (!strncmp(in, "model/rank", 10) ||
                !strncmp(in, "optim/rank", 10) ||
                !strncmp(in, "train/rank", 10)) && ends_with(b, ".pt");
    if (!strcmp(layout, "deepspeed"))
        return ends_with(b, "_states.pt");
    /* unsharded: every file `ckpt unshard` writes, and the torch files
     * of other trainers its rule reads beside them */
    return !strchr(in, '/') && (ends_with(b, ".pt") || ends_with(b, ".bin") ||
                                ends_with(b, ".pth") ||
                                ends_with(b, ".safetensors") ||
                                ends_with(b, ".index.json") ||
                                !strcmp(b, "extra.json"));
}

/* What the judge calls checkpoint dir: 1 incomplete (proven), else 0. */
static int judged_incomplete(const struct ckpt_run *r, const char *dir)
{
    for (size_t i = 0; i < r->n; i++)
        if (r->ckpts[i].dir && !strcmp(r->ckpts[i].dir, dir))
            return !r->ckpts[i].complete && !r->ckpts[i].unknown;
    return 0;
}

/* OLMo's latest link at the run's top naming a checkpoint directory. */
static int latest_ok(const struct tree *t, const struct ent *e)
{
    if (strcmp(e->rel, "latest") && strcmp(e->rel, "latest-unsharded"))
        return 0;
    const char *to = e->link;
    if (!to || to[0] == '/' || strstr(to, ".."))
        return 0;
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s", to);
    size_t n = strlen(buf);
    while (n && buf[n - 1] == '/')
        buf[--n] = '\0';
    while (!strncmp(buf, "./", 2))
        memmove(buf, buf + 2, strlen(buf + 2) + 1);
    return ckpt_dir(t, buf);
}

/* The first entry below `under` ("" the whole run) that nothing accounts
 * for, or NULL. */
static const char *unaccounted(const struct tree *t, const struct ckpt_run *r,
                               const char *under)
{
    size_t ul = strlen(under);
    for (size_t i = 0; i < t->n; i++) {
        const struct ent *e = &t->v[i];
        char buf[4096];
        if (ul && (strncmp(e->rel, under, ul) || e->rel[ul] != '/'))
            continue;
        if (S_ISDIR(e->mode))
            continue;
        if (S_ISLNK(e->mode)) {
            if (!ul && latest_ok(t, e))
                continue;
            return e->rel;
        }
        if (!S_ISREG(e->mode))
            return e->rel;
        const char *d = ckpt_of(t, e->rel, buf, sizeof(buf));
        if (d && !ul) {
            if (ckpt_step(base_name(d)) == 0)
                continue;
            if (judged_incomplete(r, d) &&
                owned(layout_of(t, d), e->rel + strlen(d) + 1))
                continue;
        }
        if (d && ul && owned(layout_of(t, d), e->rel + strlen(d) + 1))
            continue;   /* pruning: the checkpoint's own files */
        if (debris(e->rel, e->size))
            continue;
        return e->rel;
    }
    return NULL;
}

static char tmp_dir[] = "/tmp/ckpt-accounting-fuzz-XXXXXX";

static void fail(const char *what, const char *path, const char *action,
                 const char *reason)
{
    fprintf(stderr, "accounting_fuzz: %s: %s (judge: %s: %s)\n", what,
            path ? path : "-", action, reason ? reason : "");
    fuzztree_rm(tmp_dir);
    abort();
}

static void check_delete(const struct tree *t, const char *root,
                         const struct ckpt_clean_item *it)
{
    if (holds_runs(t))
        fail("a directory that holds runs was deleted as one run", NULL,
             it->action, it->reason.ptr);
    for (size_t i = 0; i < t->n; i++)
        if (S_ISDIR(t->v[i].mode) && ckpt_dir(t, t->v[i].rel) &&
            proven_complete(t, root, t->v[i].rel))
            fail("a run with a complete checkpoint was deleted",
                 t->v[i].rel, it->action, it->reason.ptr);
    const char *u = unaccounted(t, &it->run, "");
    if (u)
        fail("deleted a run holding a file nothing accounts for", u,
             it->action, it->reason.ptr);
}

/* it->pruned: "step100, step200" (checkpoint names). */
static void check_prunes(const struct tree *t, const struct ckpt_run *r,
                         const char *pruned, const struct ckpt_clean_item *it)
{
    char *list = ckpt_xstrdup(pruned), *save = NULL;
    for (char *n = strtok_r(list, ",", &save); n;
         n = strtok_r(NULL, ",", &save)) {
        while (*n == ' ')
            n++;
        for (size_t i = 0; i < r->n; i++) {
            if (!r->ckpts[i].name || strcmp(r->ckpts[i].name, n) ||
                !r->ckpts[i].dir || !r->ckpts[i].dir[0])
                continue;
            const char *u = unaccounted(t, r, r->ckpts[i].dir);
            if (u)
                fail("pruned a checkpoint holding a file its layout does "
                     "not own", u, it->action, it->reason.ptr);
        }
    }
    free(list);
}

/* ---------------------------------------------------------------------
 * Decoding the input into a tree
 * --------------------------------------------------------------------- */

static int name_ok(const char *n)
{
    size_t len = strlen(n);
    int comps = 1;
    if (!len || len > 160 || n[0] == '/' || n[len - 1] == '/' ||
        strstr(n, "//"))
        return 0;
    for (const char *c = n;; c++) {
        const char *e = strchr(c, '/');
        size_t cl = e ? (size_t)(e - c) : strlen(c);
        if ((cl == 1 && c[0] == '.') || (cl == 2 && !strncmp(c, "..", 2)))
            return 0;
        if (!e)
            break;
        comps++;
        c = e;
    }
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)n[i] < 0x20 && n[i] != '\n' && n[i] != '\t')
            return 0;
    return comps <= 6;
}

static void mkparents(const char *path)
{
    char *p = ckpt_xstrdup(path);
    for (char *s = strchr(p + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = '\0';
        mkdir(p, 0755);
        *s = '/';
    }
    free(p);
}

static void put(const char *path, const void *data, size_t n, uint64_t size)
{
    mkparents(path);
    FILE *f = fopen(path, "wb");
    if (!f)
        return;
    if (size > n && fseeko(f, (off_t)(size - n), SEEK_SET) != 0)
        size = n;
    fwrite(data, 1, n, f);
    fclose(f);
}

static void template_dir(const char *dir, const char *kind, size_t kl)
{
    char p[4200];
    if (kl == 3 && !memcmp(kind, "zip", 3)) {
        snprintf(p, sizeof(p), "%s/model.pt", dir);
        put(p, torch_zip, TORCH_ZIP_LEN, 0);
    } else if (kl == 3 && !memcmp(kind, "cut", 3)) {
        snprintf(p, sizeof(p), "%s/model.pt", dir);
        put(p, torch_zip, TORCH_ZIP_LEN / 2, 0);
    } else if (kl == 3 && !memcmp(kind, "dcp", 3)) {
        for (int r = 0; r < 3; r++) {
            snprintf(p, sizeof(p), "%s/model_and_optim/__%d_0.distcp", dir,
                     r);
            put(p, torch_zip, TORCH_ZIP_LEN, 0);
        }
    } else if (kl == 3 && !memcmp(kind, "gap", 3)) {
        snprintf(p, sizeof(p), "%s/rank0.pt", dir);
        put(p, torch_zip, TORCH_ZIP_LEN, 0);
        snprintf(p, sizeof(p), "%s/rank2.pt", dir);
        put(p, torch_zip, TORCH_ZIP_LEN, 0);
    }
}

static void record(const char *run, const uint8_t *rec, size_t n)
{
    if (n < 2)
        return;
    uint8_t type = rec[0];
    const uint8_t *z = memchr(rec + 1, 0, n - 1);
    if (!z)
        return;
    size_t nl = (size_t)(z - rec - 1);
    char name[200];
    if (nl >= sizeof(name))
        return;
    memcpy(name, rec + 1, nl);
    name[nl] = '\0';
    if (!name_ok(name))
        return;
    const uint8_t *data = z + 1;
    size_t dl = n - nl - 2;
    char *path = ckpt_path_join(run, name);
    if (type == 'f') {
        put(path, data, dl, 0);
    } else if (type == 'z') {
        put(path, data, dl, (64ull << 20) + dl);
    } else if (type == 'p') {
        mkparents(path);
        mkfifo(path, 0644);
    } else if (type == 'l' && dl && dl < 200 && !memchr(data, 0, dl)) {
        char to[200];
        memcpy(to, data, dl);
        to[dl] = '\0';
        mkparents(path);
        if (symlink(to, path) != 0 && errno != EEXIST)
            (void)0;
    } else if (type == 'd') {
        mkparents(path);
        mkdir(path, 0755);
    } else if (type == 't') {
        mkparents(path);
        mkdir(path, 0755);
        template_dir(path, (const char *)data, dl);
    }
    free(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char *tmpl = tmp_dir;
    memcpy(tmpl + strlen(tmpl) - 6, "XXXXXX", 6);
    if (!mkdtemp(tmpl))
        return 0;
    char *run = ckpt_path_join(tmpl, "run");
    mkdir(run, 0755);
    int keep_last = data[0] & 1;
    for (size_t i = 1; i < size;) {
        const uint8_t *end = memchr(data + i, 0xff, size - i);
        size_t n = end ? (size_t)(end - (data + i)) : size - i;
        record(run, data + i, n);
        i += n + 1;
    }
    struct tree t;
    tree_load(&t, run);
    struct ckpt_loc loc;
    struct ckpt_storage *st;
    struct ckpt_err err = CKPT_ERR_INIT;
    if (ckpt_loc_parse(&loc, tmpl, NULL) == 0) {
        if (ckpt_storage_open(&st, &loc, NULL, NULL) == 0) {
            struct ckpt_clean_opts co = { 0, 0, 5ULL << 30, keep_last, 0,
                                          1 };
            struct ckpt_clean_item it;
            ckpt_clean_item_init(&it, st, run, "run", &co);
            if (ckpt_clean_precheck(&it, &err) == 0) {
                ckpt_clean_judge(&it);
                int del = strcmp(it.action, "keep") &&
                          strcmp(it.action, "skip") &&
                          strcmp(it.action, "error");
                if (del && it.scanned)
                    check_delete(&t, run, &it);
                else if (del)
                    fail("deleted a run it did not read", NULL, it.action,
                         it.reason.ptr);
                if (!strcmp(it.action, "keep")) {
                    ckpt_clean_act(&it);
                    if (it.pruned.ptr && it.pruned.ptr[0] && it.scanned)
                        check_prunes(&t, &it.run, it.pruned.ptr, &it);
                }
            }
            ckpt_clean_item_release(&it);
            ckpt_storage_close(st);
        }
        ckpt_loc_release(&loc);
    }
    /* dry_run: nothing may have changed */
    struct tree after;
    tree_load(&after, run);
    if (after.n != t.n)
        fail("the dry run changed the tree", NULL, "-", NULL);
    tree_free(&after);
    tree_free(&t);
    free(run);
    fuzztree_rm(tmpl);
    return 0;
}
