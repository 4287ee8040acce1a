/*
 * ckpt/upload.h - copy files, trees and archive contents between any two
 * locations (SPEC "ckpt upload"), resumably.
 *
 * One engine runs every copy added to it over one pool of workers: whole
 * small files and the parts of large ones share the same -j budget, and
 * part buffers share one memory budget, so peak memory is bounded whatever
 * the sizes. Each copy (a "group": one SRC to one DEST) keeps a journal of
 * started multipart uploads, acknowledged parts and verified objects under
 * the state directory, so a rerun after a crash resumes unfinished uploads
 * part by part and skips what already arrived.
 *
 * Nothing is printed here: the caller gets events (one per file, on the
 * thread that runs ckpt_upload_run) and totals.
 */
#ifndef CKPT_UPLOAD_H
#define CKPT_UPLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt/err.h"
#include "ckpt/storage.h"

enum ckpt_upload_action {
    CKPT_UP_UPLOADED = 0,   /* copied and verified */
    CKPT_UP_SKIPPED,        /* already at DEST with the same content */
    CKPT_UP_FAILED,         /* did not arrive; detail says why */
    CKPT_UP_WOULD_UPLOAD,   /* --dry-run */
    CKPT_UP_WOULD_SKIP,
    CKPT_UP_DELETED,        /* source deleted after verification */
    CKPT_UP_WOULD_DELETE,
    CKPT_UP_ABORTED,        /* a stale unfinished upload was discarded */
    CKPT_UP_WARNING,        /* not copied by design (symlink, special) */
    CKPT_UP_KEPT            /* copied (or dropped) but left at SRC by
                               design: reached through a symlink from
                               outside SRC, or a dropped file changed
                               since it was judged (detail says which) */
};

/* The details of the warnings about files never copied, and so never
 * deleted: they stay at SRC. */
#define CKPT_UP_WHY_LINK "symbolic link not followed (use --follow-links)"
#define CKPT_UP_WHY_SPECIAL "not a regular file; not copied"
/* An archive's symbolic link member (the archive is then kept). */
#define CKPT_UP_WHY_ARCHIVE_LINK "link inside the archive; not copied"

/* Stable lowercase name: "uploaded", "would-skip", ... */
const char *ckpt_upload_action_name(enum ckpt_upload_action a);

struct ckpt_upload_event {
    enum ckpt_upload_action action;
    const char *src;        /* borrowed: source as shown to the user */
    const char *dest;       /* borrowed: destination, or NULL */
    uint64_t bytes;         /* size of the file */
    const char *detail;     /* borrowed: reason or error, "" if none */
};

/* What a copy does with one file of a SRC added with CKPT_UPLOAD_PICK
 * (ckpt_upload_cfg.pick). */
enum ckpt_upload_pick {
    CKPT_PICK_COPY = 0,     /* copy it (and delete it with the source) */
    CKPT_PICK_LEAVE,        /* not copied, and never deleted: the source
                               keeps it (an archive SRC is then kept) */
    CKPT_PICK_DROP          /* not copied, but deleted with the source
                               once everything copied was verified */
};

