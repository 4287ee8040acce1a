/*
 * ckpt/storage.h - locations and the storage operations every backend
 * provides (SPEC "Locations" and "Storage operations").
 *
 * A location is what the user typed: a local path, file://PATH,
 * s3://BUCKET/KEY, r2://BUCKET/KEY or gs://BUCKET/KEY. A storage handle is
 * one backend instance (local filesystem, or one bucket of one service with
 * its credentials). Keys are '/'-separated: for local storage a key is a
 * filesystem path (absolute or relative to the cwd); for object storage it
 * is the object key within the bucket.
 *
 * Every operation is thread-safe on a shared handle: pool workers call them
 * concurrently. Missing things fail with CKPT_ENOTFOUND, except deletes,
 * where "already gone" is success (a concurrent deleter must not fail us).
 */
#ifndef CKPT_STORAGE_H
#define CKPT_STORAGE_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt/err.h"

enum ckpt_scheme {
    CKPT_SCHEME_LOCAL = 0,
    CKPT_SCHEME_S3,
    CKPT_SCHEME_R2,
    CKPT_SCHEME_GS
};

struct ckpt_loc {
    enum ckpt_scheme scheme;
    char *bucket;   /* owned; NULL for local */
    char *key;      /* owned; path (local) or key, no leading '/', may be "" */
    char *display;  /* owned; the location as the user wrote it */
};

/* Parse s into loc. Trailing slashes of the key are kept off ("a/b/" is
 * "a/b") except for the local root "/". Returns 0 or -1 (CKPT_EUSAGE). */
int ckpt_loc_parse(struct ckpt_loc *loc, const char *s, struct ckpt_err *err);
void ckpt_loc_release(struct ckpt_loc *loc);
/* "s3://bkt/KEY" or the plain local path for key in loc's storage
 * ("file://PATH" when PATH has "://" in it, so that it parses back to the
 * same location). Malloced. */
char *ckpt_loc_format(const struct ckpt_loc *loc, const char *key);
/* Scheme prefix: "", "s3://", "r2://", "gs://". */
const char *ckpt_scheme_prefix(enum ckpt_scheme s);

/* A remote request about to be repeated, told before the wait
 * (ckpt_storage_cfg.on_retry) from the thread that sent it. */
struct ckpt_storage_retry {
    const char *what;   /* the object, prefix or service, as in messages */
    int attempt;        /* the attempt about to be made: 2.. */
    int attempts;       /* of at most this many */
    double delay;       /* seconds it waits first */
    const char *why;    /* what the failed one got: "HTTP 503 SlowDown",
                           or curl's words for a failed transfer */
    int transport;      /* 1: no complete reply came (connect, timeout,
                           reset): the endpoint itself is what it waits
                           on */
};
typedef void (*ckpt_storage_retry_fn)(void *ud,
                                      const struct ckpt_storage_retry *r);

/* Settings shared by every backend, from the global options. */
struct ckpt_storage_cfg {
    int insecure;       /* skip TLS verification */
    int retries;        /* attempts for idempotent requests; <=0 default */
    int verbose;
    int jobs;           /* expected concurrency (connection pool size) */
    ckpt_storage_retry_fn on_retry; /* NULL: retries are silent */
    void *retry_ud;
    /* aws-cli's --profile, --endpoint-url and --region (borrowed; NULL:
     * not given): s3:// locations, and the keys of r2:// ones without
     * R2_PROFILE (docs/storage.md). */
    const char *profile;
    const char *endpoint_url;
    const char *region;
};

struct ckpt_storage;

enum ckpt_entry_type {
    CKPT_ENTRY_FILE = 0,
    CKPT_ENTRY_DIR,
    CKPT_ENTRY_LINK,    /* local only; never followed */
    CKPT_ENTRY_OTHER
};

struct ckpt_stat {
    uint64_t size;
    int64_t mtime;              /* seconds since epoch, or 0 */
    enum ckpt_entry_type type;
    char etag[80];              /* object storage ETag without quotes, or "" */
    int64_t ctime;              /* local: inode change time (s); object
                                   storage: LastModified, as mtime */
};

