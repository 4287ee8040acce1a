/*
 * zdec_bz2_fuzz - the parallel bzip2 decoder (block scanner, standalone
 * block streams, retries past false boundaries, stream CRCs) on any bytes.
 * Each block goes through the table-driven decoder (zdec_bz2blk.c) first
 * and through libbz2 when that one declines.
 * Properties: no crash or hang; whatever it accepts (a clean end), libbz2
 * reading the same bytes stream after stream up to zdec_in_used() accepts
 * too, with the same output; and what libbz2 accepts whole, so does it.
 */
#include <bzlib.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "archive/zdec.h"

struct mem {
    const uint8_t *p;
    size_t n, off;
};

static int rd(void *ud, void *dst, size_t cap, size_t *got)
{
    struct mem *m = ud;
    size_t k = m->n - m->off < 777 ? m->n - m->off : 777; /* odd pieces */
    if (k > cap)
        k = cap;
    memcpy(dst, m->p + m->off, k);
    *got = k;
    m->off += k;
    return 0;
}

/* libbz2 alone, stream after stream: 0 when every byte of data[0, n) is
 * whole streams, with the output in *out. */
static int reference(const uint8_t *data, size_t n, char **out, size_t *len)
{
    size_t cap = 1 << 16, off = 0;
    *out = malloc(cap);
    *len = 0;
    while (off < n) {
        bz_stream s;
        memset(&s, 0, sizeof(s));
        if (BZ2_bzDecompressInit(&s, 0, 0) != BZ_OK)
            return -1;
        s.next_in = (char *)(data + off);
        s.avail_in = (unsigned)(n - off);
        int rc;
        do {
            if (cap - *len < 65536) {
                cap *= 2;
                if (cap > (256u << 20)) {
                    BZ2_bzDecompressEnd(&s);
                    return -1;
                }
                *out = realloc(*out, cap);
            }
            s.next_out = *out + *len;
            s.avail_out = (unsigned)(cap - *len);
            unsigned before = s.avail_out;
            rc = BZ2_bzDecompress(&s);
            *len += before - s.avail_out;
        } while (rc == BZ_OK && (s.avail_in || !s.avail_out));
        off = n - s.avail_in;
        BZ2_bzDecompressEnd(&s);
        if (rc != BZ_STREAM_END)
            return -1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mem m = { data, size, 0 };
    struct zdec *z = zdec_open(CKPT_ARCHIVE_TAR_BZ2, 2, rd, &m);
    if (!z)
        return 0;
    size_t cap = 1 << 16, len = 0;
    char *out = malloc(cap);
    ssize_t n;
    do {
        if (cap - len < 65536) {
            cap *= 2;
            out = realloc(out, cap);
        }
        n = zdec_read(z, out + len, 65536);
        if (n > 0)
            len += (size_t)n;
    } while (n > 0 && len < (256u << 20));
    uint64_t used = zdec_in_used(z);
    zdec_close(z);
    char *ref = NULL;
    size_t rlen = 0;
    if (n == 0) {
        if (used > size || reference(data, (size_t)used, &ref, &rlen) != 0 ||
            rlen != len || memcmp(ref, out, len))
            __builtin_trap();
    } else if (n < 0 && reference(data, size, &ref, &rlen) == 0 && size) {
        /* libbz2 took every byte as whole streams: so must we. */
        __builtin_trap();
    }
    free(ref);
    free(out);
    return 0;
}
