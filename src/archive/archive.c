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

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/buf.h"
#include "ckpt/util.h"

#define TAR_BLOCK_MIN (2u << 10)
#define TAR_BLOCK_MAX (256u << 10)
#define ZIP_BLOCK (64u << 10)
#define STREAM_BLOCK_LOCAL (1u << 20)
#define STREAM_BLOCK_REMOTE (8u << 20)

struct ckpt_archive {
    struct archive *ar;
    struct ckpt_storage *st;    /* borrowed */
    char *key;                  /* owned */
    char *name;                 /* owned: display name for messages */
    int fd;                     /* local fast path, or -1 */
    uint64_t size;              /* archive file size */
    uint64_t pos;               /* next read position */
    uint64_t fetched;           /* bytes read from storage */
    size_t block;               /* current read size */
    int plain_tar;
    enum ckpt_archive_kind kind;
    char *buf;                  /* owned, block_cap bytes */
    size_t block_cap;
    struct ckpt_err io_err;     /* storage failure inside a callback */
    int io_failed;
    struct ckpt_buf path;       /* normalised current member name */
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

char *ckpt_archive_stem(const char *name)
{
    char *base = ckpt_path_basename(name);
    const char *ext = match_ext(base, NULL);
    if (ext)
        base[strlen(base) - strlen(ext)] = '\0';
    return base;
}

/* Fill a->buf with up to len bytes at a->pos. */
static ssize_t fetch(struct ckpt_archive *a, size_t len)
{
    if (a->pos >= a->size)
        return 0;
    if (len > a->size - a->pos)
        len = (size_t)(a->size - a->pos);
    size_t got = 0;
    if (a->fd >= 0) {
        while (got < len) {
            ssize_t n = pread(a->fd, a->buf + got, len - got,
                              (off_t)(a->pos + got));
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0) {
                ckpt_err_sys(&a->io_err, "read '%s'", a->name);
                a->io_failed = 1;
                return -1;
            }
            if (n == 0)
                break;
            got += (size_t)n;
        }
    } else if (ckpt_storage_read(a->st, a->key, a->pos, a->buf, len, &got,
                                 &a->io_err) != 0) {
        a->io_failed = 1;
        return -1;
    }
    a->pos += got;
    a->fetched += got;
    return (ssize_t)got;
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
        a->fetched -= (uint64_t)n; /* read again by libarchive */
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

static int ar_fail(struct ckpt_archive *a, struct ckpt_err *err)
{
    if (a->io_failed) {
        *err = a->io_err;
        return -1;
    }
    const char *m = archive_error_string(a->ar);
    return ckpt_err_set(err, CKPT_EFORMAT, "%s: %s", a->name,
                        m ? m : "unreadable archive");
}

int ckpt_archive_open(struct ckpt_archive **out, struct ckpt_storage *st,
                      const char *key, struct ckpt_err *err)
{
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
    ckpt_buf_init(&a->path);
    if (ckpt_storage_is_local(st)) {
        a->fd = open(key, O_RDONLY | O_CLOEXEC);
        if (a->fd < 0) {
            ckpt_err_sys(err, "open '%s'", key);
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
    a->ar = archive_read_new();
    archive_read_support_filter_gzip(a->ar);
    archive_read_support_filter_bzip2(a->ar);
    archive_read_support_filter_xz(a->ar);
    archive_read_support_filter_zstd(a->ar);
    archive_read_support_format_tar(a->ar);
    archive_read_support_format_gnutar(a->ar);
    archive_read_support_format_zip_seekable(a->ar);
    archive_read_set_read_callback(a->ar, read_cb);
    archive_read_set_skip_callback(a->ar, skip_cb);
    archive_read_set_seek_callback(a->ar, seek_cb);
    archive_read_set_callback_data(a->ar, a);
    if (archive_read_open1(a->ar) != ARCHIVE_OK) {
        ar_fail(a, err);
        ckpt_archive_close(a);
        return -1;
    }
    *out = a;
    return 0;
}

/* Normalise a member name into a->path: drop "/" and "./" prefixes, empty
 * and "." components and the trailing "/". Returns 0, or -1 for ".."
 * components and absolute names. */
static int normalise(struct ckpt_archive *a, const char *p,
                     struct ckpt_err *err)
{
    if (ckpt_archive_check_member(a->name, p, NULL, 0, err) != 0)
        return -1;
    ckpt_buf_reset(&a->path);
    while (*p) {
        const char *s = strchr(p, '/');
        size_t n = s ? (size_t)(s - p) : strlen(p);
        if (n && !(n == 1 && p[0] == '.')) {
            if (a->path.len)
                ckpt_buf_addch(&a->path, '/');
            ckpt_buf_add(&a->path, p, n);
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

int ckpt_archive_next(struct ckpt_archive *a, struct ckpt_archive_entry *e,
                      struct ckpt_err *err)
{
    struct archive_entry *ae;
    int rc = archive_read_next_header(a->ar, &ae);
    if (rc == ARCHIVE_EOF)
        return 0;
    if (rc != ARCHIVE_OK && rc != ARCHIVE_WARN)
        return ar_fail(a, err);
    /* main() selects a UTF-8 ctype, so the multibyte name is the UTF-8
     * name and needs no conversion. */
    const char *p = archive_entry_pathname(ae);
    if (!p)
        return ckpt_err_set(err, CKPT_EFORMAT, "%s: member without a name",
                            a->name);
    if (normalise(a, p, err) != 0)
        return -1;
    const char *sl = archive_entry_symlink(ae);
    const char *hl = archive_entry_hardlink(ae);
    if ((sl || hl) &&
        ckpt_archive_check_member(a->name, a->path.ptr, sl ? sl : hl, !sl,
                                  err) != 0)
        return -1;
    memset(e, 0, sizeof(*e));
    e->path = a->path.ptr;
    e->size = archive_entry_size_is_set(ae)
            ? (uint64_t)archive_entry_size(ae) : 0;
    mode_t t = archive_entry_filetype(ae);
    e->type = sl || hl ? CKPT_ENTRY_LINK
            : t == AE_IFDIR ? CKPT_ENTRY_DIR
            : t == AE_IFREG ? CKPT_ENTRY_FILE : CKPT_ENTRY_OTHER;
    /* In a plain tar the format has consumed exactly the header blocks, so
     * its position is where the member's bytes start. */
    e->data_offset = a->plain_tar && e->type == CKPT_ENTRY_FILE
                   ? (uint64_t)archive_filter_bytes(a->ar, 0)
                   : CKPT_NO_OFFSET;
    return 1;
}

int ckpt_archive_read(struct ckpt_archive *a, void *buf, size_t len,
                      size_t *n, struct ckpt_err *err)
{
    la_ssize_t r = archive_read_data(a->ar, buf, len);
    if (r < 0) {
        *n = 0;
        return ar_fail(a, err);
    }
    *n = (size_t)r;
    return 0;
}

uint64_t ckpt_archive_file_size(const struct ckpt_archive *a)
{
    return a->size;
}

uint64_t ckpt_archive_bytes_fetched(const struct ckpt_archive *a)
{
    return a->fetched;
}

enum ckpt_archive_kind ckpt_archive_kind(const struct ckpt_archive *a)
{
    return a->kind;
}

void ckpt_archive_close(struct ckpt_archive *a)
{
    if (!a)
        return;
    if (a->ar)
        archive_read_free(a->ar);
    if (a->fd >= 0)
        close(a->fd);
    ckpt_buf_release(&a->path);
    free(a->buf);
    free(a->key);
    free(a->name);
    free(a);
}
