/*
 * archive.c - libarchive over the storage layer.
 *
 * libarchive pulls bytes through our read/skip/seek callbacks, which turn
 * into pread() on a local file or ranged reads on object storage. For plain
 * tar the skip callback only moves the position, so member data is never
 * fetched; reads start small (2 KiB: a header block plus slack) and grow
 * while members are tiny, so archives of many small files do not turn into
 * one request per header.
 */
#include "ckpt/archive.h"
#include "archive_int.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/buf.h"
#include "ckpt/pool.h"
#include "ckpt/torchfmt.h"
#include "ckpt/util.h"
#include "zahead.h"
#include "zdec.h"

#define TAR_BLOCK_MIN (2u << 10)
#define TAR_BLOCK_MAX (256u << 10)
#define ZIP_BLOCK (64u << 10)
#define STREAM_BLOCK_LOCAL (1u << 20)
#define STREAM_BLOCK_REMOTE (8u << 20)
#define ZBLOCK (256u << 10)
/* Decoded blocks in the decode-ahead ring (zahead.h): two held by the tar
 * reader, the rest decoded ahead of it. */
#define ZSLOTS 8
/* Remote compressed archives: ranged GETs of RA_BLOCK fetched RA_DEPTH
 * ahead of the decoder by RA_THREADS fetchers (RA_SLOTS blocks held):
 * decoding runs at the decoder's speed, not one stream's. */
#define RA_BLOCK (4u << 20)
#define RA_DEPTH 6
#define RA_THREADS 4
#define RA_SLOTS 8
/* Local .tar.gz and .tar.zst (one decoder thread): the file read ahead
 * of the decoder in a thread of its own (zdec_in.c), STREAM_BLOCK_LOCAL a
 * chunk. bzip2 and xz decode on every core already: no gain there. */
#define ZIN_SLOTS 4
#define EOA_BYTES 1024u /* two zero blocks end a tar archive */

struct ckpt_archive {
    struct archive *ar;         /* format reader: tar or zip */
    struct zdec *z;             /* compressed: the decoder, whose output
                                   feeds ar; NULL otherwise */
    struct zahead *zh;          /* z running ahead in its own thread */
    struct ckpt_storage *st;    /* borrowed */
    struct ckpt_storage *ra;    /* remote compressed: read-ahead over st */
    char etag[80];              /* the version read (remote) */
    char *key;                  /* owned */
    char *name;                 /* owned: display name for messages */
    int fd;                     /* local fast path, or -1 */
    uint64_t size;              /* archive file size */
    int64_t mtime;              /* archive mtime when opened */
    uint64_t pos;               /* next read position */
    uint64_t fetched;           /* bytes read from storage (atomic: the
                                   decoder thread reads compressed input) */
    size_t block;               /* current read size */
    int plain_tar;
    enum ckpt_archive_kind kind;
    char *buf;                  /* owned, block_cap bytes */
    size_t block_cap;
    struct ckpt_err io_err;     /* storage failure inside a callback */
    int io_failed;
    struct ckpt_err zio_err;    /* the same in the decoder thread's reads,
                                   moved to io_err when a block taken
                                   says it failed */
    struct ckpt_buf path;       /* normalised current member name */
    struct ckpt_buf link;       /* normalised hard link target */
    /* Where the tar stream stands (uncompressed offsets), for the end
     * check: the reader started at base (0, or where a salvage read
     * resumed), and the last member's data ended at end. */
    int salvage;
    uint64_t base, end;
    int in_member, done, restarted;
    char *damage;               /* owned: why the end was not proper */
    /* Compressed: the last two blocks taken from zh (ar may still be
     * reading the older one; they point into zh's ring) and the
     * decompressed bytes taken so far. */
    char *zb[2];
    size_t zl[2];
    uint64_t zs[2];
    int zi;
    uint64_t zpos;
    int zeof;
    uint64_t feed;              /* next offset to hand to ar */
    struct arc_replay *rp;      /* owned: an attached spool's replay
                                   (spool.c) instead of all the above */
};