/* One listed entry; pointers are borrowed for the duration of the callback. */
struct ckpt_entry {
    const char *name;           /* relative to the listed prefix, '/'-separated */
    uint64_t size;
    int64_t mtime;
    enum ckpt_entry_type type;
    const char *etag;           /* "" when unknown */
    int64_t ctime;              /* as struct ckpt_stat's, or 0 */
    int mount;                  /* local: a mount point below the listed
                                   directory (another device or mount, or
                                   a mount's root), found by the listing's
                                   own statx; never set below one. 0 else */
};

/* Return 0 to continue, non-zero to stop the listing (returned as-is). */
typedef int (*ckpt_list_fn)(void *ud, const struct ckpt_entry *e);

#define CKPT_LIST_RECURSIVE 1u  /* every file below; else one level (dirs too) */
/* With RECURSIVE: also report each directory that is a mount point (as a
 * DIR entry with mount set, before what it holds), so that an empty
 * mount is seen. Local listings only; others ignore it. */
#define CKPT_LIST_MOUNTS 2u

/* Open the storage that serves loc (credentials and endpoint from the
 * environment and profile files). Free with ckpt_storage_close. */
int ckpt_storage_open(struct ckpt_storage **out, const struct ckpt_loc *loc,
                      const struct ckpt_storage_cfg *cfg, struct ckpt_err *err);
void ckpt_storage_close(struct ckpt_storage *st);
int ckpt_storage_is_local(const struct ckpt_storage *st);
/* The concurrency the storage was opened for (cfg.jobs, -j): 0 when not
 * given. Archive decoders size their thread pools by it. */
int ckpt_storage_jobs(const struct ckpt_storage *st);
/* Is etag a content hash rather than an opaque tag: 32 hex digits (an
 * MD5), alone or followed by "-N" (a multipart object's)? *multipart says
 * which. */
int ckpt_etag_is_md5(const char *etag, int *multipart);
/* How key in st is shown to the user: the path, or "s3://bkt/key".
 * Malloced. */
char *ckpt_storage_display(const struct ckpt_storage *st, const char *key);

/* A file/object, or a directory/prefix (type DIR, size 0). */
int ckpt_storage_stat(struct ckpt_storage *st, const char *key,
                      struct ckpt_stat *out, struct ckpt_err *err);

/* List below directory/prefix `dir` (treated as a directory: "a" lists
 * "a/..."). Recursive listings report files (and local symlinks, as LINK,
 * not followed); one-level listings report subdirectories as DIR too.
 * Order is unspecified. */
int ckpt_storage_list(struct ckpt_storage *st, const char *dir, unsigned flags,
                      ckpt_list_fn fn, void *ud, struct ckpt_err *err);

/* Read up to len bytes at off into buf; *nread < len only at end of file.
 * Reading at or past the end gives *nread == 0. */
int ckpt_storage_read(struct ckpt_storage *st, const char *key, uint64_t off,
                      void *buf, size_t len, size_t *nread,
                      struct ckpt_err *err);

/* ckpt_storage_read of the object as it was when its ETag was etag (from
 * stat or a listing; NULL or "": any): remote reads send If-Match, so a
 * replaced object fails (CKPT_EHTTP, http_status 412, "'LOC' changed
 * during read")
 * instead of mixing bytes of two versions. Local files have no ETag and
 * are read as ckpt_storage_read reads them. */
int ckpt_storage_read_if(struct ckpt_storage *st, const char *key,
                         const char *etag, uint64_t off, void *buf,
                         size_t len, size_t *nread, struct ckpt_err *err);

/* Read a whole small file into a malloced buffer (NUL-terminated; *len
 * excludes it). Fails with CKPT_EFORMAT if it is larger than max. */
int ckpt_storage_read_all(struct ckpt_storage *st, const char *key,
                          size_t max, char **data, size_t *len,
                          struct ckpt_err *err);

/* Streaming write: bytes become visible at key only on commit (local: temp
 * file + rename; objects: PUT or multipart completed). abort discards.
 * size_hint is the expected total (or UINT64_MAX if unknown). */
