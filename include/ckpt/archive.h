/*
 * ckpt/archive.h - read run archives (.tar, .tar.gz/.tgz, .tar.bz2,
 * .tar.zst, .tar.xz, .zip) through libarchive, fed from any storage by
 * ranged reads. Nothing is extracted to disk. Compressed archives are
 * decompressed by our own decoders on the storage's -j threads (all cores
 * by default): bzip2 blocks in parallel, xz blocks through liblzma's
 * threaded decoder, gzip through ISA-L where built with it.
 *
 * Plain .tar is read header by header and member data is skipped by seeking,
 * so classifying a remote tar fetches only the headers; each entry reports
 * the offset of its data so callers can read members directly. Compressed
 * archives stream once from start to end.
 *
 * Member names are checked as they are read: absolute paths, '..'
 * components and links that point outside the archive are an error naming
 * the member.
 */
#ifndef CKPT_ARCHIVE_H
#define CKPT_ARCHIVE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "ckpt/err.h"
#include "ckpt/storage.h"

enum ckpt_archive_kind {
    CKPT_ARCHIVE_NONE = 0,
    CKPT_ARCHIVE_TAR,
    CKPT_ARCHIVE_TAR_GZ,
    CKPT_ARCHIVE_TAR_BZ2,
    CKPT_ARCHIVE_TAR_ZST,
    CKPT_ARCHIVE_TAR_XZ,
    CKPT_ARCHIVE_ZIP
};

/* The archive kind named by a file name's extension, or NONE. */
enum ckpt_archive_kind ckpt_archive_kind_of(const char *name);
/* 1 for the compressed tars (.tar.gz/.bz2/.zst/.xz): the kinds a pass
 * must decompress, which process and unshard spool (a plain tar or zip
 * is read in place). */
int ckpt_archive_compressed(enum ckpt_archive_kind k);
/* The name without its archive extension ("run1.tar.gz" -> "run1"),
 * malloced. */
char *ckpt_archive_stem(const char *name);

#define CKPT_NO_OFFSET UINT64_MAX

struct ckpt_archive_entry {
    const char *path;          /* borrowed until the next call; normalised:
                                  no leading "./" or "/", no trailing "/" */
    uint64_t size;
    enum ckpt_entry_type type; /* FILE, DIR, LINK or OTHER */
    uint64_t data_offset;      /* byte offset of the data in the archive
                                  file (plain tar), else CKPT_NO_OFFSET */
    const char *hardlink;      /* type LINK: the member a hard link names
                                  (normalised, from the archive root), or
                                  NULL for a symlink / other members */
    const char *symlink;       /* type LINK: a symbolic link's target as
                                  stored, or NULL */
};

struct ckpt_archive;

/* Open the archive stored at key. The storage handle is borrowed and must
 * outlive the archive. */
int ckpt_archive_open(struct ckpt_archive **out, struct ckpt_storage *st,
                      const char *key, struct ckpt_err *err);
/* Next member: returns 1 and fills e, 0 at the end, -1 on error. */
int ckpt_archive_next(struct ckpt_archive *a, struct ckpt_archive_entry *e,
                      struct ckpt_err *err);
/* After next() returned 0: NULL when the archive was read to a proper end,
 * else why not (malloc-free, owned by a). Proper: a tar's end-of-archive
 * blocks followed by nothing but zeros (at least two zero blocks), a
 * compressed stream that ended with every byte of the file consumed and
 * every checksum matching (each gzip member's CRC-32 and length, each
 * bzip2 block's and stream's CRC, xz's and zstd's checks), a
 * zip's central directory read; and the file's size and mtime unchanged
 * since open. Only such an archive may be judged to lack something. */
const char *ckpt_archive_damage(const struct ckpt_archive *a);
/* Salvage mode (for judging what an archive holds, never for copying it):
 * read on past damage as `tar -i` does (damaged header blocks are skipped,
 * reading resumes after non-zero data that follows the end-of-archive
 * blocks, e.g. concatenated archives) and end the listing (0, with
 * ckpt_archive_damage set) where libarchive gives up, instead of failing.
 * Storage failures and unsafe members are still errors. */
void ckpt_archive_set_salvage(struct ckpt_archive *a, int on);
/* Read the current member's data sequentially; *n == 0 at its end. */
int ckpt_archive_read(struct ckpt_archive *a, void *buf, size_t len,
                      size_t *n, struct ckpt_err *err);
/* Size of the archive file, and bytes fetched from storage so far. */
uint64_t ckpt_archive_file_size(const struct ckpt_archive *a);
uint64_t ckpt_archive_bytes_fetched(const struct ckpt_archive *a);
enum ckpt_archive_kind ckpt_archive_kind(const struct ckpt_archive *a);
void ckpt_archive_close(struct ckpt_archive *a);