static const struct {
    const char *ext;
    enum ckpt_archive_kind kind;
} exts[] = {
    { ".tar", CKPT_ARCHIVE_TAR },       { ".tar.gz", CKPT_ARCHIVE_TAR_GZ },
    { ".tgz", CKPT_ARCHIVE_TAR_GZ },    { ".tar.bz2", CKPT_ARCHIVE_TAR_BZ2 },
    { ".tbz2", CKPT_ARCHIVE_TAR_BZ2 },  { ".tar.zst", CKPT_ARCHIVE_TAR_ZST },
    { ".tzst", CKPT_ARCHIVE_TAR_ZST },  { ".tar.xz", CKPT_ARCHIVE_TAR_XZ },
    { ".txz", CKPT_ARCHIVE_TAR_XZ },    { ".zip", CKPT_ARCHIVE_ZIP },
};

static const char *match_ext(const char *name, enum ckpt_archive_kind *kind)
{
    const char *best = NULL;
    for (size_t i = 0; i < sizeof(exts) / sizeof(exts[0]); i++) {
        if (!ckpt_str_endswith(name, exts[i].ext))
            continue;
        /* ".tar.gz" beats ".tar"-less matches: keep the longest. */
        if (!best || strlen(exts[i].ext) > strlen(best)) {
            best = exts[i].ext;
            if (kind)
                *kind = exts[i].kind;
        }
    }
    return best;
}

enum ckpt_archive_kind ckpt_archive_kind_of(const char *name)
{
    enum ckpt_archive_kind k = CKPT_ARCHIVE_NONE;
    match_ext(name, &k);
    return k;
}

int ckpt_archive_compressed(enum ckpt_archive_kind k)
{
    return k == CKPT_ARCHIVE_TAR_GZ || k == CKPT_ARCHIVE_TAR_BZ2 ||
           k == CKPT_ARCHIVE_TAR_ZST || k == CKPT_ARCHIVE_TAR_XZ;
}

char *ckpt_archive_stem(const char *name)
{
    char *base = ckpt_path_basename(name);
    const char *ext = match_ext(base, NULL);
    if (ext)
        base[strlen(base) - strlen(ext)] = '\0';
    return base;
}

static int remote_read(struct ckpt_archive *a, char *dst, size_t len,
                       size_t *got, struct ckpt_err *err)
{
    if (a->ra)
        return ckpt_storage_read_if(a->ra, a->key, a->etag, a->pos, dst,
                                    len, got, err);
    return ckpt_storage_read(a->st, a->key, a->pos, dst, len, got, err);
}

/* Fill dst with up to len bytes at a->pos; -1 with *err set. */
static ssize_t fetch_to(struct ckpt_archive *a, char *dst, size_t len,
                        struct ckpt_err *err)
{
    if (a->pos >= a->size)
        return 0;
    if (len > a->size - a->pos)
        len = (size_t)(a->size - a->pos);
    size_t got = 0;
    if (a->fd >= 0) {
        while (got < len) {
            ssize_t n = pread(a->fd, dst + got, len - got,
                              (off_t)(a->pos + got));
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0) {
                ckpt_err_sys(err, "read '%s'", a->name);
                return -1;
            }
            if (n == 0)
                break;
            got += (size_t)n;
        }
    } else if (remote_read(a, dst, len, &got, err) != 0) {
        return -1;
    }
    a->pos += got;
    __atomic_fetch_add(&a->fetched, got, __ATOMIC_RELAXED);
    return (ssize_t)got;
}

/* The same in the caller's thread: a failure is a->io_err. */
static ssize_t fetch(struct ckpt_archive *a, size_t len)
{
    ssize_t n = fetch_to(a, a->buf, len, &a->io_err);
    if (n < 0)
        a->io_failed = 1;
    return n;
}

static la_ssize_t read_cb(struct archive *ar, void *ud, const void **out)
{
    struct ckpt_archive *a = ud;
    *out = a->buf;
    ssize_t n = fetch(a, a->block);
    if (n < 0)
        archive_set_error(ar, EIO, "%s", a->io_err.msg);
    return n;
}

