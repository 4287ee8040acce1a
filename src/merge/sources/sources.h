/*
 * sources.h - where an unshard reads from: the checkpoint's metadata,
 * data files and zstd items (source.c), its directories and small files
 * (listing.c), small remote files fetched whole (prefetch.c), the CRCs of
 * zip records checked as read (crc_check.c), safetensors DCP items
 * (safetensors_items.c). Private to src/.
 */
#ifndef CKPT_MERGE_SOURCES_H
#define CKPT_MERGE_SOURCES_H

#include "merge/job.h"

/* sources/source.c */
int uns_src_open(struct ujob *j, const char *src, struct ckpt_err *err);
/* The storage settings of the job's options (--insecure, --retries). */
struct ckpt_storage_cfg uns_storage_cfg(const struct ckpt_unshard_opts *o);
int uns_src_get(struct ujob *j, const char *relpath, struct usrc **out,
            struct ckpt_err *err);
int uns_src_read(struct usrc *s, uint64_t off, void *buf, size_t len,
             struct ckpt_err *err);
/* Size of a file of the source (0), or -1 with err. */
int uns_src_stat(struct ujob *j, const char *path, uint64_t *size,
             struct ckpt_err *err);
/* Open the file at path (in SRC; with local set, a local file even when
 * SRC is remote) as *s, which borrows path; close s->fd (if >= 0) when
 * done. 0 or -1. */
int uns_src_file(struct ujob *j, const char *path, int local, struct usrc *s,
             struct ckpt_err *err);
/* src_file of a file read whole, more than once (train/rank0.pt: checked
 * while planning, then copied): remote and small, it is fetched once and
 * kept (uns_src_whole_file). */
int uns_src_file_whole(struct ujob *j, const char *path, int local,
                       struct usrc *s, struct ckpt_err *err);
/* Copy a whole source file into fd (named `to` in messages). */
/* An anonymous temporary file in the job's scratch directory (O_TMPFILE,
 * else an unlinked mkstemp file): decoded data that is read back. */
int uns_src_tmp_fd(struct ujob *j, struct ckpt_err *err);
int uns_src_copy(struct ujob *j, const char *path, int local, int fd,
             const char *to,
             uint64_t *size, struct ckpt_err *err);
/* The bytes of an item: the data file range, or for transformed items
 * (zstd) a decompressed temporary copy of at most limit bytes. */
int uns_src_item(struct ujob *j, const struct ckpt_dcp_storage *st,
             uint64_t limit, struct usrc **out, uint64_t *off,
             uint64_t *len, struct ckpt_err *err);
void uns_src_rd(struct ckpt_rd *rd, struct usrc *s, uint64_t off, uint64_t len);
/* Like src_rd, for parsing an item's structure (zip records, pickle):
 * from a remote source, small reads are served from a few windows of
 * 64 KiB fetched whole, so one item costs one or two ranged GETs
 * instead of one per record. Local sources read directly. Release the
 * cache (on the caller's stack) when done with rd. */
struct src_cache {
    struct usrc *s;
    uint64_t lo, hi;            /* the range rd may read */
    struct { uint64_t off; size_t len; char *buf; } w[4];
    int n, next;
};
void uns_src_rd_cached(struct ckpt_rd *rd, struct src_cache *c, struct usrc *s,
                   uint64_t off, uint64_t len);
void uns_src_cache_release(struct src_cache *c);
void uns_src_close_all(struct ujob *j);
/* Before the copy: remote data files are read from then on through large
 * blocks fetched ahead (ckpt_storage_open_readahead), within a memory
 * bound; probing, before, reads only what it needs. */
void uns_src_readahead(struct ujob *j);
/* Like src_get for a remote file whose size and ETag a listing gave:
 * no HEAD. */
int uns_src_get_listed(struct ujob *j, const char *relpath, uint64_t size,
                       const char *etag, struct usrc **out,
                       struct ckpt_err *err);
