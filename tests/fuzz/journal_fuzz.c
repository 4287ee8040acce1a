/*
 * journal_fuzz - the upload journal reader (src/upload/journal.c): the
 * state file a killed `ckpt upload` leaves for the next run (S/P/E/C
 * lines, percent-escapes, torn last lines).
 *
 * Input: the journal file's bytes.
 * Properties: never crashes or leaks; compaction (what journal_close
 * writes) is lossless: the journal re-read from its compacted file has
 * the same verified objects (key, size, source signature, ETag) and the
 * same unfinished uploads (key, upload id, sizes, signature, acknowledged
 * parts and their MD5s), and compacting again gives the same bytes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/buf.h"
#include "upload/upload_int.h"

static char dir[] = "/tmp/ckpt-journal-fuzz-XXXXXX";
static char *jpath;

/* The journal's state as text, in a canonical order. */
static void state(struct journal *j, struct ckpt_buf *out, char **keys,
                  size_t nkeys)
{
    for (size_t i = 0; i < nkeys; i++) {
        const struct jr_done *d = up_journal_find_done(j, keys[i]);
        if (d)
            ckpt_buf_addf(out, "C|%s|%llu|%s|%s\n", d->dkey,
                          (unsigned long long)d->size, d->srcsig, d->etag);
    }
    size_t n;
    struct jr_pending **p = up_journal_unclaimed(j, &n);
    for (size_t i = 0; i < n; i++) {
        ckpt_buf_addf(out, "S|%s|%s|%llu|%llu|%s|", p[i]->dkey,
                      p[i]->upload_id, (unsigned long long)p[i]->size,
                      (unsigned long long)p[i]->part_size, p[i]->srcsig);
        for (int k = 0; k < p[i]->nparts; k++)
            if (p[i]->have[k]) {
                ckpt_buf_addf(out, "%d:", k + 1);
                for (int b = 0; b < 16; b++)
                    ckpt_buf_addf(out, "%02x", p[i]->md5[k][b]);
                ckpt_buf_addch(out, ',');
            }
        ckpt_buf_addch(out, '\n');
    }
}

/* The journal, its lock and compaction temp: removed at exit. */
static void cleanup(void)
{
    char *lock = strdup(jpath);
    strcpy(strrchr(lock, '.'), ".lock");
    unlink(jpath);
    unlink(lock);
    free(lock);
    rmdir(dir);
}

static int put_file(const uint8_t *data, size_t size)
{
    FILE *f = fopen(jpath, "wb");
    if (!f)
        return -1;
    int ok = fwrite(data, 1, size, f) == size;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static char *get_file(size_t *len)
{
    FILE *f = fopen(jpath, "rb");
    struct ckpt_buf b = CKPT_BUF_INIT;
    char chunk[4096];
    size_t n;
    while (f && (n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        ckpt_buf_add(&b, chunk, n);
    if (f)
        fclose(f);
    ckpt_buf_addch(&b, '\0');
    return ckpt_buf_detach(&b, len);
}

/* The keys of the C lines of a journal text, unescaped as the journal
 * does: the verified objects to compare. */
static char **done_keys(const char *text, size_t len, size_t *n);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ckpt_err err;
    struct journal *j;
    if (!jpath) {
        if (!mkdtemp(dir) || up_journal_open(&j, dir, "fuzz", &err) != 0)
            abort();
        jpath = strdup(up_journal_file(j));
        up_journal_close(j);
        atexit(cleanup);
    }
    if (put_file(data, size) != 0 || up_journal_open(&j, dir, "fuzz", &err))
        return 0;
    up_journal_close(j);   /* compacts */
    size_t l1;
    char *c1 = get_file(&l1);
    size_t nkeys, n0;
    char **keys = done_keys(c1, l1, &nkeys);
    char **k0 = done_keys((const char *)data, size, &n0);
    keys = realloc(keys, (nkeys + n0 + 1) * sizeof(*keys));
    if (n0)
        memcpy(keys + nkeys, k0, n0 * sizeof(*keys));
    nkeys += n0;
    free(k0);

    /* State of the original file vs. the compacted one. */
    struct ckpt_buf s0 = CKPT_BUF_INIT, s1 = CKPT_BUF_INIT;
    if (put_file(data, size) != 0 || up_journal_open(&j, dir, "fuzz", &err))
        abort();
    state(j, &s0, keys, nkeys);
    ckpt_buf_addch(&s0, '\0');
    up_journal_close(j);
    if (put_file((const uint8_t *)c1, l1 - 1) != 0 ||
        up_journal_open(&j, dir, "fuzz", &err))
        abort();
    state(j, &s1, keys, nkeys);
    ckpt_buf_addch(&s1, '\0');
    up_journal_close(j);
    size_t l2;
    char *c2 = get_file(&l2);
    if (strcmp(s0.ptr, s1.ptr) != 0 || l1 != l2 || memcmp(c1, c2, l1))
        __builtin_trap();
    for (size_t i = 0; i < nkeys; i++)
        free(keys[i]);
    free(keys);
    ckpt_buf_release(&s0);
    ckpt_buf_release(&s1);
    free(c1);
    free(c2);
    return 0;
}

static int hexv(char c)
{
    return c >= '0' && c <= '9' ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static char **done_keys(const char *text, size_t len, size_t *n)
{
    char **v = NULL;
    *n = 0;
    for (size_t pos = 0; pos < len;) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - text) : len;
        if (end - pos > 2 && text[pos] == 'C' && text[pos + 1] == '\t') {
            const char *k = text + pos + 2;
            const char *t = memchr(k, '\t', end - pos - 2);
            size_t kl = t ? (size_t)(t - k) : end - pos - 2;
            char *s = malloc(kl + 1);
            size_t o = 0;
            for (size_t i = 0; i < kl; i++) {
                if (k[i] == '%' && i + 2 < kl && hexv(k[i + 1]) >= 0 &&
                    hexv(k[i + 2]) >= 0) {
                    s[o++] = (char)(hexv(k[i + 1]) << 4 | hexv(k[i + 2]));
                    i += 2;
                } else {
                    s[o++] = k[i];
                }
            }
            s[o] = '\0';
            v = realloc(v, (*n + 1) * sizeof(*v));
            v[(*n)++] = s;
        }
        pos = end + 1;
    }
    return v;
}