static la_int64_t skip_cb(struct archive *ar, void *ud, la_int64_t req)
{
    struct ckpt_archive *a = ud;
    if (req <= 0)
        return 0;
    uint64_t left = a->size > a->pos ? a->size - a->pos : 0;
    uint64_t n = (uint64_t)req < left ? (uint64_t)req : left;
    a->pos += n;
    /* Small members: reading through beats a request per header. */
    if (a->plain_tar) {
        if (n < 4 * a->block && a->block < TAR_BLOCK_MAX)
            a->block *= 2;
        else if (n >= (1u << 20))
            a->block = TAR_BLOCK_MIN;
    }
    return (la_int64_t)n;
}

static la_int64_t seek_cb(struct archive *ar, void *ud, la_int64_t off,
                          int whence)
{
    struct ckpt_archive *a = ud;
    int64_t base = whence == SEEK_SET ? 0
                 : whence == SEEK_CUR ? (int64_t)a->pos : (int64_t)a->size;
    int64_t np = base + off;
    if (np < 0)
        return ARCHIVE_FATAL;
    a->pos = (uint64_t)np;
    return np;
}

/* Sniff compression from the first bytes to choose the read strategy;
 * libarchive still does the real format detection. */
static void sniff(struct ckpt_archive *a)
{
    unsigned char m[8] = { 0 };
    uint64_t save = a->pos;
    ssize_t n = fetch(a, sizeof(m));
    a->pos = save;
    if (n > 0)
        a->fetched -= (uint64_t)n; /* read again (no thread runs yet) */
    if (n > 0)
        memcpy(m, a->buf, (size_t)n < sizeof(m) ? (size_t)n : sizeof(m));
    int gz = m[0] == 0x1f && m[1] == 0x8b;
    int bz = m[0] == 'B' && m[1] == 'Z' && m[2] == 'h';
    int xz = m[0] == 0xfd && !memcmp(m + 1, "7zXZ", 4);
    int zs = m[0] == 0x28 && m[1] == 0xb5 && m[2] == 0x2f && m[3] == 0xfd;
    int zip = m[0] == 'P' && m[1] == 'K';
    a->plain_tar = !(gz || bz || xz || zs || zip);
    if (a->plain_tar)
        a->block = TAR_BLOCK_MIN;
    else if (zip)
        a->block = ZIP_BLOCK;
    else
        a->block = a->fd >= 0 ? STREAM_BLOCK_LOCAL : STREAM_BLOCK_REMOTE;
    a->kind = gz ? CKPT_ARCHIVE_TAR_GZ : bz ? CKPT_ARCHIVE_TAR_BZ2
            : xz ? CKPT_ARCHIVE_TAR_XZ : zs ? CKPT_ARCHIVE_TAR_ZST
            : zip ? CKPT_ARCHIVE_ZIP : CKPT_ARCHIVE_TAR;
}

/* Why ar stopped. libarchive words a failed read of the decompressed
 * stream as a truncated file: the decoder says why. */
static const char *ar_msg(struct ckpt_archive *a)
{
    const char *m = a->zh && zahead_failed(a->zh)
                  ? zahead_error(a->zh) : archive_error_string(a->ar);
    return m ? m : "unreadable archive";
}

static int ar_fail(struct ckpt_archive *a, struct ckpt_err *err)
{
    if (a->io_failed) {
        *err = a->io_err;
        return -1;
    }
    return ckpt_err_set(err, CKPT_EFORMAT, "%s: %s", a->name, ar_msg(a));
}

/* Record why the archive did not end properly; the first reason wins. */
static void damaged(struct ckpt_archive *a, const char *fmt, ...)
    CKPT_PRINTF(2, 3);
static void damaged(struct ckpt_archive *a, const char *fmt, ...)
{
    if (a->damage)
        return;
    struct ckpt_buf b = CKPT_BUF_INIT;
    va_list ap;
    va_start(ap, fmt);
    ckpt_buf_vaddf(&b, fmt, ap);
    va_end(ap);
    a->damage = ckpt_buf_detach(&b, NULL);
}

/* Take the next block of the decompressed stream as the newer of the two
 * retained blocks (releasing the older): its length, 0 at the end of the
 * stream, -1 on error (zahead_error(a->zh), or a->io_failed). */
