/* archive_int.h - shared by src/archive (not installed): the replay of an
 * attached spool (spool.c) behind ckpt_archive_open (archive.c). */
#ifndef CKPT_ARCHIVE_INT_H
#define CKPT_ARCHIVE_INT_H

#include "ckpt/archive.h"

struct arc_replay;

/* A replay of the spool attached for (st, key) when the archive is
 * unchanged since it was spooled, else NULL (read the archive). */
struct arc_replay *arc_replay_open(struct ckpt_storage *st, const char *key);
int arc_replay_next(struct arc_replay *r, struct ckpt_archive_entry *e,
                    struct ckpt_err *err);
int arc_replay_read(struct arc_replay *r, void *buf, size_t len, size_t *n,
                    struct ckpt_err *err);
uint64_t arc_replay_file_size(const struct arc_replay *r);
uint64_t arc_replay_fetched(const struct arc_replay *r);
enum ckpt_archive_kind arc_replay_kind(const struct arc_replay *r);
void arc_replay_close(struct arc_replay *r);

#endif
