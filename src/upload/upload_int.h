/*
 * upload_int.h - the upload engine's internals. Private to src/upload: do
 * not expose.
 *
 * Threads: only the thread in ckpt_upload_run touches objects, groups,
 * queues and journals. Workers run one unit each (a read, a request) on
 * buffers the main thread allocated, and hand the unit back through the
 * done list; the main thread then moves the object's state on.
 */
#ifndef CKPT_UPLOAD_INT_H
#define CKPT_UPLOAD_INT_H

#include <pthread.h>
#include <stdint.h>

#include <openssl/evp.h>

#include "ckpt/archive.h"
#include "ckpt/pool.h"
#include "ckpt/ratelimit.h"
#include "ckpt/upload.h"
#include "../torchfmt/strmap.h"

#define MIB (1024ull * 1024)
#define DEFAULT_PART (8 * MIB)
#define MAX_PARTS 10000ull
#define MAX_PART (5ull << 30)
#define DEFAULT_BUDGET (96 * MIB)   /* peak RSS ~123 MiB (bench/RESULTS.md) */
#define CHECK_CHUNK (4 * MIB)
#define STREAM_CHUNK (1 * MIB)      /* hash buffer of a streamed PUT */
#define DEFAULT_THROTTLES 30
#define MAX_CACHE 64
/* Journals untouched this long, with nothing unfinished, are pruned. */
#define JOURNAL_MAX_AGE (30 * 86400.0)

/* ---- hashes (hash.c) ---- */

struct md5c {
    EVP_MD_CTX *c;
};

/* 0, or -1 with err when OpenSSL offers no MD5; before any md5c_init. */
int up_md5_check(struct ckpt_err *err);
void up_md5c_init(struct md5c *m);
void up_md5c_update(struct md5c *m, const void *p, size_t n);
void up_md5c_final(struct md5c *m, unsigned char out[16]);  /* frees */
void up_md5_buf(const void *p, size_t n, unsigned char out[16]);
int up_hex_md5_parse(const char *hex, unsigned char out[16]);
/* S3's multipart ETag: hex MD5 of the parts' binary MD5s, "-N". */
void up_composite_etag(const unsigned char (*md5)[16], int n, char out[48]);
/* Part size for an object of size: at least min (8 MiB by default), whole
 * MiB, and large enough that it fits in 10,000 parts. */
uint64_t up_part_size_for(uint64_t size, uint64_t min);
int up_parts_for(uint64_t size, uint64_t part);

/* One guess at a multipart ETag while the bytes are hashed in order:
 * md5(part MD5s)-N for parts of `part` bytes. init, feed..., final: etag
 * holds the result. */
struct up_cand {
    uint64_t part;
    struct md5c outer, cur;
    uint64_t in_part;
    int n;
    char etag[48];
};
void up_cand_init(struct up_cand *c, uint64_t part);
void up_cand_feed(struct up_cand *c, const char *p, size_t len);
void up_cand_final(struct up_cand *c);
/* Part sizes that could have made a "-n" ETag of an object of size
 * bytes: ours, the one ckpt recorded (meta_part, 0: none), aws-cli's
 * 8 MiB and rclone's 5 MiB defaults (only guesses of the boundaries: the
 * ETag decides). Into out, how many. */
int up_cand_guesses(uint64_t size, uint64_t ours, int n, uint64_t meta_part,
                    uint64_t out[4]);

/* ---- local source versions (srcver.c) ---- */

struct srcver {
    uint64_t size;
    int64_t mtime_ns, ctime_ns;
    uint64_t ino;
    int regular;
};

/* stat(2) of path (following a symlink, as reading it does). */
int up_srcver_get(const char *path, struct srcver *v, struct ckpt_err *err);
/* NULL when now is the version was, else what differs ("ctime", ...). */
const char *up_srcver_diff(const struct srcver *was, const struct srcver *now);
/* The journal's signature of that version. */
void up_srcver_sig(const struct srcver *v, char *out, size_t n);

/* ---- journal (journal.c) ---- */

struct jr_pending {
    char *dkey;                 /* owned: destination key */
    char *upload_id;            /* owned */
    uint64_t size, part_size;
    char *srcsig;               /* owned */
    int nparts;
    unsigned char (*md5)[16];   /* owned, per part */
    uint8_t *have;              /* owned, per part: acknowledged */
    int ended;
    int claimed;                /* taken over by an object of this run */
};

struct jr_done {
    char *dkey, *srcsig, *etag; /* owned */
    uint64_t size;
    uint64_t seq;               /* record order: the later one wins */
};