static la_ssize_t zpull(struct ckpt_archive *a)
{
    if (a->zeof)
        return 0;
    int i = a->zi ^ 1;
    char *blk = NULL;
    la_ssize_t n = zahead_next(a->zh, &blk);
    if (zahead_io_failed(a->zh) && !a->io_failed) {
        a->io_err = a->zio_err; /* written before the block was published */
        a->io_failed = 1;
    }
    if (n < 0)
        return -1;
    if (n == 0) {
        a->zeof = 1;
        return 0;
    }
    a->zb[i] = blk;
    a->zs[i] = a->zpos;
    a->zl[i] = (size_t)n;
    a->zpos += (uint64_t)n;
    a->zi = i;
    return n;
}

static const char *raw_error(struct ckpt_archive *a)
{
    return zahead_error(a->zh);
}

/* ar's read callback over the decompressed stream: from a->feed, which
 * lies in the two retained blocks (after a restart) or at their end. */
static la_ssize_t zread_cb(struct archive *ar, void *ud, const void **out)
{
    struct ckpt_archive *a = ud;
    *out = a->zb[a->zi];
    if (a->feed >= a->zpos) {
        la_ssize_t n = zpull(a);
        if (n < 0)
            archive_set_error(ar, EIO, "%s", a->io_failed ? a->io_err.msg
                                                         : raw_error(a));
        if (n <= 0)
            return n;
    }
    for (int k = 0; k < 2; k++) {
        int i = k ? a->zi : a->zi ^ 1;
        if (a->zl[i] && a->feed >= a->zs[i] &&
            a->feed < a->zs[i] + a->zl[i]) {
            size_t n = (size_t)(a->zs[i] + a->zl[i] - a->feed);
            *out = a->zb[i] + (a->feed - a->zs[i]);
            a->feed += n;
            return (la_ssize_t)n;
        }
    }
    archive_set_error(ar, EIO, "stream position %llu no longer buffered",
                      (unsigned long long)a->feed);
    return -1;
}

/* (Re)start the format reader at stream offset at. A restart (salvage
 * past damage) names the format instead of sniffing it: the bytes there
 * may not look like the start of an archive. */
static int start_reader(struct ckpt_archive *a, uint64_t at, int restart)
{
    if (a->ar)
        archive_read_free(a->ar);
    a->ar = archive_read_new();
    a->base = a->end = at;
    a->in_member = 0;
    if (a->kind == CKPT_ARCHIVE_ZIP) {
        archive_read_support_format_zip_seekable(a->ar);
    } else {
        archive_read_support_format_tar(a->ar);
        archive_read_support_format_gnutar(a->ar);
        if (restart)
            archive_read_set_format(a->ar, ARCHIVE_FORMAT_TAR);
    }
    if (a->z) {
        archive_read_set_read_callback(a->ar, zread_cb);
    } else {
        a->pos = at;
        archive_read_set_read_callback(a->ar, read_cb);
        archive_read_set_skip_callback(a->ar, skip_cb);
        archive_read_set_seek_callback(a->ar, seek_cb);
    }
    archive_read_set_callback_data(a->ar, a);
    return archive_read_open1(a->ar) == ARCHIVE_OK ? 0 : -1;
}

/* The decoder's input, read in the decoder thread: a failure goes to
 * a->zio_err, which zpull moves to a->io_err in the reader's thread. */
/* The decoder's input, read straight into its buffer (no copy). */
static int zin_cb(void *ud, void *dst, size_t cap, size_t *got)
{
    struct ckpt_archive *a = ud;
    ssize_t n = fetch_to(a, dst, cap < a->block ? cap : a->block,
                         &a->zio_err);
    *got = n > 0 ? (size_t)n : 0;
    return n < 0 ? -1 : 0;
}

/* Compressed: our decoder (zdec.h) decompresses on -j threads, ahead of
 * the tar reader in a thread of its own (zahead.h), and the tar reader
 * reads its output, so that what follows the tar's end can be checked
 * too. */
