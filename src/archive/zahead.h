/*
 * zahead.h - decode ahead (internal to src/archive).
 *
 * A background thread runs a decoder (zdec_read, and through it the reads
 * of the compressed input) into a small ring of blocks while the caller
 * parses the blocks already decoded: decoding and tar parsing overlap on
 * two cores. The caller takes the blocks in order; the two it took last
 * stay valid (a salvage restart reads back into the older one), the rest
 * of the ring is the thread's. No byte is copied: the decoder writes into
 * the block the caller reads.
 *
 * The decoder's state (failed, why, the read failure) is published with
 * each block as it stood after that block was decoded, so the caller sees
 * exactly what a zdec_read in its own thread would have told it then. The
 * decoder itself may be touched again (zdec_in_used) only after the end
 * of the stream was taken: the thread is done with it then.
 */
#ifndef CKPT_ARCHIVE_ZAHEAD_H
#define CKPT_ARCHIVE_ZAHEAD_H

#include <stddef.h>
#include <sys/types.h>

#include "zdec.h"

struct zahead;

/* Start decoding z (borrowed; it must outlive zahead_close) into slots
 * blocks of block bytes (slots >= 3). Runs in the caller's thread when no
 * thread can be started. */
struct zahead *zahead_open(struct zdec *z, size_t block, int slots);
/* The next decoded block: its length (> 0) with *out pointing at it, 0 at
 * the proper end of the stream, -1 on an error; the end and an error are
 * returned again by every later call. Taking a block releases the one
 * taken two calls before. */
ssize_t zahead_next(struct zahead *h, char **out);
/* The decoder's state as of the last block taken: its data is bad
 * (zahead_error says why), or reading the compressed input failed. */
int zahead_failed(const struct zahead *h);
int zahead_io_failed(const struct zahead *h);
const char *zahead_error(const struct zahead *h);
/* Stop the thread (it finishes the block it is decoding) and free the
 * ring. Safe at any point: a reader that stops early closes here. */
void zahead_close(struct zahead *h);

#endif