struct ckpt_writer;
int ckpt_storage_writer_open(struct ckpt_storage *st, const char *key,
                             uint64_t size_hint, struct ckpt_writer **out,
                             struct ckpt_err *err);
int ckpt_writer_write(struct ckpt_writer *w, const void *data, size_t len,
                      struct ckpt_err *err);
/* Commit and free w (also on failure). */
int ckpt_writer_commit(struct ckpt_writer *w, struct ckpt_err *err);
/* Discard and free w. NULL-safe. */
void ckpt_writer_abort(struct ckpt_writer *w);

/* A read-only storage over the members of a plain (uncompressed) tar:
 * key "ARCHIVE/PATH" reads member PATH at its data offset in the archive
 * at key ARCHIVE of under (borrowed; local or remote), so a checkpoint
 * inside a tar is read in place. Members are copied. */
struct ckpt_member {
    const char *path;       /* member path, '/'-separated, no leading "/" */
    uint64_t offset;        /* data offset in the archive */
    uint64_t size;
};
int ckpt_storage_open_members(struct ckpt_storage **out,
                              struct ckpt_storage *under, const char *archive,
                              const struct ckpt_member *v, size_t n,
                              struct ckpt_err *err);

/* A read-only storage over under (borrowed) whose reads are served from
 * aligned blocks of `block` bytes, each fetched whole with one ranged read
 * (If-Match the ETag the read names), at most nblocks held (memory: block
 * * nblocks), and fetched ahead of sequential readers by `threads`
 * threads: a read of block k of a key has k+1..k+depth fetched meanwhile.
 * For readers that go through remote files in small pieces (unshard):
 * fewer, larger GETs, several in flight. stat and list pass through;
 * writes fail CKPT_EUNSUPPORTED. */
int ckpt_storage_open_readahead(struct ckpt_storage **out,
                                struct ckpt_storage *under, size_t block,
                                size_t nblocks, int threads, int depth,
                                struct ckpt_err *err);

/* Write a small object in one call (atomic as above). */
int ckpt_storage_put(struct ckpt_storage *st, const char *key,
                     const void *data, size_t len, struct ckpt_err *err);
/* Create key only if it does not exist: CKPT_EEXIST if it does.
 * CKPT_EUNSUPPORTED where the service cannot do it atomically. */
int ckpt_storage_put_if_absent(struct ckpt_storage *st, const char *key,
                               const void *data, size_t len,
                               struct ckpt_err *err);

/* Delete one file/object. Missing is success. */
int ckpt_storage_delete(struct ckpt_storage *st, const char *key,
                        struct ckpt_err *err);
/* Delete a directory tree / every object under prefix `dir` + "/", and
 * the file/object `dir` itself if it exists. Local: never follows symlinks
 * (unlinks them), survives concurrent deleters. Remote: batched. */
int ckpt_storage_delete_tree(struct ckpt_storage *st, const char *dir,
                             struct ckpt_err *err);
/* ckpt_storage_delete_tree, rename-first where the storage is local: dir
 * is first renamed to its hidden ".BASE.ckpt-del-HOST-PID" sibling
 * (ckpt_del_rename, tempname.h), the commit point of the delete, and the
 * sibling is deleted; a kill leaves dir whole or the sibling, which
 * ckpt_del_dead finds once this process is gone. A missing dir is
 * success. Remote storages delete in place (batched). */
int ckpt_storage_delete_tree_aside(struct ckpt_storage *st, const char *dir,
                                   struct ckpt_err *err);
/* Delete the file key below directory root, and only there: the
 * directory it is unlinked from, resolved, must be root's real path or
 * below it (never a file reached through a symlink out of root), and on
 * root's filesystem (never across a mount point); else CKPT_EUNSAFE and
 * the file stays. Missing is success. Remote: ckpt_storage_delete. */
int ckpt_storage_delete_below(struct ckpt_storage *st, const char *root,
                              const char *key, struct ckpt_err *err);