static int start_raw(struct ckpt_archive *a)
{
    int jobs = ckpt_storage_jobs(a->st);
    a->z = zdec_open(a->kind, jobs > 0 ? jobs : ckpt_ncpus(), zin_cb, a);
    if (!a->z)
        return -1;
    if (a->fd >= 0 && (a->kind == CKPT_ARCHIVE_TAR_GZ ||
                       a->kind == CKPT_ARCHIVE_TAR_ZST))
        zdec_read_ahead(a->z, a->block, ZIN_SLOTS);
    a->zh = zahead_open(a->z, ZBLOCK, ZSLOTS);
    return 0;
}

int ckpt_archive_open(struct ckpt_archive **out, struct ckpt_storage *st,
                      const char *key, struct ckpt_err *err)
{
    struct arc_replay *rp = arc_replay_open(st, key);
    if (rp) {
        struct ckpt_archive *a = ckpt_xcalloc(1, sizeof(*a));
        a->fd = -1;
        a->rp = rp;
        *out = a;
        return 0;
    }
    struct ckpt_stat sb;
    if (ckpt_storage_stat(st, key, &sb, err) != 0)
        return -1;
    if (sb.type != CKPT_ENTRY_FILE)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: not a file", key);
    struct ckpt_archive *a = ckpt_xcalloc(1, sizeof(*a));
    a->st = st;
    a->key = ckpt_xstrdup(key);
    a->name = ckpt_storage_display(st, key);
    a->fd = -1;
    a->size = sb.size;
    a->mtime = sb.mtime;
    snprintf(a->etag, sizeof(a->etag), "%s", sb.etag);
    ckpt_buf_init(&a->path);
    ckpt_buf_init(&a->link);
    if (ckpt_storage_is_local(st)) {
        a->fd = ckpt_local_open_read(key, CKPT_OPEN_FOLLOW, err);
        if (a->fd < 0) {
            ckpt_archive_close(a);
            return -1;
        }
    }
    a->block_cap = 64;
    a->buf = ckpt_xmalloc(a->block_cap);
    sniff(a);
    /* Size the buffer for the largest read this archive will make; the
     * kernel zeroes every page we touch, so do not over-allocate. */
    free(a->buf);
    a->block_cap = a->plain_tar ? TAR_BLOCK_MAX : a->block;
    a->buf = ckpt_xmalloc(a->block_cap);
    if (a->io_failed) {
        *err = a->io_err;
        ckpt_archive_close(a);
        return -1;
    }
    int compressed = !a->plain_tar && a->kind != CKPT_ARCHIVE_ZIP;
    struct ckpt_err e = CKPT_ERR_INIT;
    if (compressed && a->fd < 0 &&
        ckpt_storage_open_readahead(&a->ra, st, RA_BLOCK, RA_SLOTS,
                                    RA_THREADS, RA_DEPTH, &e) != 0)
        a->ra = NULL; /* read in turn, as before */
    if (compressed && start_raw(a) != 0) {
        if (a->io_failed)
            *err = a->io_err;
        else
            ckpt_err_set(err, CKPT_EFORMAT, "%s: cannot start the decoder",
                         a->name);
        ckpt_archive_close(a);
        return -1;
    }
    if (start_reader(a, 0, 0) != 0) {
        ar_fail(a, err);
        ckpt_archive_close(a);
        return -1;
    }
    *out = a;
    return 0;
}

void ckpt_archive_set_salvage(struct ckpt_archive *a, int on)
{
    a->salvage = on;
}

const char *ckpt_archive_damage(const struct ckpt_archive *a)
{
    return a->damage; /* (a replay's is NULL: only proper ends spool) */
}

/* Normalise a member name into a->path: drop "/" and "./" prefixes, empty
 * and "." components and the trailing "/". Returns 0, or -1 for ".."
 * components and absolute names. Also for hard link targets, which
 * name a member from the archive root. */
static int normalise(struct ckpt_archive *a, const char *p,
                     struct ckpt_buf *out, struct ckpt_err *err)
{
    if (ckpt_archive_check_member(a->name, p, NULL, 0, err) != 0)
        return -1;
    ckpt_buf_reset(out);
    ckpt_buf_addstr(out, ""); /* NUL-terminated even when empty */
    while (*p) {
        const char *s = strchr(p, '/');
        size_t n = s ? (size_t)(s - p) : strlen(p);
        if (n && !(n == 1 && p[0] == '.')) {
            if (out->len)
                ckpt_buf_addch(out, '/');
            ckpt_buf_add(out, p, n);
        }
        p += n;
        if (*p == '/')
            p++;
    }
    return 0;
}

