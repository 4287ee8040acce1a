/*
 * journal.c - what a copy has done so far, so a later run can resume it.
 *
 * One append-only text file per copy (SRC + DEST), under the state
 * directory, named by a hash of the copy's identity:
 *
 *     S <dest> <upload-id> <size> <part-size> <source-signature>
 *     P <upload-id> <part> <md5-hex>        part acknowledged by DEST
 *     E <upload-id>                          completed or aborted
 *     C <dest> <size> <source-signature> <etag>   object verified
 *
 * Fields are TAB-separated, with '%', TAB, CR and LF percent-encoded. An S
 * line is written as soon as the upload id exists and a P line only after
 * DEST acknowledged the part, each with one write(2) on an O_APPEND file:
 * a process killed at any moment leaves whole lines (and at worst a torn
 * last line, ignored), and what they claim is true. A crash between
 * CreateMultipartUpload and the S line leaves an upload the journal does
 * not know; services that list uploads let the next run find it.
 * A sibling ".lock" file, flock(2)ed for the whole run, keeps two
 * processes off one copy. Only the main thread calls these functions.
 */
#include "upload_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/gate.h"
#include "ckpt/buf.h"
#include "ckpt/tempname.h"
#include "ckpt/util.h"
#include "ckpt/text.h"

/* A journal and its lock file: ckpt's own, finished or stale. */
#define JOURNAL CKPT_GATE_OWN(CKPT_GATE_OWN_STATE, "an upload journal " \
                              "with nothing unfinished")

#define HEADER "# ckpt upload journal v1\n"

struct journal {
    int fd, lock_fd;
    char *path;                 /* owned */
    char *lock_path;            /* owned */
    int failed;                 /* a write failed: stop writing */
    int discard;                /* remove it on close (source deleted) */
    struct jr_pending *pend;    /* owned */
    size_t npend;
    struct jr_done *done;       /* owned; loaded ones sorted by dkey */
    size_t nloaded, ndone;
    struct jr_pending **unclaimed;  /* owned, returned by _unclaimed */
    uint64_t seq;               /* order of C records */
};

static void esc(struct ckpt_buf *b, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '%' || c == '\t' || c == '\n' || c == '\r')
            ckpt_buf_addf(b, "%%%02X", c);
        else
            ckpt_buf_addch(b, (char)c);
    }
}

static char *unesc(const char *s, size_t n)
{
    char *out = ckpt_xmalloc(n + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int hi = i + 2 < n ? ckpt_hexval(s[i + 1]) : -1;
        int lo = i + 2 < n ? ckpt_hexval(s[i + 2]) : -1;
        if (s[i] == '%' && hi >= 0 && lo >= 0) {
            out[o++] = (char)(hi << 4 | lo);
            i += 2;
        } else {
            out[o++] = s[i];
        }
    }
    out[o] = '\0';
    return out;
}

/* Split line at TABs into at most max fields (unescaped, malloced). */
static int split(const char *line, size_t len, char **f, int max)
{
    int n = 0;
    size_t start = 0;
    for (size_t i = 0; i <= len && n < max; i++) {
        if (i == len || line[i] == '\t') {
            f[n++] = unesc(line + start, i - start);
            start = i + 1;
        }
    }
    return n;
}

static void put_line(struct journal *j, struct ckpt_buf *b)
{
    ckpt_buf_addch(b, '\n');
    if (!j || j->failed || j->fd < 0)
        return;
    /* One write: concurrent readers and a crash see whole lines. */
    ssize_t n = write(j->fd, b->ptr, b->len);
    if (n != (ssize_t)b->len)
        j->failed = 1;
}

static struct jr_pending *find_id(struct journal *j, const char *id)
{
    for (size_t i = j->npend; i-- > 0;)
        if (!strcmp(j->pend[i].upload_id, id))
            return &j->pend[i];
    return NULL;
}

static void pend_add(struct journal *j, const char *dkey, const char *id,
                     uint64_t size, uint64_t ps, const char *sig)
{
    if (ps == 0 || size / ps >= MAX_PARTS + 1)
        return;
    j->pend = ckpt_xreallocarray(j->pend, j->npend + 1, sizeof(*j->pend));
    struct jr_pending *p = &j->pend[j->npend++];
    memset(p, 0, sizeof(*p));
    p->dkey = ckpt_xstrdup(dkey);
    p->upload_id = ckpt_xstrdup(id);
    /* A local copy's temporary file: resumed, never swept as litter. */
    ckpt_temp_keep(id);
    p->size = size;
    p->part_size = ps;
    p->srcsig = ckpt_xstrdup(sig);
    p->nparts = up_parts_for(size, ps);
    p->md5 = ckpt_xcalloc((size_t)p->nparts, 16);
    p->have = ckpt_xcalloc((size_t)p->nparts, 1);
}