/* -1 with CKPT_EUNSAFE naming it when the local directory dir holds a
 * mount point (ckpt_local_find_mount), else 0 (remote storages, a file,
 * a missing dir: 0). */
int ckpt_storage_mount_fault(struct ckpt_storage *st, const char *dir,
                             struct ckpt_err *err);

/* ---- local files only ---- */

/* Open a local file for reading, and only a regular file: its type is
 * checked before the open (lstat, or stat with CKPT_OPEN_FOLLOW), it is
 * opened non-blocking (a FIFO would block the open) and without
 * following a last symlink (unless CKPT_OPEN_FOLLOW), and checked again
 * on the descriptor. A FIFO, socket, device, directory or symlink is
 * CKPT_EUNSAFE naming it. The fd (blocking), or -1. */
#define CKPT_OPEN_FOLLOW 1u
int ckpt_local_open_read(const char *path, unsigned flags,
                         struct ckpt_err *err);
/* "a FIFO", "a socket", "a symbolic link", ... of a st_mode. */
const char *ckpt_local_kind(unsigned mode);
/* ckpt_storage_delete_below for a local root. */
int ckpt_local_delete_below(const char *root, const char *key,
                            struct ckpt_err *err);
/* Mount points below dir (a file or directory on another device than
 * dir's; not walked into): 1 with *first the smallest path (relative to
 * dir, malloced) and *n how many, 0 when none, -1 on error. */
int ckpt_local_find_mount(const char *dir, char **first, size_t *n,
                          struct ckpt_err *err);
/* 1 when local paths a and b (or, where one does not exist yet, the
 * nearest directory above it that does) are on one filesystem and mount,
 * so that a hard link between them can be made; else 0. */
int ckpt_local_same_fs(const char *a, const char *b);

/* Delete exactly the files/objects keys[0..n) (all below dir, as a listing
 * of dir named them), then, locally, the directories below dir left empty
 * and dir itself if empty. Nothing else is deleted: a file written below
 * dir meanwhile stays (the caller lists dir again to find out). Local:
 * walks with O_NOFOLLOW, never through a symlink swapped in. Remote:
 * batched. Missing keys are success. */
int ckpt_storage_delete_keys(struct ckpt_storage *st, const char *dir,
                             char *const *keys, size_t n,
                             struct ckpt_err *err);

/* Can requests to st succeed at all? Asked once before a command starts
 * its work, so that what fails every request is one error, not one per
 * file: a remote storage lists one key below key (ListObjectsV2). A
 * missing bucket, credentials the service refuses (an unknown key, a
 * wrong secret, an expired or invalid session token, a skewed clock) and
 * an endpoint that never answers fail it with that request's error;
 * anything else passes (AccessDenied: a writer may be allowed to write
 * without being allowed to list). Local storage: 0. */
int ckpt_storage_probe(struct ckpt_storage *st, const char *key,
                       struct ckpt_err *err);

/* Bytes fetched from the backend so far (for benchmarks and tests). */
uint64_t ckpt_storage_bytes_read(const struct ckpt_storage *st);

/* Transport counters of a remote storage (all zero for local storage). */
struct ckpt_storage_stats {
    uint64_t requests;   /* HTTP requests sent, retries included */
    uint64_t retries;    /* attempts that repeated a failed one */
    uint64_t bytes_in;   /* response body bytes received */
    uint64_t bytes_out;  /* request body bytes sent */
};
void ckpt_storage_stats(const struct ckpt_storage *st,
                        struct ckpt_storage_stats *out);

/* ---- Uploads driven by the caller (`ckpt upload`) ----
 *
 * Lower level than the streaming writer: the caller reads the bytes,
 * schedules single PUTs and the parts of multipart uploads over its own
 * workers (one budget for files and parts), and records upload ids so a
 * later process can resume an interrupted upload. Local storage implements
 * the same calls with a temporary file written at offsets and renamed into
 * place on finish (the "upload id" is the temporary file's path).
 * Every call is thread-safe on a shared handle.
 */

