/*
 * ckpt/clean.h - clean's rules (SPEC "ckpt clean"), used by `ckpt clean`
 * and by `ckpt process`'s judge phase.
 *
 * Judge first (nothing changes), act later: ckpt_clean_judge reads the
 * run and sets action and reason; ckpt_clean_act re-reads a run judged
 * bad right before deleting it (it must still be bad and must not have
 * grown) and deletes it, a local one renamed aside first (the hidden
 * ".RUN.ckpt-del-HOST-PID" sibling is the commit point a rerun finishes).
 * Nothing is printed.
 */
#ifndef CKPT_CLEAN_H
#define CKPT_CLEAN_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt/buf.h"
#include "ckpt/err.h"
#include "ckpt/run.h"
#include "ckpt/storage.h"

struct cJSON;

struct ckpt_clean_opts {
    int64_t min_age;        /* seconds; 0: no live-run guard */
    int force;              /* clean what does not look like a run */
    uint64_t max_archive;   /* larger archives are skipped unopened */
    int keep_last;          /* prune kept runs to the N newest... */
    int keep_every;         /* ...plus every K-th step */
    int dry_run;            /* act says "would-delete", changes nothing */
};

struct ckpt_clean_item {
    const char *arg;                 /* borrowed: RUN as given */
    char *key;                       /* owned: key in st */
    struct ckpt_storage *st;         /* borrowed */
    const struct ckpt_clean_opts *co;/* borrowed */
    /* results */
    const char *action;              /* static: "keep", "delete",
                                        "would-delete", "skip", "error";
                                        NULL before judging */
    struct ckpt_buf reason;
    struct ckpt_stat sb;
    struct ckpt_run run;
    int scanned;                     /* run is valid */
    int is_archive;
    int gone;                        /* deleted by someone else */
    uint64_t bytes;                  /* freed (or, -n, would be) */
    uint64_t fetched;                /* archive bytes read to judge it */
    struct ckpt_buf pruned;          /* "step100, step200" */
    struct cJSON *pruned_json;       /* owned */
    char *resume;                    /* owned: dead delete's temp sibling */
    char **resume_prune;             /* owned: dead prunes' temp dirs */
    size_t nresume_prune;
};

void ckpt_clean_item_init(struct ckpt_clean_item *it, struct ckpt_storage *st,
                          const char *key, const char *arg,
                          const struct ckpt_clean_opts *co);
void ckpt_clean_item_release(struct ckpt_clean_item *it);
/* A local RUN is cleaned of "." and ".." spellings (refusing ".." out of
 * a symlink) and refused up front if it is "/", $HOME or a mount point;
 * it->key is replaced by the cleaned path. 0 or -1. */
int ckpt_clean_precheck(struct ckpt_clean_item *it, struct ckpt_err *err);
/* A local RUN's path cleaned lexically: "." components and repeated or
 * trailing slashes go, ".." takes off the component before it (refused
 * when that is a symlink). Malloced ("." for none), or NULL with err. */
char *ckpt_clean_path(const char *key, struct ckpt_err *err);
/* Read and judge the run (thread-safe across items). */
void ckpt_clean_judge(struct ckpt_clean_item *it);
/* The live-run guard alone, for a run that is not judged again (process:
 * one its state says was uploaded or done, rerun because its source is
 * still there, as after a requeued job wrote to it): 1 when a file (an
 * archive: the archive) was written within --min-age, with action "skip"
 * and reason "live: ..."; 0 when not; -1 with err. */
int ckpt_clean_live(struct ckpt_clean_item *it, struct ckpt_err *err);
/* When the tree was last written: the newest mtime or ctime of its
 * files (directories do not count), or 0. */
int64_t ckpt_clean_newest(const struct ckpt_tree *t);
/* Act on the verdict: delete a bad run, finish interrupted deletes,
 * prune; on failure action becomes "error" with the reason. */
void ckpt_clean_act(struct ckpt_clean_item *it);

/* rclone's spelling: whole decimal digits with an optional unit s, m, h,
 * d or w (plain: seconds), nothing else. 0 or -1. */
int ckpt_parse_duration(const char *s, int64_t *out);

#endif