static void pend_part(struct journal *j, const char *id, uint64_t num,
                      const unsigned char md5[16])
{
    struct jr_pending *p = find_id(j, id);
    if (!p || num < 1 || num > (uint64_t)p->nparts)
        return;
    memcpy(p->md5[num - 1], md5, 16);
    p->have[num - 1] = 1;
}

static void add_pending(struct journal *j, char **f)
{
    uint64_t size = 0, ps = 0;
    if (ckpt_parse_u64(f[3], &size) == 0 && ckpt_parse_u64(f[4], &ps) == 0)
        pend_add(j, f[1], f[2], size, ps, f[5]);
}

static void add_part(struct journal *j, char **f)
{
    uint64_t num;
    unsigned char md5[16];
    if (ckpt_parse_u64(f[2], &num) == 0 && up_hex_md5_parse(f[3], md5) == 0)
        pend_part(j, f[1], num, md5);
}

static void add_done(struct journal *j, const char *dkey, uint64_t size,
                     const char *sig, const char *etag)
{
    if (j->ndone % 64 == 0)
        j->done = ckpt_xreallocarray(j->done, j->ndone + 64,
                                     sizeof(*j->done));
    struct jr_done *d = &j->done[j->ndone++];
    d->dkey = ckpt_xstrdup(dkey);
    d->size = size;
    d->srcsig = ckpt_xstrdup(sig);
    d->etag = ckpt_xstrdup(etag);
    d->seq = j->seq++;
}

static void parse_line(struct journal *j, const char *line, size_t len)
{
    char *f[6] = { 0 };
    int n = split(line, len, f, 6);
    uint64_t size;
    if (n == 6 && !strcmp(f[0], "S")) {
        add_pending(j, f);
    } else if (n == 4 && !strcmp(f[0], "P")) {
        add_part(j, f);
    } else if (n == 2 && !strcmp(f[0], "E")) {
        struct jr_pending *p = find_id(j, f[1]);
        if (p)
            p->ended = 1;
    } else if (n == 5 && !strcmp(f[0], "C") &&
               ckpt_parse_u64(f[2], &size) == 0) {
        add_done(j, f[1], size, f[3], f[4]);
    }
    for (int i = 0; i < n; i++)
        free(f[i]);
}

static void free_done(struct jr_done *d)
{
    free(d->dkey);
    free(d->srcsig);
    free(d->etag);
}

static int by_dkey(const void *a, const void *b)
{
    const struct jr_done *x = a, *y = b;
    int c = strcmp(x->dkey, y->dkey);
    /* Equal keys keep record order: the later line wins. */
    return c ? c : (x->seq < y->seq ? -1 : x->seq > y->seq);
}

/* Sort, keeping only the last record of each key. */
static size_t sort_done(struct jr_done *d, size_t n)
{
    if (!n)
        return 0;
    ckpt_sort(d, n, sizeof(*d), by_dkey);
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        if (i + 1 < n && !strcmp(d[i].dkey, d[i + 1].dkey)) {
            free_done(&d[i]);
            continue;
        }
        d[w++] = d[i];
    }
    return w;
}

static void load(struct journal *j)
{
    char *data = NULL;
    size_t len = 0;
    struct ckpt_buf b = CKPT_BUF_INIT;
    char chunk[65536];
    ssize_t n;
    lseek(j->fd, 0, SEEK_SET);
    while ((n = read(j->fd, chunk, sizeof(chunk))) > 0)
        ckpt_buf_add(&b, chunk, (size_t)n);
    data = ckpt_buf_detach(&b, &len);
    size_t start = 0;
    for (size_t i = 0; i < len; i++) {
        if (data[i] != '\n')
            continue;
        /* Only complete lines: a torn last line (kill -9) is ignored. */
        if (i > start && data[start] != '#')
            parse_line(j, data + start, i - start);
        start = i + 1;
    }
    free(data);
    j->ndone = sort_done(j->done, j->ndone);
    j->nloaded = j->ndone;
}