int ckpt_archive_check_member(const char *archive, const char *path,
                              const char *link, int hardlink,
                              struct ckpt_err *err)
{
    if (path[0] == '/')
        return ckpt_err_set(err, CKPT_EUNSAFE,
                            "%s: member '%s' has an absolute path", archive,
                            path);
    /* Depth walk: '..' may never climb above the archive root; for a
     * symlink, the target is resolved from the link's own directory. */
    int depth = 0;
    for (int pass = 0; pass < 2; pass++) {
        const char *p = pass ? link : path;
        if (!p)
            break;
        if (pass) {
            if (p[0] == '/')
                return ckpt_err_set(err, CKPT_EUNSAFE,
                                    "%s: link '%s' points outside the "
                                    "archive ('%s')", archive, path, p);
            if (hardlink)
                depth = 0;
            else
                depth--; /* the link's directory, not the link itself */
        }
        while (*p) {
            const char *s = strchr(p, '/');
            size_t n = s ? (size_t)(s - p) : strlen(p);
            int dotdot = n == 2 && p[0] == '.' && p[1] == '.';
            /* Member names may not use '..' at all; link targets may, as
             * long as they stay inside. */
            if (dotdot && !pass)
                return ckpt_err_set(err, CKPT_EUNSAFE,
                                    "%s: member '%s' has a '..' component",
                                    archive, path);
            if (dotdot)
                depth--;
            else if (n && !(n == 1 && p[0] == '.'))
                depth++;
            if (depth < 0)
                return ckpt_err_set(err, CKPT_EUNSAFE,
                                    "%s: link '%s' points outside the "
                                    "archive ('%s')", archive, path, link);
            p += n;
            if (*p == '/')
                p++;
        }
    }
    return 0;
}

static const char *first_nonzero(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return p + i;
    return NULL;
}

/* Plain tar: the first non-zero byte at or after from (1 and *at), 0 when
 * the rest of the file is zeros, -1 on a read error. Ranged reads, so
 * this works on object storage too. */
static int plain_scan(struct ckpt_archive *a, uint64_t from, uint64_t *at)
{
    a->pos = from;
    for (;;) {
        ssize_t n = fetch(a, a->block_cap);
        if (n <= 0)
            return n < 0 ? -1 : 0;
        const char *nz = first_nonzero(a->buf, (size_t)n);
        if (nz) {
            *at = a->pos - (uint64_t)n + (uint64_t)(nz - a->buf);
            return 1;
        }
    }
}

/* Compressed: the same over the decompressed stream, from the blocks ar
 * has seen and then on to the end of the stream. -1 with a->damage set
 * when decompression fails. */
static int z_scan(struct ckpt_archive *a, uint64_t from, uint64_t *at)
{
    int older = a->zi ^ 1;
    uint64_t lo = a->zl[older] ? a->zs[older] : a->zs[a->zi];
    if (from < lo && from < a->zpos) {
        damaged(a, "cannot check the end of the stream");
        return -1;
    }
    for (int k = 0; k < 2; k++) {
        int i = k ? a->zi : older;
        uint64_t s = a->zs[i], e = s + a->zl[i];
        if (!a->zl[i] || e <= from)
            continue;
        uint64_t b = from > s ? from : s;
        const char *nz = first_nonzero(a->zb[i] + (b - s), (size_t)(e - b));
        if (nz) {
            *at = s + (uint64_t)(nz - a->zb[i]);
            return 1;
        }
    }
    for (;;) {
        la_ssize_t n = zpull(a);
        if (n < 0) {
            if (!a->io_failed)
                damaged(a, "%s", raw_error(a));
            return -1;
        }
        if (n == 0)
            return 0;
        const char *nz = first_nonzero(a->zb[a->zi], (size_t)n);
        if (nz) {
            *at = a->zs[a->zi] + (uint64_t)(nz - a->zb[a->zi]);
            return 1;
        }
    }
}

/* The compressed stream ended (the decoder checked every member's or
 * block's checksum): every byte of the file was consumed. The end was
 * taken, so the decoder thread is done with a->z. */