/* Bytes of read-ahead and whole-file memory (CKPT_READAHEAD_MB; 0: off). */
uint64_t uns_src_ra_budget(void);

struct uns_dent;
/* sources/prefetch.c: the file relpath (kept as a key: in the metadata arena) as
 * listing entry e found it, which the planner is about to read (call in
 * the order it reads them): registered as a source without a HEAD and,
 * when remote, small and within the memory budget, fetched whole by a
 * few threads ahead of the planner; every read of it is then served from
 * memory. e NULL (not listed) or a local source: nothing done. 0, or -1
 * with err. */
int uns_src_prefetch(struct ujob *j, const char *relpath,
                     const struct uns_dent *e, struct ckpt_err *err);
/* Serve a read of s from its whole copy: 1 done, 0 not held (read it as
 * before), -1 with err (out of the file's bounds). */
int uns_src_whole_read(struct usrc *s, uint64_t off, void *buf, size_t len,
                       struct ckpt_err *err);
/* A remote file s opened by path (src_file: size and ETag known), small
 * and within the budget: read whole on its first use, once per job, and
 * served from memory to every reader of the same path and ETag. */
void uns_src_whole_file(struct ujob *j, struct usrc *s);
/* Stop the fetches and free the copies (uns_src_close_all). */
void uns_src_whole_free(struct ujob *j);

/* Register an open file (name malloced, taken over) as a source. */
struct usrc *uns_src_add(struct ujob *j, char *name, int fd, uint64_t size);

/* sources/crc_check.c: a zip record at [off, off+size) of s with CRC-32 crc
 * (named prefix/name in messages) is checked by the copy; thread-safe. */
void uns_src_note_record(struct usrc *s, uint64_t off, uint64_t size,
                     uint32_t crc, const char *prefix, const char *name);
/* Before the copy: makes the registered records findable. */
void uns_src_records_ready(struct ujob *j);
/* src_read that notes the CRC of what it read for the record it lies in. */
int uns_src_read_noted(struct usrc *s, uint64_t off, void *buf, size_t len,
                   struct ckpt_err *err);
/* After the copy: every record something was read from matches its CRC
 * (gaps are read now), else an error naming file and record. */
int uns_src_check_records(struct ujob *j, struct ckpt_err *err);
void uns_src_records_free(struct usrc *s);

/* sources/listing.c: directories and small files of the source, read where it is
 * (local, object storage, tar members; j->src.st), for the planners. A
 * listing is kept sorted by name; with recursive, names are paths below
 * dir and only files (and local links) are listed. */
struct uns_dent {
    char *name;
    enum ckpt_entry_type type;
    uint64_t size;
    char *etag;                 /* object storage ETag, or "" */
};
struct uns_dir {
    struct uns_dent *v;
    size_t n, cap;
};
int uns_fs_list(struct ujob *j, const char *dir, int recursive,
                struct uns_dir *d, struct ckpt_err *err);
const struct uns_dent *uns_fs_find(const struct uns_dir *d, const char *name);
/* A file (or a local link, which stat() would follow) named name. */
int uns_fs_has_file(const struct uns_dir *d, const char *name);
void uns_fs_free(struct uns_dir *d);
/* path is a file of the source (stat). */
int uns_fs_is_file(struct ujob *j, const char *path);
/* A whole small file (at most max bytes; NUL-terminated) in one read, as
 * listed in e (size, ETag: a replaced object fails), or with e NULL as its
 * stat finds it. */
int uns_fs_read(struct ujob *j, const char *path, const struct uns_dent *e,
                size_t max, char **data, size_t *len, struct ckpt_err *err);

/* sources/safetensors_items.c: locate chunk c of t when its item at off of s is a
 * safetensors file (serialization_format=SAFETENSORS): 1 done, 0 not
 * safetensors (a torch zip), -1 with err. */
int uns_st_item_locate(struct ujob *j, struct utensor *t, struct uchunk *c,
                       struct usrc *s, uint64_t off, struct ckpt_err *err);
void uns_st_items_free(struct ujob *j);

#endif