struct ckpt_upload_cfg {
    int jobs;               /* workers (files and parts together), >= 1 */
    int dry_run;
    int checksum;           /* always compare content: local DEST by MD5
                               instead of size + mtime; never trust the
                               journal's record of an earlier copy alone */
    int delete_source;      /* delete SRC after every object is verified,
                               and only if nothing failed */
    /* Never replace an object at DEST with different bytes: such a file
     * fails ("conflict") and DEST keeps it; equal ones (by DEST's own
     * answer about its bytes) are skipped. An archive member is compared
     * as it is read, before anything of it is sent. `ckpt process` always
     * sets it: DEST's copy may be the only one. */
    int no_replace;
    int follow_links;       /* follow symlinks inside local trees */
    int keep_src_root;      /* --delete-source: a local SRC directory's
                               own directory stays, emptied (`ckpt
                               process` removes it once its state says
                               "done") */
    int strip;              /* --extract: step into a single top directory */
    uint64_t part_size;     /* minimum part size; 0: 8 MiB */
    uint64_t mem_budget;    /* bytes of data buffers; 0: 96 MiB */
    const char *state_dir;  /* journal directory; NULL: no journal */
    int max_throttles;      /* same-object throttles per request; 0: 30 */
    uint64_t bwlimit;       /* bytes per second sent, all workers
                               together (ckpt/ratelimit.h); 0: none */
    struct ckpt_rate *rate; /* borrowed, or NULL: a limit shared with
                               other uploads (ckpt process: every run's),
                               taken instead of bwlimit */
    void (*on_event)(void *ud, const struct ckpt_upload_event *ev);
    /* items and bytes done (sent, resumed or skipped) and bytes sent by
     * this run, so far: totals, any thread */
    void (*on_progress)(void *ud, uint64_t items, uint64_t bytes,
                        uint64_t sent);
    /* NULL, or asked right before each source deletion (from any worker
     * thread): non-zero (err set) refuses it, and the file stays. `ckpt
     * process` checks there that its lease on the run is still valid. */
    int (*may_delete)(void *ud, struct ckpt_err *err);
    /* NULL, or asked (on the thread that plans) for every file of a SRC
     * added with CKPT_UPLOAD_PICK, by its path below SRC's root as it
     * would be at DEST ("step1000/model.pt"). */
    enum ckpt_upload_pick (*pick)(void *ud, const char *rel);
    /* NULL, or asked (on the thread that deletes) right before each file
     * picked DROP is deleted, with its source key and path below SRC:
     * non-zero (err saying why) keeps it, a CKPT_UP_KEPT event. `ckpt
     * process` checks there that it is unchanged since it was judged.
     * Asked in a dry run too (which then predicts the KEPT event). */
    int (*may_drop)(void *ud, const char *skey, const char *rel,
                    struct ckpt_err *err);
    /* NULL, or the paths below the root (sorted, strcmp) of the files a
     * directory SRC added with CKPT_UPLOAD_PICK held when the caller
     * looked at it (`ckpt process` lists the run right before judging
     * it): one the plan does not find vanished since (another worker or
     * a user deleted it) and fails the plan, so that a run judged whole
     * is never copied in part and reported done. Borrowed. */
    char *const *expect;
    size_t nexpect;
    void *ud;
};

/* Which version of a local file: a file rewritten in place with its
 * modification time put back keeps size and mtime, but the kernel moves
 * ctime on every write, and a replaced file has another inode. */
struct ckpt_srcver {
    uint64_t size;
    int64_t mtime_ns, ctime_ns;
    uint64_t ino;
    int regular;
};
/* stat(2) (lstat(2) without follow) of path. */
int ckpt_srcver_get(const char *path, int follow, struct ckpt_srcver *v,
                    struct ckpt_err *err);
/* NULL when now is the version was, else what differs ("size",
 * "modification time", "ctime", "inode", "type"). */
const char *ckpt_srcver_diff(const struct ckpt_srcver *was,
                             const struct ckpt_srcver *now);

struct ckpt_upload_totals {
    uint64_t files;         /* files planned (archive members counted as
                               they are read) */
    uint64_t bytes_total;   /* their bytes */
    uint64_t uploaded, skipped, failed, deleted, aborted, warnings;
    uint64_t bytes;         /* bytes of the files uploaded */
    uint64_t bytes_sent;    /* data bytes sent (resumed parts excluded) */
    uint64_t bytes_resumed; /* bytes of parts an earlier run had sent */
    uint64_t throttled;     /* same-object throttles backed off */
    uint64_t left;          /* files picked CKPT_PICK_LEAVE (kept) */
    uint64_t dropped;       /* files picked CKPT_PICK_DROP */
    uint64_t kept_archives; /* archive SRCs not deleted: they hold files
                               left out */
    uint64_t kept;          /* files left at SRC by design (CKPT_UP_KEPT
                               events) */
    double seconds;
};