static void z_check_trailer(struct ckpt_archive *a)
{
    uint64_t used = zdec_in_used(a->z);
    if (used < a->size)
        damaged(a, "%llu bytes after the end of the compressed stream",
                (unsigned long long)(a->size - used));
}

static void check_unchanged(struct ckpt_archive *a)
{
    struct ckpt_stat sb;
    struct ckpt_err e = CKPT_ERR_INIT;
    if (ckpt_storage_stat(a->st, a->key, &sb, &e) != 0)
        damaged(a, "cannot stat the archive again: %s", e.msg);
    else if (sb.size != a->size || sb.mtime != a->mtime)
        damaged(a, "the archive changed while it was read");
}

/* Salvage: read on past damage from the 512-byte block holding the first
 * non-zero byte at q, as `tar -i` does. 1 if restarted. */
static int restart_at(struct ckpt_archive *a, uint64_t q)
{
    uint64_t r = q - (q - a->base) % 512;
    if (a->restarted && r <= a->base)
        return 0; /* no progress: give up */
    a->restarted = 1;
    if (a->z) {
        int older = a->zi ^ 1;
        uint64_t lo = a->zl[older] ? a->zs[older] : a->zs[a->zi];
        if (r < lo)
            return 0;
        a->feed = r;
    }
    if (start_reader(a, r, 1) != 0) {
        damaged(a, "%s", archive_error_string(a->ar));
        return 0;
    }
    a->done = 0;
    return 1;
}

/* The tar reader reported its end after the last member, whose data ended
 * at a->end. The end is proper when what follows is zeros only (the
 * end-of-archive blocks and record padding, at least two blocks) to the
 * end of the stream, the compressed stream ended cleanly, and the file did
 * not change while it was read; otherwise a->damage says why. Returns -1
 * only for a storage failure. */
static int at_end(struct ckpt_archive *a, struct ckpt_err *err)
{
    a->done = 1;
    if (a->kind == CKPT_ARCHIVE_ZIP) {
        check_unchanged(a); /* libarchive read the central directory */
        return 0;
    }
    uint64_t q = 0;
    int r = a->z ? z_scan(a, a->end, &q) : plain_scan(a, a->end, &q);
    if (r < 0 && a->io_failed) {
        *err = a->io_err;
        return -1;
    }
    if (r == 1) {
        damaged(a, "data after the end-of-archive marker at offset %llu",
                (unsigned long long)a->end);
        if (a->salvage)
            restart_at(a, q);
        return 0;
    }
    if (r == 0) {
        uint64_t stream_end = a->z ? a->zpos : a->size;
        if (stream_end - a->end < EOA_BYTES)
            damaged(a, "no end-of-archive marker (the archive is cut short, "
                    "or still being written)");
        if (a->z)
            z_check_trailer(a);
    }
    check_unchanged(a);
    return 0;
}

/* libarchive gave up (a damaged header, a truncated member): an error, or
 * in salvage mode the end of what can be listed. */
static int broken(struct ckpt_archive *a, int rc, struct ckpt_err *err)
{
    /* Past a failed decompression nothing more can be read: no salvage
     * (the same at any size, however much the decoder buffered). */
    if (!a->salvage || a->io_failed || (a->zh && zahead_failed(a->zh)))
        return ar_fail(a, err);
    uint64_t at = a->base + (uint64_t)archive_filter_bytes(a->ar, 0);
    if (rc == ARCHIVE_RETRY) {
        /* A bad header block: libarchive moved on by one block, which
         * counts as read (the end check starts after it). */
        damaged(a, "damaged header at offset %llu",
                (unsigned long long)(at >= 512 ? at - 512 : 0));
        a->end = at;
        return 1;
    }
    damaged(a, "%s", ar_msg(a));
    a->done = 1;
    return 0;
}

