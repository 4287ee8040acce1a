/* archive_int.h - shared by src/archive (not installed): spools (spool.c
 * makes them) and the replay of an attached one (replay.c) behind
 * ckpt_archive_open (archive.c). */
#ifndef CKPT_ARCHIVE_INT_H
#define CKPT_ARCHIVE_INT_H

#include "ckpt/archive.h"

#include <stdint.h>
#include <sys/stat.h>

struct sp_member {
    char *path;                 /* as ckpt_archive_next gave it */
    char *link;                 /* hard link target, or NULL */
    uint64_t size;
    enum ckpt_entry_type type;
    char *file;                 /* its bytes in the spool, or NULL */
    int hashed;                 /* md5 and ver hold file as written */
    unsigned char md5[16];
    struct ckpt_file_ver ver;
};

/* Which version of the archive: what a replay must still find. */
struct sp_ver {
    uint64_t size;
    int64_t mtime;
    int64_t mtime_ns, ctime_ns; /* local */
    uint64_t ino, dev;          /* local */
    char etag[80];              /* object storage */
};

struct ckpt_archive_spool {
    struct ckpt_storage *st;    /* borrowed */
    char *key;
    char *dir;                  /* the spool directory (a temporary) */
    char *root;                 /* dir/t: members at their own paths */
    struct sp_member *m;
    size_t n;
    int natural;                /* every member's last copy in root */
    uint64_t bytes;             /* member data written */
    enum ckpt_archive_kind kind;
    uint64_t size, fetched;
    struct sp_ver ver;
    struct ckpt_spool_budget *budget;   /* borrowed, or NULL */
    uint64_t reserved;          /* of budget, given back at the end */
    int attached;
    struct ckpt_archive_spool *next;    /* attached ones */
};

/* The version of the archive at key now: 0, or -1 with err. */
int arc_ver_get(struct ckpt_storage *st, const char *key, struct sp_ver *v,
                struct ckpt_err *err);
int arc_ver_same(const struct sp_ver *a, const struct sp_ver *b);

struct arc_replay;

/* A replay of the spool attached for (st, key) when the archive is
 * unchanged since it was spooled, else NULL (read the archive). */
struct arc_replay *arc_replay_open(struct ckpt_storage *st, const char *key);
int arc_replay_next(struct arc_replay *r, struct ckpt_archive_entry *e,
                    struct ckpt_err *err);
int arc_replay_read(struct arc_replay *r, void *buf, size_t len, size_t *n,
                    struct ckpt_err *err);
int arc_replay_spooled(const struct arc_replay *r, struct ckpt_spooled *out);
uint64_t arc_replay_file_size(const struct arc_replay *r);
uint64_t arc_replay_fetched(const struct arc_replay *r);
enum ckpt_archive_kind arc_replay_kind(const struct arc_replay *r);
void arc_replay_close(struct arc_replay *r);

#endif