static int mkdirs(const char *dir, struct ckpt_err *err)
{
    char *d = ckpt_xstrdup(dir);
    int rc = 0;
    for (char *p = d + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        if (mkdir(d, 0700) != 0 && errno != EEXIST)
            rc = ckpt_err_sys(err, "create state directory '%s'", d);
        *p = c;
        if (!c || rc)
            break;
    }
    free(d);
    return rc;
}

static char *name_for(const char *dir, const char *id, const char *ext)
{
    unsigned char h[32];
    unsigned int hl = 32;
    char hex[65];
    EVP_Digest(id, strlen(id), h, &hl, EVP_sha256(), NULL);
    ckpt_hex_encode(h, 16, hex);
    return ckpt_xasprintf("%s/upload-%s.%s", dir, hex, ext);
}

/* Does path still name the file open at fd? A lock file removed (by a
 * prune or a finished move) after we opened it locks nothing. */
static int still_named(int fd, const char *path)
{
    struct stat a, b;
    return fstat(fd, &a) == 0 && stat(path, &b) == 0 &&
           a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* Open and flock lock; -1 with err (CKPT_EEXIST: held by another). */
static int take_lock(const char *lock, struct ckpt_err *err)
{
    for (int tries = 0; tries < 100; tries++) {
        int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (lfd < 0)
            return ckpt_err_sys(err, "open '%s'", lock);
        if (flock(lfd, LOCK_EX | LOCK_NB) != 0) {
            int rc = errno == EWOULDBLOCK
                ? ckpt_err_set(err, CKPT_EEXIST, "another ckpt upload of "
                               "the same SRC to the same DEST is running "
                               "(journal '%s' is locked)", lock)
                : ckpt_err_sys(err, "lock '%s'", lock);
            close(lfd);
            return rc;
        }
        if (still_named(lfd, lock))
            return lfd;
        close(lfd);  /* removed meanwhile: lock the new one */
    }
    return ckpt_err_set(err, CKPT_EIO, "lock '%s': removed again and again",
                        lock);
}

int up_journal_open(struct journal **out, const char *dir, const char *id,
                    struct ckpt_err *err)
{
    *out = NULL;
    if (!dir)
        return 0;
    if (mkdirs(dir, err) != 0)
        return -1;
    char *lock = name_for(dir, id, "lock");
    int lfd = take_lock(lock, err);
    if (lfd < 0) {
        free(lock);
        return -1;
    }
    int rc;
    struct journal *j = ckpt_xcalloc(1, sizeof(*j));
    j->lock_fd = lfd;
    j->lock_path = lock;
    j->path = name_for(dir, id, "journal");
    j->fd = open(j->path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (j->fd < 0) {
        rc = ckpt_err_sys(err, "open journal '%s'", j->path);
        up_journal_close(j);
        return rc;
    }
    load(j);
    *out = j;
    return 0;
}

void up_journal_start(struct journal *j, const char *dkey, const char *id,
                      uint64_t size, uint64_t part_size, const char *srcsig)
{
    struct ckpt_buf b = CKPT_BUF_INIT;
    ckpt_buf_addstr(&b, "S\t");
    esc(&b, dkey);
    ckpt_buf_addch(&b, '\t');
    esc(&b, id);
    ckpt_buf_addf(&b, "\t%llu\t%llu\t", (unsigned long long)size,
                  (unsigned long long)part_size);
    esc(&b, srcsig);
    put_line(j, &b);
    ckpt_buf_release(&b);
    if (j) {
        /* Ours: not an unfinished upload for this run to take over. */
        pend_add(j, dkey, id, size, part_size, srcsig);
        if (j->npend && !strcmp(j->pend[j->npend - 1].upload_id, id))
            j->pend[j->npend - 1].claimed = 1;
    }
}

void up_journal_part(struct journal *j, const char *id, int num,
                     const unsigned char md5[16])
{
    char hex[33];
    ckpt_hex_encode(md5, 16, hex);
    struct ckpt_buf b = CKPT_BUF_INIT;
    ckpt_buf_addstr(&b, "P\t");
    esc(&b, id);
    ckpt_buf_addf(&b, "\t%d\t%s", num, hex);
    put_line(j, &b);
    ckpt_buf_release(&b);
    if (j)
        pend_part(j, id, (uint64_t)num, md5);
}

void up_journal_end(struct journal *j, const char *id)
{
    struct ckpt_buf b = CKPT_BUF_INIT;
    ckpt_buf_addstr(&b, "E\t");
    esc(&b, id);
    put_line(j, &b);
    ckpt_buf_release(&b);
    struct jr_pending *p = j ? find_id(j, id) : NULL;
    if (p)
        p->ended = 1;
}

void up_journal_done(struct journal *j, const char *dkey, uint64_t size,
                     const char *srcsig, const char *etag)
{
    if (!j)
        return;
    struct ckpt_buf b = CKPT_BUF_INIT;
    ckpt_buf_addstr(&b, "C\t");
    esc(&b, dkey);
    ckpt_buf_addf(&b, "\t%llu\t", (unsigned long long)size);
    esc(&b, srcsig);
    ckpt_buf_addch(&b, '\t');
    esc(&b, etag);
    put_line(j, &b);
    ckpt_buf_release(&b);
    add_done(j, dkey, size, srcsig, etag);
}

struct jr_pending *up_journal_pending(struct journal *j, const char *dkey)
{
    if (!j)
        return NULL;
    for (size_t i = j->npend; i-- > 0;)
        if (!j->pend[i].ended && !j->pend[i].claimed &&
            !strcmp(j->pend[i].dkey, dkey))
            return &j->pend[i];
    return NULL;
}

struct jr_pending **up_journal_unclaimed(struct journal *j, size_t *n)
{
    *n = 0;
    if (!j)
        return NULL;
    free(j->unclaimed);
    j->unclaimed = ckpt_xcalloc(j->npend + 1, sizeof(*j->unclaimed));
    for (size_t i = 0; i < j->npend; i++)
        if (!j->pend[i].ended && !j->pend[i].claimed)
            j->unclaimed[(*n)++] = &j->pend[i];
    return j->unclaimed;
}

const struct jr_done *up_journal_find_done(const struct journal *j,
                                           const char *dkey)
{
    if (!j)
        return NULL;
    size_t lo = 0, hi = j->nloaded;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(j->done[mid].dkey, dkey);
        if (c == 0)
            return &j->done[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

int up_journal_failed(const struct journal *j)
{
    return j && j->failed;
}

int up_journal_knows_upload(const struct journal *j, const char *id)
{
    if (!j)
        return 0;
    for (size_t i = 0; i < j->npend; i++)
        if (!strcmp(j->pend[i].upload_id, id))
            return 1;
    return 0;
}

/* The compact form: the last record of each verified object, then every
 * unfinished upload with its acknowledged parts. */
static void compact(struct journal *j)
{
    struct ckpt_buf b = CKPT_BUF_INIT;
    ckpt_buf_addstr(&b, HEADER);
    j->ndone = sort_done(j->done, j->ndone);
    for (size_t i = 0; i < j->ndone; i++) {
        struct jr_done *d = &j->done[i];
        ckpt_buf_addstr(&b, "C\t");
        esc(&b, d->dkey);
        ckpt_buf_addf(&b, "\t%llu\t", (unsigned long long)d->size);
        esc(&b, d->srcsig);
        ckpt_buf_addch(&b, '\t');
        esc(&b, d->etag);
        ckpt_buf_addch(&b, '\n');
    }
    for (size_t i = 0; i < j->npend; i++) {
        struct jr_pending *p = &j->pend[i];
        if (p->ended)
            continue;
        ckpt_buf_addstr(&b, "S\t");
        esc(&b, p->dkey);
        ckpt_buf_addch(&b, '\t');
        esc(&b, p->upload_id);
        ckpt_buf_addf(&b, "\t%llu\t%llu\t", (unsigned long long)p->size,
                      (unsigned long long)p->part_size);
        esc(&b, p->srcsig);
        ckpt_buf_addch(&b, '\n');
        for (int k = 0; k < p->nparts; k++) {
            char hex[33];
            if (!p->have[k])
                continue;
            ckpt_hex_encode(p->md5[k], 16, hex);
            ckpt_buf_addstr(&b, "P\t");
            esc(&b, p->upload_id);
            ckpt_buf_addf(&b, "\t%d\t%s\n", k + 1, hex);
        }
    }
    /* Write aside and rename: a crash keeps the old or the new file. */
    char *tmp = ckpt_xasprintf("%s.tmp", j->path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int ok = fd >= 0 && write(fd, b.ptr, b.len) == (ssize_t)b.len;
    if (fd >= 0 && close(fd) != 0)
        ok = 0;
    if (!ok || ckpt_gate_rename(CKPT_GATE_OWN(CKPT_GATE_REPLACE, "a "
                                              "journal's new copy"),
                                tmp, j->path, NULL) != 0)
        (void)ckpt_gate_unlink(CKPT_GATE_OWN(CKPT_GATE_OWN_TEMP, "a "
                                             "journal's new copy"), tmp,
                               NULL);
    free(tmp);
    ckpt_buf_release(&b);
}

static int any_unfinished(const struct journal *j)
{
    for (size_t i = 0; i < j->npend; i++)
        if (!j->pend[i].ended)
            return 1;
    return 0;
}

void up_journal_discard(struct journal *j)
{
    if (j)
        j->discard = 1;
}

void up_journal_close(struct journal *j)
{
    if (!j)
        return;
    /* Removed while still locked: a process that opened the lock file
     * before sees it unnamed (still_named) and starts afresh. */
    if (j->discard && !any_unfinished(j)) {
        (void)ckpt_gate_unlink(JOURNAL, j->path, NULL);
        (void)ckpt_gate_unlink(JOURNAL, j->lock_path, NULL);
    } else if (j->fd >= 0 && !j->failed) {
        compact(j);
    }
    if (j->fd >= 0)
        close(j->fd);
    for (size_t i = 0; i < j->npend; i++) {
        free(j->pend[i].dkey);
        free(j->pend[i].upload_id);
        free(j->pend[i].srcsig);
        free(j->pend[i].md5);
        free(j->pend[i].have);
    }
    free(j->pend);
    for (size_t i = 0; i < j->ndone; i++)
        free_done(&j->done[i]);
    free(j->done);
    free(j->unclaimed);
    free(j->path);
    free(j->lock_path);
    if (j->lock_fd >= 0)
        close(j->lock_fd);  /* releases the flock */
    free(j);
}

const char *up_journal_file(const struct journal *j)
{
    return j ? j->path : NULL;
}

/* ---- pruning ---- */

static int is_journal_name(const char *name)
{
    size_t n = strlen(name);
    return !strncmp(name, "upload-", 7) && n > 15 &&
           !strcmp(name + n - 8, ".journal");
}

/* Remove the journal at path (and its lock) if it is older than cutoff,
 * no process holds it and it records no unfinished upload. */
static int prune_one(const char *path, time_t cutoff)
{
    struct stat sb;
    if (stat(path, &sb) != 0 || sb.st_mtime >= cutoff)
        return 0;
    size_t n = strlen(path);
    char *lock = ckpt_xasprintf("%.*slock", (int)(n - 7), path);
    struct ckpt_err err = CKPT_ERR_INIT;
    int lfd = take_lock(lock, &err), pruned = 0;
    struct journal tmp;
    memset(&tmp, 0, sizeof(tmp));
    tmp.fd = lfd >= 0 ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    if (tmp.fd >= 0) {
        load(&tmp);
        /* An unfinished upload may still exist at DEST: the journal is
         * how a rerun finds and discards it. */
        if (!any_unfinished(&tmp) && stat(path, &sb) == 0 &&
            sb.st_mtime < cutoff) {
            pruned = ckpt_gate_unlink(JOURNAL, path, NULL) == 0;
            (void)ckpt_gate_unlink(JOURNAL, lock, NULL);
        }
        close(tmp.fd);
    }
    for (size_t i = 0; i < tmp.npend; i++) {
        free(tmp.pend[i].dkey);
        free(tmp.pend[i].upload_id);
        free(tmp.pend[i].srcsig);
        free(tmp.pend[i].md5);
        free(tmp.pend[i].have);
    }
    free(tmp.pend);
    for (size_t i = 0; i < tmp.ndone; i++)
        free_done(&tmp.done[i]);
    free(tmp.done);
    if (lfd >= 0)
        close(lfd);
    free(lock);
    return pruned;
}

size_t up_journal_prune(const char *dir, double max_age)
{
    DIR *d = dir ? opendir(dir) : NULL;
    size_t n = 0;
    if (!d)
        return 0;
    time_t cutoff = time(NULL) - (time_t)max_age;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!is_journal_name(de->d_name))
            continue;
        char *path = ckpt_path_join(dir, de->d_name);
        n += (size_t)prune_one(path, cutoff);
        free(path);
    }
    closedir(d);
    return n;
}
