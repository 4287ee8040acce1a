/*
 * hf/part.c - --part I/N of an export (hf/hf.h): N processes (a Slurm
 * array's tasks, on N nodes) write one export together, each a disjoint
 * share of its shard files, with no step after them.
 *
 * Every part plans the whole export, so all agree on every shard's name,
 * size and bytes (the layout depends on the plan alone). Part I keeps the
 * shards of its share: the shards in order, part I taking those whose
 * first byte lies in [I/N, (I+1)/N) of the total (contiguous, about equal
 * bytes). Its files are renamed into DEST one by one (outputs/local_dir.c), then it
 * writes its record, DEST/.ckpt-part-I-of-N.json (the plan's id and its
 * files), and reads the others' records. The part that finds all N, each
 * for this plan, and every shard in DEST at its size, writes the files
 * beside the shards (config.json, generation config, tokenizer files) and
 * last the index (model.safetensors.index.json; with one shard,
 * config.json is last), then removes the records. Any order works: the
 * last record written is always followed by a look that finds all of
 * them. Two parts finishing at once both write the same bytes, each by an
 * atomic rename. A part run again writes its shards again (the same
 * bytes); when DEST already holds the last file as this plan makes it, the
 * export is complete and no record is left. DEST is then what one process
 * writes, byte for byte.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/gate.h"
#include "ckpt/util.h"
#include "merge/hf/hf.h"
#include "merge/job.h"
#include "merge/sources/sources.h"

struct hf_part {
    struct ufile *aux;          /* written by the last part; the last of
                                   them last (owned) */
    size_t naux;
    char **names;               /* every shard of the plan, and its size */
    uint64_t *sizes;
    size_t nshards;
    char id[17];                /* the plan's id (hex FNV-1a 64) */
};

static int is_shard(const struct ufile *f)
{
    return !f->raw && !f->copy_from &&
           ckpt_str_endswith(f->name, ".safetensors");
}

static void fnv(uint64_t *h, const char *s)
{
    for (; *s; s++) {
        *h ^= (unsigned char)*s;
        *h *= 0x100000001b3ULL;
    }
}

void uns_hf_part_free(struct hf_part *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->naux; i++) {
        free(p->aux[i].name);
        free(p->aux[i].prefix);
        free(p->aux[i].copy_from);
        ckpt_buf_release(&p->aux[i].head);
    }
    free(p->aux);
    for (size_t i = 0; i < p->nshards; i++)
        free(p->names[i]);
    free(p->names);
    free(p->sizes);
    free(p);
}

int uns_hf_part_plan(struct ujob *j, struct ckpt_err *err)
{
    struct hf_part *p = ckpt_xcalloc(1, sizeof(*p));
    size_t n = j->dst.nfiles, kept = 0;
    struct ufile *files = j->dst.files;
    int *map = ckpt_xcalloc(n + 1, sizeof(*map));
    uint64_t total = 0, at = 0, h = 0xcbf29ce484222325ULL;
    char num[64];
    snprintf(num, sizeof(num), "%u\n", j->o->nparts);
    fnv(&h, num);
    p->names = ckpt_xcalloc(n + 1, sizeof(*p->names));
    p->sizes = ckpt_xcalloc(n + 1, sizeof(*p->sizes));
    p->aux = ckpt_xcalloc(n + 1, sizeof(*p->aux));
    for (size_t i = 0; i < n; i++)
        total += is_shard(&files[i]) ? files[i].size : 0;
    j->dst.files = ckpt_xcalloc(n + 1, sizeof(*j->dst.files));
    j->dst.nfiles = 0;
    for (size_t i = 0; i < n; i++) {
        struct ufile *f = &files[i];
        map[i] = -1;
        snprintf(num, sizeof(num), " %llu\n", (unsigned long long)f->size);
        fnv(&h, f->name);
        fnv(&h, num);
        if (!is_shard(f)) {
            p->aux[p->naux++] = *f;     /* taken over */
            continue;
        }
        p->names[p->nshards] = ckpt_xstrdup(f->name);
        p->sizes[p->nshards++] = f->size;
        uint64_t share = total ? at * j->o->nparts / total : 0;
        at += f->size;
        if (share != j->o->part) {
            free(f->name);
            free(f->prefix);
            ckpt_buf_release(&f->head);
            continue;
        }
        map[i] = (int)kept;
        j->dst.files[kept++] = *f;
    }
    j->dst.nfiles = kept;
    for (size_t i = 0; i < j->plan.ntensors; i++) {
        struct utensor *t = &j->plan.tensors[i];
        if (t->file >= 0)
            t->file = map[t->file];
    }
    /* The index last; with one shard, config.json (written first by the
     * layout: moved to the end). */
    for (size_t i = 0; i + 1 < p->naux; i++) {
        const char *last = p->nshards > 1 ? "model.safetensors.index.json"
                                          : "config.json";
        if (!strcmp(p->aux[i].name, last)) {
            struct ufile f = p->aux[i];
            memmove(&p->aux[i], &p->aux[i + 1],
                    (p->naux - i - 1) * sizeof(*p->aux));
            p->aux[p->naux - 1] = f;
            break;
        }
    }
    snprintf(p->id, sizeof(p->id), "%016llx", (unsigned long long)h);
    free(files);
    free(map);
    j->dst.part = p;
    (void)err;
    return 0;
}