struct journal;

/* Open (creating dir) and lock the journal named by id; NULL dir: none.
 * Fails with CKPT_EEXIST when another process holds the lock. */
int up_journal_open(struct journal **out, const char *dir, const char *id,
                 struct ckpt_err *err);
/* Rewrite it compactly (verified objects, unfinished uploads), unlock,
 * free. NULL-safe. */
void up_journal_close(struct journal *j);
/* Remove it on close instead (its source is deleted: it can never vouch
 * again), unless it records an unfinished upload. NULL-safe. */
void up_journal_discard(struct journal *j);
/* Remove the journals in dir untouched for max_age seconds that record
 * no unfinished upload and that no process holds. Returns how many. */
size_t up_journal_prune(const char *dir, double max_age);
void up_journal_start(struct journal *j, const char *dkey, const char *id,
                   uint64_t size, uint64_t part_size, const char *srcsig);
void up_journal_part(struct journal *j, const char *id, int num,
                  const unsigned char md5[16]);
void up_journal_end(struct journal *j, const char *id);
void up_journal_done(struct journal *j, const char *dkey, uint64_t size,
                  const char *srcsig, const char *etag);
/* The unfinished upload recorded for dkey, or NULL. */
struct jr_pending *up_journal_pending(struct journal *j, const char *dkey);
/* Unfinished uploads no object of this run has claimed. */
struct jr_pending **up_journal_unclaimed(struct journal *j, size_t *n);
const struct jr_done *up_journal_find_done(const struct journal *j,
                                        const char *dkey);
int up_journal_failed(const struct journal *j);  /* writes failed */
const char *up_journal_file(const struct journal *j);  /* for tests */
/* Upload ids the journal knows (started by some run of this copy). */
int up_journal_knows_upload(const struct journal *j, const char *id);

/* ---- what is at DEST (plan.c) ---- */

struct dentry {
    char *name;                 /* owned: relative to the DEST root */
    uint64_t size;
    int64_t mtime;
    char *etag;                 /* owned, "" for local */
};

struct dmap {
    struct dentry *v;           /* owned, sorted by name */
    size_t n, cap;
};

const struct dentry *up_dmap_find(const struct dmap *m, const char *name);
struct group;
int up_dmap_load(struct group *g, struct dmap *m, struct ckpt_err *err);
void up_dmap_release(struct dmap *m);

/* ---- objects and groups ---- */

struct group;
/* 1 when the file rel of g is to be copied; else it was recorded as
 * left or dropped (plan.c). */
int up_pick(struct group *g, const char *skey, const char *rel,
            uint64_t size);

enum group_kind { G_FILE, G_TREE, G_ARCHIVE };

struct extract;

struct group {
    struct ckpt_upload *u;
    struct ckpt_storage *sst, *dst;  /* borrowed */
    char *skey, *dkey;               /* owned: roots as given */
    char *sdisp;                     /* owned: SRC as displayed */
    enum group_kind kind;
    unsigned flags;
    struct ckpt_stat ssb;            /* SRC when planned */
    struct srcver ver;               /* a local archive when planned */
    int has_ver;
    struct dmap dmap;                /* DEST listing (tree, archive) */
    struct journal *jr;              /* owned, or NULL */
    size_t nobjs, nfailed;
    int plan_failed;                 /* part of SRC could not be listed */
    size_t ndel_failed;              /* source files not deleted */
    char **links;                    /* owned: OLMo `latest` links, not
                                        copied, deleted with the run */
    size_t nlinks;
    char **drops;                    /* owned: files picked DROP (a
                                        tree), deleted with the source */
    uint64_t *drop_sizes;            /* owned */
    char **drop_rels;                /* owned: their paths below SRC */
    size_t ndrops;
    size_t nkept;                    /* files kept by design (KEPT) */
    size_t nleft;                    /* files picked LEAVE: kept */
    size_t nuncopied;                /* archive: symlink or special
                                        members, not copied: kept */
    struct strmap seen;              /* cfg.expect: paths the plan found
                                        (keys in seen_keys) */
    char **seen_keys;                /* owned */
    size_t nseen;
    struct extract *x;               /* owned while streaming */
    int extracted;                   /* archive fully read */
};

enum obj_state {
    O_NEW, O_CHECKING, O_READY, O_PUTTING, O_STARTING, O_PARTS,
    O_FINISHING, O_DONE, O_SKIPPED, O_FAILED
};

struct unit;