/* Check one member name (and link target, or NULL): 0, or -1 with a
 * CKPT_EUNSAFE error naming the member. Exposed for tests and fuzzing. */
int ckpt_archive_check_member(const char *archive, const char *path,
                              const char *link, int hardlink,
                              struct ckpt_err *err);

/*
 * Spools: one decompression pass for every reader of a compressed
 * archive. ckpt_archive_spool reads the archive once, to its proper end,
 * and writes each file member's bytes into a fresh private directory
 * (a temporary of ckpt/tempname.h, so a killed process's spool is removed
 * by the next sweep of that directory). Once attached, every
 * ckpt_archive_open of the same storage and key replays the spool instead
 * of decompressing again: the same members in the same order, with the
 * same names, sizes, types and links, and their bytes from the spool, as
 * long as the archive is unchanged since it was spooled (size, mtime and,
 * locally, ctime and inode; remotely the ETag); a changed archive is read
 * again as usual.
 */
struct ckpt_archive_spool;

/* The disk a set of spools may take (all runs' spools in one `process`):
 * at most limit bytes of member data together (0: no limit), and each
 * member only while ckpt_archive_spool_room(dir) allows it. A spool
 * reserves each member's size before writing it and gives back all it
 * reserved when it is freed or fails. Thread-safe; it must outlive the
 * spools that use it. */
struct ckpt_spool_budget {
    pthread_mutex_t mu;
    const char *dir;            /* borrowed */
    uint64_t limit, used;
    int refused;                /* a spool was refused for want of room */
};

void ckpt_spool_budget_init(struct ckpt_spool_budget *b, const char *dir,
                            uint64_t limit);
void ckpt_spool_budget_destroy(struct ckpt_spool_budget *b);

struct ckpt_spool_cfg {
    const char *dir;            /* where the spool directory is made */
    struct ckpt_spool_budget *budget;   /* NULL: no limit */
    /* The archive's bytes read so far of its size, as the pass goes on
     * (and once at the end); NULL: nobody is told. */
    void (*on_read)(void *ud, uint64_t read, uint64_t size);
    void *ud;
    /* MD5 each file member's bytes as they are written, so that a copy
     * can take the spooled file itself (ckpt_archive_spooled) instead of
     * reading and hashing it again. */
    int hash;
};

/* Spool the archive at key (st borrowed; it must outlive the spool). 0
 * with *out, or -1 with err (the archive is damaged or does not end
 * properly, a member does not fit the budget, a storage or disk error);
 * nothing is left on disk then. */
int ckpt_archive_spool(struct ckpt_archive_spool **out,
                       struct ckpt_storage *st, const char *key,
                       const struct ckpt_spool_cfg *cfg,
                       struct ckpt_err *err);
/* The disk rule of spools: 0 when bytes more written below dir leave
 * the last GiB (or 5% of its file system, if less) free, else -1 with
 * err saying so. */
int ckpt_archive_spool_room(const char *dir, uint64_t bytes,
                            struct ckpt_err *err);
/* Bytes of member data the spool holds. */
uint64_t ckpt_archive_spool_bytes(const struct ckpt_archive_spool *s);
/* Make ckpt_archive_open replay s (thread-safe), and stop. */
void ckpt_archive_spool_attach(struct ckpt_archive_spool *s);
void ckpt_archive_spool_detach(struct ckpt_archive_spool *s);
/* Detach, remove the spool directory, free. NULL is a no-op. */
void ckpt_archive_spool_free(struct ckpt_archive_spool *s);
/* The attached spool of (st, key) as a directory, malloced, or NULL:
 * every file member whose last copy is at its own path below it, as
 * `tar x` leaves them (no hard or symbolic links made), when the archive
 * is unchanged and every member found its place. */
char *ckpt_archive_spool_root(struct ckpt_storage *st, const char *key);

/* A file member's bytes as one file of a spool that hashed them
 * (ckpt_spool_cfg.hash): its path and the MD5 and stat of the bytes as
 * the pass wrote them, straight from the archive's decompressed stream. */
struct ckpt_spooled {
    char *path;                 /* malloced */
    unsigned char md5[16];
    struct ckpt_file_ver ver;
};
/* The member ckpt_archive_next just gave, when a is a replay, the member
 * is a file, nothing of it was read yet, and its spool hashed it: 1 with
 * *out, else 0 (read it). The file stays until the spool is freed. */
int ckpt_archive_spooled(struct ckpt_archive *a, struct ckpt_spooled *out);
/* 0 when s->path is still the file the pass left (s->ver: inode, size,
 * mtime, ctime), else -1 with err (CKPT_EIO) saying what changed. */
int ckpt_spooled_same(const struct ckpt_spooled *s, struct ckpt_err *err);

#endif