/* A small local file whole (at most max bytes). */
static int slurp(const char *path, size_t max, char **data, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0)
        return -1;
    int rc = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) &&
             (uint64_t)sb.st_size <= max ? 0 : -1;
    *len = rc == 0 ? (size_t)sb.st_size : 0;
    *data = rc == 0 ? ckpt_xmalloc(*len + 1) : NULL;
    if (rc == 0 && pread(fd, *data, *len, 0) != (ssize_t)*len)
        rc = -1;
    close(fd);
    if (rc != 0) {
        free(*data);
        *data = NULL;
    }
    return rc;
}

static char *record_name(unsigned part, unsigned nparts)
{
    return ckpt_xasprintf(".ckpt-part-%u-of-%u.json", part, nparts);
}

/* Write data (len) as DEST/name, atomically: a temporary name, fsync,
 * rename. */
static int put(const char *dest, const char *name, const void *data,
               size_t len, int sync, struct ckpt_err *err)
{
    char *path = ckpt_path_join(dest, name);
    char *tmp = ckpt_xasprintf("%s.ckpt-tmp-%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int rc = fd < 0 ? ckpt_err_sys(err, "create '%s'", tmp)
                    : ckpt_pwrite_all(fd, data, len, 0, tmp, err);
    if (rc == 0 && sync && fsync(fd) != 0)
        rc = ckpt_err_sys(err, "sync '%s'", tmp);
    if (fd >= 0 && close(fd) != 0 && rc == 0)
        rc = ckpt_err_sys(err, "close '%s'", tmp);
    if (rc == 0)
        rc = ckpt_gate_rename(CKPT_GATE_OWN(CKPT_GATE_REPLACE, "a part's "
                                            "output into place"),
                              tmp, path, err);
    if (rc != 0 && fd >= 0)
        (void)ckpt_gate_unlink(CKPT_GATE_OWN(CKPT_GATE_OWN_TEMP, "a part's "
                                             "failed output"), tmp, NULL);
    free(tmp);
    free(path);
    return rc;
}

/* The bytes of aux file f as the export writes it (malloced). */
static int aux_bytes(struct ujob *j, const struct ufile *f, char **data,
                     size_t *len, struct ckpt_err *err)
{
    if (!f->copy_from) {
        *len = f->head.len;
        *data = ckpt_xmalloc(*len + 1);
        memcpy(*data, f->head.ptr, *len);
        return 0;
    }
    struct usrc s;
    if (uns_src_file(j, f->copy_from, f->copy_local, &s, err) != 0)
        return -1;
    *len = (size_t)s.size;
    *data = ckpt_xmalloc(*len + 1);
    int rc = uns_src_read(&s, 0, *data, *len, err);
    if (s.fd >= 0)
        close(s.fd);
    if (rc != 0) {
        free(*data);
        *data = NULL;
    }
    return rc;
}

/* Whether DEST/name holds exactly data. */
static int holds(const char *dest, const char *name, const char *data,
                 size_t len)
{
    char *path = ckpt_path_join(dest, name), *have = NULL;
    size_t n = 0;
    int same = slurp(path, len, &have, &n) == 0 && n == len &&
               !memcmp(have, data, len);
    free(have);
    free(path);
    return same;
}

/* Record I's plan id matches, or not (absent, another plan). */
static int record_ok(const char *dest, const struct hf_part *p, unsigned i,
                     unsigned nparts)
{
    char *name = record_name(i, nparts), *path = ckpt_path_join(dest, name);
    char *text = NULL;
    size_t n;
    int ok = 0;
    if (slurp(path, 1u << 20, &text, &n) == 0) {
        cJSON *o = cJSON_ParseWithLength(text, n);
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "plan");
        ok = cJSON_IsString(id) && !strcmp(id->valuestring, p->id);
        cJSON_Delete(o);
    }
    free(text);
    free(path);
    free(name);
    return ok;
}