struct obj {
    struct group *g;
    char *skey;                 /* owned: source key (or archive member) */
    char *dkey;                 /* owned: destination key */
    char *sdisp, *ddisp;        /* owned: as shown in events */
    uint64_t size;
    int64_t mtime;
    char srcsig[96];            /* identifies the source bytes' version */
    struct srcver ver;          /* local source: the version planned */
    int has_ver;
    const struct dentry *dest;  /* borrowed from g->dmap, or NULL */
    struct dentry dfile;        /* DEST of a file group (dest points at) */
    enum obj_state st;
    int big;                    /* multipart */
    int stream;                 /* one PUT streamed from the local file
                                   (write policy), not buffered whole */
    int from_archive;
    int superseded;             /* a later archive member of the same name
                                   wins (tar -r): not counted or verified */
    int conflict_held;          /* an archive member's conflict, held
                                   (uncounted) until the archive's end
                                   says whether a later copy supersedes
                                   it; err holds it */
    int outside;                /* reached through a followed symlink from
                                   outside SRC's real path: copied, never
                                   deleted */
    uint64_t part_size;
    int nparts;
    char *upload_id;            /* owned */
    unsigned char (*pmd5)[16];  /* owned: MD5 of each part */
    unsigned char (*known)[16]; /* owned: acknowledged before (resume) */
    uint8_t *known_have;        /* owned */
    uint8_t *pstate;            /* owned: 0 to send, 1 in flight, 2 done */
    int next_part, ndone, inflight, cap;
    int *retry;                 /* owned: parts to send again */
    int nretry;
    double not_before;          /* backing off until */
    int throttles;              /* in a row */
    int failing, restart, restarted, resumed;
    int need_check;             /* compare with DEST before sending */
    /* Another SRC of this upload goes to the same DEST path and was
     * planned first: this object waits until that one is finished, then
     * is compared with what DEST holds, and never replaces it (a
     * conflict when the bytes differ): two sources, one DEST path. */
    struct obj *after;          /* borrowed, or NULL */
    int deferred;               /* still waiting for `after` */
    const struct obj *cmp_src;  /* -n: `after` would be uploaded, not
                                   there yet: compared with its source */
    struct ckpt_err err;
    uint64_t sent, resumed_bytes;
    struct unit *ready, *ready_tail;  /* archive: produced parts */
    struct unit *put;           /* archive: the produced PUT */
    const char *why_skip;       /* static */
    char etag[80];              /* DEST's ETag once uploaded */
    struct obj *qnext;          /* queue link */
};

enum unit_kind { U_CHECK, U_PUT, U_START, U_PART, U_FINISH, U_ABORT,
                 U_DELETE };

struct unit {
    enum unit_kind kind;
    struct ckpt_upload *u;
    struct obj *o;              /* borrowed, or NULL (abort of a stale
                                   upload) */
    int part;                   /* 1-based */
    uint64_t off;
    size_t len;
    char *buf;                  /* owned by the main thread */
    size_t cap;
    int have_data;              /* buf holds the bytes already (archive);
                                   streamed PUT: md5 holds their MD5 */
    int dry;                    /* CHECK only decides */
    int quiet;                  /* ABORT of our own failed upload */
    int throttles;              /* same-object throttles of this unit */
    struct ckpt_storage *st;    /* ABORT: borrowed */
    char *key, *upload_id;      /* ABORT: owned */
    struct group *ag;           /* ABORT: journal owner */
    struct ckpt_spooled *spooled;   /* PUT: owned; the member's spooled
                                       file goes to DEST as it is */
    /* results, written by the worker */
    int rc;
    struct ckpt_err err;
    struct ckpt_put_result res;
    unsigned char md5[16];
    int same;                   /* CHECK, PUT precheck: DEST equal */
    int resumed;                /* PART: acknowledged before, not sent */
    char whole[33];             /* CHECK: whole-object MD5 */
    struct unit *next;
};

struct oq {
    struct obj *head, *tail;
};