/* What ckpt records with an object (object storage: metadata
 * x-amz-meta-ckpt-md5 / -part-size / -mtime; local: the file's mtime).
 * A record ckpt wrote is never proof that the object holds those bytes
 * (a PUT damaged on the way keeps the metadata of the bytes meant):
 * only the service's own hashes below are (docs/reliability.md "Bytes,
 * not records"). */
struct ckpt_obj_meta {
    char md5[33];          /* hex MD5 of the whole object, or "" */
    uint64_t part_size;    /* part size of the multipart upload, or 0 */
    int64_t mtime;         /* source modification time (s), or 0 */
    /* ckpt_storage_head only: what the service computed from the bytes
     * it holds (GCS's x-goog-hash), never sent by ckpt. */
    char dest_md5[33];     /* hex MD5 (GCS: not for composite objects),
                              or "" */
    uint32_t dest_crc32c;  /* CRC32C, when has_crc32c */
    int has_crc32c;
};

struct ckpt_put_result {
    char etag[80];         /* the service's ETag, unquoted; "" for local */
    int throttled;         /* failed at once on a same-object throttle */
    double retry_after;    /* seconds the service asked for, or -1 */
};

/* Flag for put_object/mpu_part: a same-object throttle (R2's 429 "Reduce
 * your concurrent request rate for the same object", GCS's "too quickly")
 * fails at once with res->throttled set, so the caller can back off that
 * object and keep the others flowing; other faults are retried as usual. */
#define CKPT_PUT_THROTTLE_RETURN 1u

/* Local temporary files of unfinished copies are named as in tempname.h
 * (ckpt_is_temp_name: never listed as copied data); this mark is that of
 * older versions' names, still recognised. */
#define CKPT_UPLOAD_TEMP_MARK ".ckpt-up-"

/* stat plus ckpt's metadata (all zero/"" when absent). */
int ckpt_storage_head(struct ckpt_storage *st, const char *key,
                      struct ckpt_stat *out, struct ckpt_obj_meta *meta,
                      struct ckpt_err *err);
/* One PUT of data (Content-MD5 from md5, metadata from meta, may be NULL).
 * Atomic as the writer is. res may be NULL. */
int ckpt_storage_put_object(struct ckpt_storage *st, const char *key,
                            const void *data, size_t len,
                            const unsigned char md5[16],
                            const struct ckpt_obj_meta *meta, unsigned flags,
                            struct ckpt_put_result *res,
                            struct ckpt_err *err);
/* A local file as the caller knew it (stat). */
struct ckpt_file_ver {
    uint64_t size, ino, dev;
    int64_t mtime_ns, ctime_ns;
    int regular;
};
/* lstat(2) of path (fd: fstat(2) of fd, path naming it for messages). 0,
 * or -1 with err. */
int ckpt_file_ver_get(const char *path, int fd, struct ckpt_file_ver *v,
                      struct ckpt_err *err);
/* NULL when now is the version was, else what differs ("type", "inode",
 * "size", "modification time", "ctime"; ctime only when asked: a link
 * moves it). */
const char *ckpt_file_ver_diff(const struct ckpt_file_ver *was,
                               const struct ckpt_file_ver *now, int ctime);

/* Local storage only (else CKPT_EUNSUPPORTED): the file at path, whose
 * bytes have MD5 md5 and which is still as ver says (its ctime aside), becomes key. A hard
 * link when key's directory is on path's filesystem and a file created
 * there would look the same (no default ACL; a set-group-ID directory's
 * group given to it), else a copy whose bytes must hash to md5. Either
 * way it appears under key by one rename, with meta's mtime, and only
 * when it is the version ver (a link: the same inode, size and mtime
 * after linking). *linked says which. */
int ckpt_storage_put_file(struct ckpt_storage *st, const char *key,
                          const char *path, const struct ckpt_file_ver *ver,
                          const unsigned char md5[16],
                          const struct ckpt_obj_meta *meta, int *linked,
                          struct ckpt_err *err);
/* Supplies the len bytes of an object's body at offset off into buf
 * (a retried PUT asks for the same bytes again). 0, or -1 with err set:
 * the PUT then fails with that error. */