static int write_record(struct ujob *j, const char *dest,
                        struct ckpt_err *err)
{
    const struct hf_part *p = j->dst.part;
    cJSON *o = cJSON_CreateObject(), *fs = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "plan", p->id);
    cJSON_AddNumberToObject(o, "part", j->o->part);
    cJSON_AddNumberToObject(o, "parts", j->o->nparts);
    for (size_t i = 0; i < j->dst.nfiles; i++) {
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "name", j->dst.files[i].name);
        cJSON_AddNumberToObject(f, "size", (double)j->dst.files[i].size);
        cJSON_AddItemToArray(fs, f);
    }
    cJSON_AddItemToObject(o, "files", fs);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    char *name = record_name(j->o->part, j->o->nparts);
    int rc = put(dest, name, text, strlen(text), j->o->sync, err);
    free(name);
    free(text);
    return rc;
}

/* Every shard of the plan is in DEST at its planned size. */
static int shards_there(const char *dest, const struct hf_part *p,
                        struct ckpt_err *err)
{
    for (size_t i = 0; i < p->nshards; i++) {
        char *path = ckpt_path_join(dest, p->names[i]);
        struct stat sb;
        int ok = stat(path, &sb) == 0 && (uint64_t)sb.st_size == p->sizes[i];
        if (!ok)
            ckpt_err_set(err, CKPT_EFORMAT, "'%s' is %s: every part's "
                         "record is there, but not its shard", path,
                         errno == ENOENT ? "missing" : "not its planned size");
        free(path);
        if (!ok)
            return -1;
    }
    return 0;
}

int uns_hf_part_finish(struct ujob *j, const char *dest, int *done,
                       struct ckpt_err *err)
{
    struct hf_part *p = j->dst.part;
    unsigned n = j->o->nparts, seen = 0;
    char *last = NULL;
    size_t lastlen = 0;
    *done = 0;
    /* Done before (a part run again): the last file is there as this
     * plan makes it; leave no record behind. */
    if (p->naux && aux_bytes(j, &p->aux[p->naux - 1], &last, &lastlen,
                             err) != 0)
        return -1;
    int rc = 0;
    if (last && holds(dest, p->aux[p->naux - 1].name, last, lastlen) &&
        shards_there(dest, p, err) == 0) {
        free(last);
        *done = 2;
        return 0;
    }
    rc = write_record(j, dest, err);
    for (unsigned i = 0; rc == 0 && i < n; i++)
        seen += record_ok(dest, p, i, n);
    if (rc == 0 && seen == n)
        rc = shards_there(dest, p, err);
    for (size_t i = 0; rc == 0 && seen == n && i < p->naux; i++) {
        char *data = NULL;
        size_t len;
        rc = i + 1 == p->naux ? 0 : aux_bytes(j, &p->aux[i], &data, &len,
                                              err);
        if (rc == 0)
            rc = put(dest, p->aux[i].name, i + 1 == p->naux ? last : data,
                     i + 1 == p->naux ? lastlen : len, j->o->sync, err);
        free(data);
    }
    for (unsigned i = 0; rc == 0 && seen == n && i < n; i++) {
        char *name = record_name(i, n), *path = ckpt_path_join(dest, name);
        (void)ckpt_gate_unlink(CKPT_GATE_OWN(CKPT_GATE_OWN_STATE, "a part's "
                                             "record, all parts done"),
                               path, NULL);
        free(path);
        free(name);
    }
    *done = rc == 0 && seen == n;
    free(last);
    return rc;
}