/* Flags of ckpt_upload_add. */
#define CKPT_UPLOAD_EXTRACT   1u  /* SRC is an archive: copy its members */
#define CKPT_UPLOAD_KEEP_SRC  2u  /* never delete this SRC (logs) */
#define CKPT_UPLOAD_PICK      4u  /* ask cfg.pick about each file */

struct ckpt_upload;

/* The engine; cfg is copied (state_dir must outlive the engine). */
struct ckpt_upload *ckpt_upload_new(const struct ckpt_upload_cfg *cfg);
void ckpt_upload_free(struct ckpt_upload *u);

/* Plan the copy of skey (a file, a directory, or with EXTRACT an archive)
 * in sst to dkey in dst: a file becomes the object dkey, a directory's
 * contents go below dkey/. Lists SRC and DEST now (a remote DEST with one
 * listing, not a request per file). Storages are borrowed and must outlive
 * the engine. Returns 0, or -1 when the copy cannot start at all (SRC
 * missing, DEST a file, listing refused); nothing is then added. */
int ckpt_upload_add(struct ckpt_upload *u, struct ckpt_storage *sst,
                    const char *skey, struct ckpt_storage *dst,
                    const char *dkey, unsigned flags, struct ckpt_err *err);

/* Report a SRC the caller could not even plan (a failed event, counted):
 * like any failure, it stops --delete-source. */
void ckpt_upload_fail_src(struct ckpt_upload *u, const char *src,
                          const char *dest, const char *msg);

/* Files and bytes planned so far (an archive counts as its size until
 * it is read). */
void ckpt_upload_planned(const struct ckpt_upload *u, uint64_t *files,
                         uint64_t *bytes);

/* Run every added copy; returns 0 when every file arrived (uploaded or
 * skipped) and every requested source deletion happened, else -1. */
int ckpt_upload_run(struct ckpt_upload *u, struct ckpt_upload_totals *out);

/* 1 when the log file named base (a base name) belongs to run: run (the
 * run's directory name or archive stem) or wid (its W&B run id, may be
 * NULL) occurs in it as a whole token ("2871001.out", "slurm-2871001.err",
 * not "28710012.out"). */
int ckpt_upload_is_log_of(const char *base, const char *run, const char *wid);

/* rclone-style --include/--exclude rules (filter.c; the rules are in
 * docs/commands/process.md). */
struct ckpt_filter;
struct ckpt_filter *ckpt_filter_new(void);
void ckpt_filter_free(struct ckpt_filter *f);
/* Append a rule; -1 (CKPT_EUSAGE) for a pattern it cannot take. */
int ckpt_filter_add(struct ckpt_filter *f, int include, const char *pat,
                    struct ckpt_err *err);
/* 1 when rel (a path below the root, '/'-separated) is taken; a NULL
 * filter takes everything. */
int ckpt_filter_match(const struct ckpt_filter *f, const char *rel);
size_t ckpt_filter_count(const struct ckpt_filter *f);
/* Append the rules of a filter file (rclone's --filter-from, the subset
 * here): one rule a line, "+ PATTERN" includes, "- PATTERN" excludes,
 * lines starting with '#' or ';' and blank lines are ignored; anything
 * else is refused (CKPT_EUSAGE, naming the line). name is the file's,
 * for messages. */
int ckpt_filter_add_rules(struct ckpt_filter *f, const char *text,
                          size_t len, const char *name,
                          struct ckpt_err *err);

/* W&B mapping files (`ckpt map-wandb --output`, read by --wandb-map) are
 * parsed by ckpt_wandb_map_parse (ckpt/wandb.h), the one reader. */

#endif