typedef int (*ckpt_body_fn)(void *ud, uint64_t off, void *buf, size_t len,
                            struct ckpt_err *err);

/* One PUT of size bytes pulled through body while they are sent, never
 * held whole in memory: Content-MD5 from md5 (the MD5 of the bytes body
 * gives), metadata from meta (may be NULL). A reply ETag that is a plain
 * MD5 other than md5 means the bytes changed on the way: the PUT is
 * repeated within the retry budget, and if it never matches the object
 * it wrote is deleted (If-Match that ETag) and the call fails CKPT_EHTTP.
 * Local storage: a temporary file renamed into place. res may be NULL. */
int ckpt_storage_put_stream(struct ckpt_storage *st, const char *key,
                            uint64_t size, ckpt_body_fn body, void *ud,
                            const unsigned char md5[16],
                            const struct ckpt_obj_meta *meta, unsigned flags,
                            struct ckpt_put_result *res,
                            struct ckpt_err *err);

/* ---- Write policy: one PUT or a multipart upload ----
 *
 * One rule for every writer of objects (upload, unshard outputs), so they
 * agree on what is fastest within the memory bound (docs/storage.md
 * "Write policy"). A single PUT is one request and, on services that
 * assemble multipart objects by copying (s3rver, MinIO on one disk), half
 * the service's writes; multipart is the only parallelism within one
 * object, and the only way past 5 GiB. */
#define CKPT_SINGLE_PUT_MAX (200ull << 20)  /* rclone's cut-off too */
#define CKPT_PUT_PARALLEL 4   /* files in flight that keep a service busy */

struct ckpt_write_in {
    uint64_t size;            /* object bytes */
    unsigned files_in_flight; /* objects written at the same time (>= 1) */
    uint64_t min_part;        /* part size floor; 0: 8 MiB */
    uint64_t mem_budget;      /* bytes of buffers the writer has; 0: 96 MiB */
    int streamed;             /* the body can be re-read by offset
                                 (ckpt_body_fn): a PUT holds no buffer */
    int assembled;            /* the writer assembles the whole body in
                                 memory as it makes it (unshard outputs):
                                 one PUT if it fits mem_budget, the room
                                 the writer has for it */
};

struct ckpt_write_plan {
    int multipart;            /* 0: one PUT */
    uint64_t part_size;       /* multipart: bytes per part, whole MiB */
    int nparts;               /* 1 for a PUT */
};

/* The plan for an object of object storage (local = 0) or of a local
 * file (local = 1: "parts" are ranges written at offsets in parallel, so
 * anything above one part is split). Pure; see the rules in
 * write_policy.c. */
void ckpt_write_plan(int local, const struct ckpt_write_in *in,
                     struct ckpt_write_plan *out);
/* ckpt_write_plan for DEST storage st. */
void ckpt_storage_write_plan(const struct ckpt_storage *st,
                             const struct ckpt_write_in *in,
                             struct ckpt_write_plan *out);

/* Start a multipart upload of an object of size bytes; *upload_id is
 * malloced. */
int ckpt_storage_mpu_start(struct ckpt_storage *st, const char *key,
                           uint64_t size, const struct ckpt_obj_meta *meta,
                           char **upload_id, struct ckpt_err *err);
/* Upload part num (1-based) holding the bytes at offset off. A missing
 * upload (expired, aborted, temporary file gone) fails CKPT_ENOTFOUND. */
int ckpt_storage_mpu_part(struct ckpt_storage *st, const char *key,
                          const char *upload_id, int num, uint64_t off,
                          const void *data, size_t len,
                          const unsigned char md5[16], unsigned flags,
                          struct ckpt_put_result *res, struct ckpt_err *err);
/* Complete with the parts' ETags (etags[i] for part i + 1), then check the
 * object has size bytes. res->etag: the object's ETag. meta: local mtime. */
int ckpt_storage_mpu_finish(struct ckpt_storage *st, const char *key,
                            const char *upload_id, int nparts,
                            const char *const *etags, uint64_t size,
                            const struct ckpt_obj_meta *meta,
                            struct ckpt_put_result *res,
                            struct ckpt_err *err);