int ckpt_archive_next(struct ckpt_archive *a, struct ckpt_archive_entry *e,
                      struct ckpt_err *err)
{
    struct archive_entry *ae;
    int rc;
    if (a->rp)
        return arc_replay_next(a->rp, e, err);
    for (;;) {
        if (a->done)
            return 0;
        if (a->in_member) {
            /* Skip the rest of the member now, to know where it ends. */
            a->in_member = 0;
            rc = archive_read_data_skip(a->ar);
            if (rc != ARCHIVE_OK) {
                if (broken(a, ARCHIVE_FATAL, err) < 0)
                    return -1;
                continue;
            }
            a->end = a->base + (uint64_t)archive_filter_bytes(a->ar, 0);
        }
        rc = archive_read_next_header(a->ar, &ae);
        if (rc == ARCHIVE_OK || rc == ARCHIVE_WARN)
            break;
        if (rc == ARCHIVE_EOF) {
            if (at_end(a, err) != 0)
                return -1;
            continue;
        }
        if (broken(a, rc, err) < 0)
            return -1;
    }
    a->in_member = 1;
    /* main() selects a UTF-8 ctype, so the multibyte name is the UTF-8
     * name and needs no conversion. */
    const char *p = archive_entry_pathname(ae);
    if (!p)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: member without a name",
                            a->name);
    if (normalise(a, p, &a->path, err) != 0)
        return -1;
    const char *sl = archive_entry_symlink(ae);
    const char *hl = archive_entry_hardlink(ae);
    if ((sl || hl) &&
        ckpt_archive_check_member(a->name, a->path.ptr, sl ? sl : hl, !sl,
                                  err) != 0)
        return -1;
    if (hl && !sl && normalise(a, hl, &a->link, err) != 0)
        return -1;
    memset(e, 0, sizeof(*e));
    e->path = a->path.ptr;
    e->hardlink = hl && !sl ? a->link.ptr : NULL;
    e->symlink = sl;
    e->size = archive_entry_size_is_set(ae)
            ? (uint64_t)archive_entry_size(ae) : 0;
    mode_t t = archive_entry_filetype(ae);
    e->type = sl || hl ? CKPT_ENTRY_LINK
            : t == AE_IFDIR ? CKPT_ENTRY_DIR
            : t == AE_IFREG ? CKPT_ENTRY_FILE : CKPT_ENTRY_OTHER;
    /* In a plain tar the format has consumed exactly the header blocks, so
     * its position is where the member's bytes start. */
    e->data_offset = a->plain_tar && e->type == CKPT_ENTRY_FILE
                   ? a->base + (uint64_t)archive_filter_bytes(a->ar, 0)
                   : CKPT_NO_OFFSET;
    return 1;
}

int ckpt_archive_read(struct ckpt_archive *a, void *buf, size_t len,
                      size_t *n, struct ckpt_err *err)
{
    if (a->rp)
        return arc_replay_read(a->rp, buf, len, n, err);
    la_ssize_t r = archive_read_data(a->ar, buf, len);
    if (r < 0) {
        *n = 0;
        return ar_fail(a, err);
    }
    *n = (size_t)r;
    return 0;
}

int ckpt_archive_spooled(struct ckpt_archive *a, struct ckpt_spooled *out)
{
    return a->rp ? arc_replay_spooled(a->rp, out) : 0;
}

uint64_t ckpt_archive_file_size(const struct ckpt_archive *a)
{
    return a->rp ? arc_replay_file_size(a->rp) : a->size;
}

uint64_t ckpt_archive_bytes_fetched(const struct ckpt_archive *a)
{
    return a->rp ? arc_replay_fetched(a->rp)
                 : __atomic_load_n(&a->fetched, __ATOMIC_RELAXED);
}

enum ckpt_archive_kind ckpt_archive_kind(const struct ckpt_archive *a)
{
    return a->rp ? arc_replay_kind(a->rp) : a->kind;
}

void ckpt_archive_close(struct ckpt_archive *a)
{
    if (!a)
        return;
    arc_replay_close(a->rp);
    if (a->ar)
        archive_read_free(a->ar);
    zahead_close(a->zh); /* stops the thread: it may be decoding ahead */
    zdec_close(a->z);
    ckpt_storage_close(a->ra);
    if (a->fd >= 0)
        close(a->fd);
    ckpt_buf_release(&a->path);
    ckpt_buf_release(&a->link);
    free(a->damage);
    free(a->buf);
    free(a->key);
    free(a->name);
    free(a);
}