struct ckpt_upload {
    struct ckpt_upload_cfg cfg;
    struct group **groups;      /* owned */
    size_t ngroups;
    struct obj **objs;          /* owned */
    size_t nobjs, capobjs;
    struct ckpt_pool *pool;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct ckpt_rate *bw;       /* cfg.rate, cfg.bwlimit's, or NULL */
    int bw_owned;               /* bw is cfg.bwlimit's: freed here */
    struct unit *done_head, *done_tail;  /* guarded by mu */
    int inflight;               /* units submitted, not handled */
    uint64_t budget, mem_used;  /* mem_used includes cache */
    struct {
        char *p;
        size_t cap;
    } cache[MAX_CACHE];         /* owned: idle large buffers */
    size_t ncache;
    struct oq small, big;       /* objects waiting for a CHECK/PUT/START */
    struct obj **active;        /* big objects being uploaded */
    size_t nactive, capactive;
    struct obj **delayed;       /* small objects backing off */
    size_t ndelayed, capdelayed;
    struct unit *ctl, *ctl_tail;  /* START/FINISH/ABORT/DELETE to run */
    int turn;
    size_t next_archive;        /* groups index of the next archive */
    struct ckpt_upload_totals t;
    struct strmap dpaths;       /* DEST path (ddisp, borrowed) -> index
                                   in objs of the first object there */
    uint64_t items_done, bytes_done;
    double start;
};

/* plan.c */
struct obj *up_obj_new(struct group *g, const char *skey, const char *rel,
                    uint64_t size, int64_t mtime, const char *sig);
void up_obj_free(struct obj *o);
void up_group_free(struct group *g);

/* units.c: run in a worker */
void up_unit_run(struct unit *un);

/* engine.c */
struct unit *up_unit_new(struct ckpt_upload *u, enum unit_kind k,
                      struct obj *o);
void up_unit_free(struct ckpt_upload *u, struct unit *un);
/* Allocate a data buffer under the budget; NULL when it does not fit
 * (force: fit anyway, when nothing is in flight). */
char *up_buf_take(struct ckpt_upload *u, size_t n, int force);
void up_ctl_push(struct ckpt_upload *u, struct unit *un);
void up_oq_push(struct oq *q, struct obj *o);
void up_active_add(struct ckpt_upload *u, struct obj *o);
void up_emit(struct ckpt_upload *u, enum ckpt_upload_action a,
          const struct obj *o, const char *src, const char *detail);
void up_progress(struct ckpt_upload *u, uint64_t items, uint64_t bytes);

void up_engine_start(struct ckpt_upload *u);
void up_engine_loop(struct ckpt_upload *u);
void up_engine_stop(struct ckpt_upload *u);
void up_delayed_add(struct ckpt_upload *u, struct obj *o);

/* handle.c: the main thread's side of a finished unit */
void up_handle_unit(struct ckpt_upload *u, struct unit *un);
/* Decide what an object needs (skip, check, upload) and queue it. */
void up_obj_route(struct ckpt_upload *u, struct obj *o);
/* An archive member whose bytes have MD5 hex: 1 when DEST holds the
 * same (its size, and its ETag, or a local copy read back and hashed). */
int up_member_same(struct obj *o, const char *hex);
/* Never replace what DEST holds at o's path: cfg.no_replace, or another
 * SRC of this upload went there first. */
int up_no_replace(const struct obj *o);
/* Claim o's DEST path for it (u->objs[idx], in plan order); 1 when
 * another SRC's object holds it (o->after is then that one), else 0. */
int up_claim_path(struct ckpt_upload *u, struct obj *o, size_t idx);
/* Route the objects waiting for another SRC's object of the same DEST
 * path that is finished; returns how many. */
size_t up_route_deferred(struct ckpt_upload *u);
/* o is at DEST already (why says how it was proven): skipped. */
void up_obj_skip(struct ckpt_upload *u, struct obj *o, const char *why);
/* Fail o as a no_replace conflict; how says what DEST holds. */
void up_obj_conflict(struct ckpt_upload *u, struct obj *o, const char *how);
void up_obj_fail(struct ckpt_upload *u, struct obj *o,
              const struct ckpt_err *err);
/* Stop o: no more parts; abort its upload once nothing is in flight. */
void up_obj_abandon(struct ckpt_upload *u, struct obj *o,
                 const struct ckpt_err *err);
/* Queue the abort of an unfinished upload. */
void up_queue_abort(struct ckpt_upload *u, struct group *g,
                 struct ckpt_storage *st, const char *key, const char *id);
void obj_restart_parts(struct obj *o);

/* Read on while the budget allows; returns 1 if it produced something,
 * 0 if it is waiting for buffers, -1 when the archive is finished. */
int up_extract_step(struct ckpt_upload *u, struct group *g);
/* A later member of o's name was read: o no longer counts. */
void up_obj_supersede(struct ckpt_upload *u, struct obj *o);
/* A conflict of archive member o: 1 when it is moot (superseded by a
 * later copy of its name) or to be held until the end of the archive's
 * first pass, which reports it unless a later copy came; 0: report it
 * now (extract.c). */
int up_extract_holds(const struct obj *o);
void up_extract_close(struct group *g);

#endif