/* Abort (discard) an upload. Already gone is success. */
int ckpt_storage_mpu_abort(struct ckpt_storage *st, const char *key,
                           const char *upload_id, struct ckpt_err *err);
/* Unfinished multipart uploads below prefix (ListMultipartUploads);
 * initiated is seconds since the epoch or 0. CKPT_EUNSUPPORTED where the
 * service cannot list them (s3rver: 501; local storage). fn returns 0 to
 * go on. */
typedef int (*ckpt_upload_list_fn)(void *ud, const char *key,
                                   const char *upload_id, int64_t initiated);
int ckpt_storage_mpu_list(struct ckpt_storage *st, const char *prefix,
                          ckpt_upload_list_fn fn, void *ud,
                          struct ckpt_err *err);
/* Where location b is relative to location a. Local paths are compared
 * by identity (device and inode: symlinks, "..", bind mounts and hard
 * links cannot hide that two spellings name one file), a path that does
 * not exist yet by its deepest existing ancestor plus the rest; object
 * storage by endpoint, bucket and key. A location that cannot be stat-ed
 * counts as APART (its own operation then reports why). */
enum ckpt_loc_rel {
    CKPT_LOC_APART = 0,
    CKPT_LOC_SAME,
    CKPT_LOC_B_INSIDE_A,   /* b is below a */
    CKPT_LOC_A_INSIDE_B    /* a is below b */
};
enum ckpt_loc_rel ckpt_storage_relation(struct ckpt_storage *sa,
                                        const char *a,
                                        struct ckpt_storage *sb,
                                        const char *b);
/* Do a and b (files that exist) name the same file or object? */
int ckpt_storage_same_file(struct ckpt_storage *sa, const char *a,
                           struct ckpt_storage *sb, const char *b);
/* Remove the empty directories at and below dir (local; never follows
 * symlinks; non-empty ones stay). A no-op for object storage. */
int ckpt_storage_prune_dirs(struct ckpt_storage *st, const char *dir,
                            struct ckpt_err *err);
/* The same, but dir itself stays (process removes a run's directory only
 * after its state says "done": while it is there a pass over SRC still
 * finds the run). */
int ckpt_storage_prune_below(struct ckpt_storage *st, const char *dir,
                             struct ckpt_err *err);

/* ---- Compare-and-swap on small objects (leases; docs/storage.md
 * "Conditional writes") ----
 *
 * A version names one write of a key: the ETag on S3/R2, the generation on
 * GCS (x-goog-generation), the hex MD5 of the bytes for a local file.
 * Losing a condition fails with CKPT_EEXIST ("changed since read"), and so
 * does a key that is gone. Local files: every conditional replace or
 * delete of KEY holds flock(2) on the sidecar "KEY.lock" (left in place:
 * removing a lock file others may hold is itself a race); the replace is a
 * temp file renamed into place, so readers never see partial bytes. Not
 * available on tar-member storages (CKPT_EUNSUPPORTED). */
#define CKPT_VERSION_MAX 80

/* ckpt_storage_read_all, plus the version of the bytes read (one GET:
 * the version belongs to exactly these bytes). */
int ckpt_storage_get_versioned(struct ckpt_storage *st, const char *key,
                               size_t max, char **data, size_t *len,
                               char version[CKPT_VERSION_MAX],
                               struct ckpt_err *err);
/* Replace key with data only if its version is still `version` (If-Match
 * on S3/R2, x-goog-if-generation-match on GCS); new_version (may be NULL)
 * gets the version written. */
int ckpt_storage_put_if_match(struct ckpt_storage *st, const char *key,
                              const void *data, size_t len,
                              const char *version,
                              char new_version[CKPT_VERSION_MAX],
                              struct ckpt_err *err);
/* Delete key only if its version is still `version`. A service that
 * ignores the condition on DELETE deletes unconditionally: callers that
 * must not delete another writer's object re-read first (see lease.h). */
int ckpt_storage_delete_if_match(struct ckpt_storage *st, const char *key,
                                 const char *version, struct ckpt_err *err);

#endif
