/*
 * zdec.h - decompressors of run archives (internal to src/archive).
 *
 * One decoder per compression, each the fastest this machine has:
 *   gzip   ISA-L's igzip inflate (zlib when built without libisal), every
 *          member's CRC-32 and ISIZE checked, concatenated members read on;
 *   bzip2  blocks decoded in parallel by libbz2 (zdec_bz2.c);
 *   xz     liblzma's threaded decoder (multi-block files), memory-capped;
 *   zstd   libzstd's streaming decoder, frame after frame.
 * The compressed bytes are pulled through a read callback. The stream ends
 * where the last member/stream/frame ends: bytes after it that do not
 * start another one are left unread (zdec_in_used() tells how far it got),
 * so the caller can report them.
 */
#ifndef CKPT_ARCHIVE_ZDEC_H
#define CKPT_ARCHIVE_ZDEC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ckpt/archive.h"

/* Compressed input: read the next bytes into dst (at most cap, at least
 * one unless the file ended) and set *got (0 at the end of the file). 0,
 * or -1 when reading failed (the caller keeps the error). Read into the
 * buffer the decoder reads (zdec_in.c), the input is not copied again
 * (but for the few bytes a decoder keeps across reads). With
 * zdec_read_ahead it is called in a thread of its own. */
typedef int (*zdec_read_fn)(void *ud, void *dst, size_t cap, size_t *got);

struct zin_ra;

/* The compressed bytes read and not yet consumed. */
struct zdec_in {
    zdec_read_fn rd;
    void *ud;
    unsigned char *buf;         /* owned, or a chunk of ra */
    size_t cap, len, pos;       /* buf[pos..len) not consumed yet */
    uint64_t base;              /* file offset of buf[0] */
    int eof, io_failed;
    size_t ra_chunk;            /* read ahead asked for (zdec_in_ahead) */
    int ra_slots;
    struct zin_ra *ra;          /* the thread reading ahead, once started */
};

/* Read the input ahead in a thread of its own (started by the first
 * read), into slots chunks of chunk bytes: reading overlaps decoding. The
 * end of the file and a read failure reach the decoder exactly where they
 * would without. Set before the first read. */
void zdec_in_ahead(struct zdec_in *in, size_t chunk, int slots);

/* Read one more piece, dropping the bytes before buf[keep] (keep <= pos).
 * 1 when bytes were added, 0 at the end of the file, -1 on a read error. */
int zdec_in_more(struct zdec_in *in, size_t keep);
/* Make at least n bytes available at buf[pos]: 1, or 0 when the file ends
 * first, -1 on a read error. */
int zdec_in_need(struct zdec_in *in, size_t n);
void zdec_in_release(struct zdec_in *in);

struct zdec;

/* A decoder for kind (TAR_GZ, TAR_BZ2, TAR_XZ, TAR_ZST) using up to
 * threads threads. NULL for another kind. */
struct zdec *zdec_open(enum ckpt_archive_kind kind, int threads,
                       zdec_read_fn rd, void *ud);
/* zdec_in_ahead for z's input: call before the first zdec_read. */
void zdec_read_ahead(struct zdec *z, size_t chunk, int slots);
/* Decompress into buf: the number of bytes (> 0), 0 at the proper end of
 * the last stream, -1 on an error (zdec_error(); zdec_io_failed() when the
 * read callback failed). Bytes decoded before an error are returned first;
 * the error comes with the next call. */
ssize_t zdec_read(struct zdec *z, void *buf, size_t len);
const char *zdec_error(const struct zdec *z);
/* The data is bad (zdec_error() says why): not a read failure. */
int zdec_failed(const struct zdec *z);
int zdec_io_failed(const struct zdec *z);
/* Compressed bytes up to the end of the last complete stream. */
uint64_t zdec_in_used(const struct zdec *z);
void zdec_close(struct zdec *z);

/* bzip2 (zdec_bz2.c), the same contract. */
struct zdec_bz2;
struct zdec_bz2 *zdec_bz2_open(struct zdec_in *in, int threads);
ssize_t zdec_bz2_read(struct zdec_bz2 *b, void *buf, size_t len);
const char *zdec_bz2_error(const struct zdec_bz2 *b);
int zdec_bz2_failed(const struct zdec_bz2 *b);
uint64_t zdec_bz2_in_used(const struct zdec_bz2 *b);
void zdec_bz2_close(struct zdec_bz2 *b);
/* Tests: make the scanner report a false block boundary inside every
 * block before the real one, so that each block is retried merged.
 * Returns the number of retries since the last call. */
int zdec_bz2_test_fake_boundaries(int on);
/* Tests: decode every block with libbz2 (on), not zdec_bz2blk_decode.
 * Returns the number of blocks zdec_bz2blk_decode decoded since the last
 * call. */
int zdec_bz2_test_libbz2_only(int on);

/* One bzip2 block (zdec_bz2blk.c): the nbits bits at bit `from` of raw,
 * from its block magic to the next magic (raw readable 8 bytes past
 * them), of a stream of the given level. Its bytes go to *out (grown up
 * to cap; *olen, *ocap). 0 when it decoded exactly those bits and matched
 * its CRC; -1 otherwise, whatever the reason: libbz2 then decides. */
int zdec_bz2blk_decode(const unsigned char *raw, uint64_t from,
                       uint64_t nbits, int level, unsigned char **out,
                       size_t *olen, size_t *ocap, size_t cap);

#endif
