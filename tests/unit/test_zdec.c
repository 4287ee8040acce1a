/*
 * test_zdec - the archive decoders (src/archive/zdec*.c) against the real
 * tools: every byte equal to the input, multi-member/multi-stream files
 * read on, truncated and corrupt files an error, trailing bytes left.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>

#include "archive/zdec.h"
#include "ckpt/buf.h"
#include "ckpt/util.h"
#include "test.h"

/* fail_at: the read reaching that offset fails (after the bytes before
 * it were read). Counts the reads, and those made outside the thread that
 * opened the decoder. */
struct src {
    int fd;
    off_t pos, fail_at;
    pthread_t opener;
    int reads, elsewhere;       /* (atomic) */
};

/* 64 KiB at most a read: the decoders must cope with short reads. */
static int rd(void *ud, void *dst, size_t cap, size_t *got)
{
    struct src *s = ud;
    __atomic_fetch_add(&s->reads, 1, __ATOMIC_RELAXED);
    if (!pthread_equal(pthread_self(), s->opener))
        __atomic_fetch_add(&s->elsewhere, 1, __ATOMIC_RELAXED);
    size_t want = cap < 65536 ? cap : 65536;
    if (s->fail_at && s->pos >= s->fail_at)
        return -1;
    if (s->fail_at && (off_t)want > s->fail_at - s->pos)
        want = (size_t)(s->fail_at - s->pos);
    ssize_t n = read(s->fd, dst, want);
    *got = n > 0 ? (size_t)n : 0;
    s->pos += n > 0 ? n : 0;
    return n < 0 ? -1 : 0;
}

/* Read ahead (zdec_read_ahead) in decode() when chunk > 0; the reads a
 * decode made and those outside its thread; the failing offset. */
static struct {
    size_t chunk;
    int slots;
    int reads, elsewhere;
    off_t fail_at;
} opt;

struct result {
    int rc;                     /* 0 clean end, -1 error */
    char *data;
    size_t len;
    uint64_t used;
    int io_failed;
    char err[256];
};

static struct result decode(const char *path, enum ckpt_archive_kind kind,
                            int threads)
{
    struct result r = { 0 };
    struct src s = { 0 };
    s.fd = open(path, O_RDONLY);
    s.opener = pthread_self();
    s.fail_at = opt.fail_at;
    CHECK(s.fd >= 0);
    struct zdec *z = zdec_open(kind, threads, rd, &s);
    CHECK(z != NULL);
    if (opt.chunk)
        zdec_read_ahead(z, opt.chunk, opt.slots);
    size_t cap = 1 << 20;
    r.data = ckpt_xmalloc(cap);
    for (;;) {
        if (cap - r.len < 100000) {
            cap *= 2;
            r.data = ckpt_xrealloc(r.data, cap);
        }
        /* Odd sizes: the reader must cope with any. */
        ssize_t n = zdec_read(z, r.data + r.len, 99991);
        if (n <= 0) {
            r.rc = n < 0 ? -1 : 0;
            break;
        }
        r.len += (size_t)n;
    }
    if (r.rc < 0)
        snprintf(r.err, sizeof(r.err), "%s", zdec_error(z));
    r.used = zdec_in_used(z);
    r.io_failed = zdec_io_failed(z);
    zdec_close(z);
    opt.reads = s.reads;
    opt.elsewhere = s.elsewhere;
    close(s.fd);
    return r;
}

static char *tmp(const char *name)
{
    static char p[4][600];
    static int i;
    i = (i + 1) % 4;
    snprintf(p[i], sizeof(p[i]), "%s/%s", test_tmpdir(), name);
    return p[i];
}

static int sh(const char *fmt, ...) CKPT_PRINTF(1, 2);
static int sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    return system(cmd);
}

static int have_tool(const char *t)
{
    return sh("command -v %s >/dev/null 2>&1", t) == 0;
}

/* Mixed data: random stretches, text, a long zero run (a bzip2 block that
 * decodes to far more than its input), 3.5 MB in all. Made once. */
static const char *plain(void)
{
    static int made;
    const char *p = tmp("plain");
    if (!made) {
        CHECK(sh("cd %s && python3 -c \"import random,sys\n"
                 "r=random.Random(7);o=sys.stdout.buffer\n"
                 "for i in range(40):\n"
                 "  o.write(bytes(r.getrandbits(8) for _ in range(20000)))\n"
                 "  o.write(b'step %%d loss %%f\\\\n' %% (i, r.random())"
                 " * 3000)\n"
                 "o.write(bytes(6000000))\n"
                 "o.write(b'tail')\n\" > plain", test_tmpdir()) == 0);
        made = 1;
    }
    return p;
}

static struct ckpt_buf slurp(const char *path)
{
    struct ckpt_buf b = CKPT_BUF_INIT;
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    char tmpb[65536];
    size_t n;
    while ((n = fread(tmpb, 1, sizeof(tmpb), f)) > 0)
        ckpt_buf_add(&b, tmpb, n);
    fclose(f);
    return b;
}

static uint64_t fsize(const char *path)
{
    struct stat sb;
    CHECK(stat(path, &sb) == 0);
    return (uint64_t)sb.st_size;
}

/* Compress plain() with cmd (reads stdin, writes stdout) into name and
 * check that every thread count decodes it to the same bytes. */
static void roundtrip(const char *name, const char *cmd,
                      enum ckpt_archive_kind kind)
{
    const char *out = tmp(name);
    CHECK(sh("cd %s && (%s) < %s > %s", test_tmpdir(), cmd, plain(),
             out) == 0);
    struct ckpt_buf want = slurp(plain());
    for (int t = 1; t <= 4; t *= 2) {
        struct result r = decode(out, kind, t);
        if (r.rc != 0)
            fprintf(stderr, "  %s (%d threads): %s\n", name, t, r.err);
        CHECK_EQ(r.rc, 0);
        CHECK_EQ(r.len, want.len);
        CHECK(r.len == want.len && !memcmp(r.data, want.ptr, r.len));
        CHECK_EQ(r.used, fsize(out));
        free(r.data);
    }
    ckpt_buf_release(&want);
}

/* bzip2 -1 / -9 of plain(): blocks, and those holding the zero run. */
#define BZ1_BLOCKS 36
#define BZ1_CAPPED 1
#define BZ9_BLOCKS 4

static void test_zdec__bzip2(void)
{
    roundtrip("p1.bz2", "bzip2 -1", CKPT_ARCHIVE_TAR_BZ2);
    roundtrip("p9.bz2", "bzip2 -9", CKPT_ARCHIVE_TAR_BZ2);
    /* Two streams in a row, as bzip2 reads them. */
    CHECK(sh("cd %s && head -c 1000000 plain | bzip2 -2 > cat.bz2 && "
             "tail -c +1000001 plain | bzip2 -3 >> cat.bz2",
             test_tmpdir()) == 0);
    roundtrip("catx.bz2", "cat cat.bz2", CKPT_ARCHIVE_TAR_BZ2);
    /* An empty stream. */
    CHECK(sh("cd %s && printf '' | bzip2 > empty.bz2", test_tmpdir()) == 0);
    struct result r = decode(tmp("empty.bz2"), CKPT_ARCHIVE_TAR_BZ2, 2);
    CHECK_EQ(r.rc, 0);
    CHECK_EQ(r.len, 0);
    CHECK_EQ(r.used, 14);
    free(r.data);
}

/* lbzip2, pbzip2 and pigz come with scripts/install-deps.sh --test:
 * one missing is a failure, not a case left out. */
static void test_zdec__bzip2_parallel_tools(void)
{
    CHECK(have_tool("lbzip2"));
    roundtrip("l.bz2", "lbzip2 -n 3 -1", CKPT_ARCHIVE_TAR_BZ2);
    CHECK(have_tool("pbzip2"));
    roundtrip("pb.bz2", "pbzip2 -p3 -b1 -1 -c", CKPT_ARCHIVE_TAR_BZ2);
}

/* A false block boundary inside every block: each block fails, is merged
 * with the next candidate and decoded again, and the output is exact. */
static void test_zdec__bzip2_false_boundaries(void)
{
    zdec_bz2_test_fake_boundaries(1);
    roundtrip("fake.bz2", "bzip2 -1", CKPT_ARCHIVE_TAR_BZ2);
    /* 3 thread counts x the blocks of a 3.5 MB file at 100k blocks */
    int n = zdec_bz2_test_fake_boundaries(0);
    fprintf(stderr, "  %d retries\n", n);
    CHECK(n >= 3 * 20);
}

/* The table-driven block decoder (zdec_bz2blk.c) does the blocks it can
 * and libbz2 the rest (here the blocks of plain()'s zero run, which decode
 * to more than the 4 MiB cap); libbz2 alone gives the same bytes. */
static void test_zdec__bzip2_fast_and_libbz2(void)
{
    zdec_bz2_test_libbz2_only(0);
    roundtrip("f1.bz2", "bzip2 -1", CKPT_ARCHIVE_TAR_BZ2);
    int fast1 = zdec_bz2_test_libbz2_only(0);
    roundtrip("f9.bz2", "bzip2 -9", CKPT_ARCHIVE_TAR_BZ2);
    int fast9 = zdec_bz2_test_libbz2_only(1);
    roundtrip("s1.bz2", "bzip2 -1", CKPT_ARCHIVE_TAR_BZ2);
    roundtrip("s9.bz2", "bzip2 -9", CKPT_ARCHIVE_TAR_BZ2);
    int slow = zdec_bz2_test_libbz2_only(0);
    fprintf(stderr, "  fast blocks: %d at -1, %d at -9\n", fast1, fast9);
    /* 3 thread counts each; BZ1_BLOCKS blocks at -1, BZ1_CAPPED of them
     * past the cap; at -9 all but the one block holding the zero run. */
    CHECK_EQ(fast1, 3 * (BZ1_BLOCKS - BZ1_CAPPED));
    CHECK_EQ(fast9, 3 * (BZ9_BLOCKS - 1));
    CHECK_EQ(slow, 0);
}

static void test_zdec__bzip2_damage(void)
{
    const char *d = test_tmpdir();
    CHECK(sh("cd %s && bzip2 -1 < plain > good.bz2 && "
             "head -c $(( $(stat -c %%s good.bz2) / 2 )) good.bz2 > cut.bz2 &&"
             " cp good.bz2 tail.bz2 && printf 'trailing garbage' >> tail.bz2"
             " && cp good.bz2 bad.bz2 && printf '\\377' | dd of=bad.bz2 "
             "bs=1 seek=200000 conv=notrunc status=none", d) == 0);
    struct result r = decode(tmp("cut.bz2"), CKPT_ARCHIVE_TAR_BZ2, 2);
    CHECK_EQ(r.rc, -1);
    CHECK_STR(r.err, "truncated bzip2 input");
    CHECK(r.len < 3000000); /* the blocks before the cut, then the error */
    free(r.data);
    r = decode(tmp("tail.bz2"), CKPT_ARCHIVE_TAR_BZ2, 2);
    CHECK_EQ(r.rc, 0);
    CHECK_EQ(r.used, fsize(tmp("good.bz2")));
    free(r.data);
    for (int t = 1; t <= 2; t++) {
        r = decode(tmp("bad.bz2"), CKPT_ARCHIVE_TAR_BZ2, t);
        CHECK_EQ(r.rc, -1);
        CHECK(ckpt_str_startswith(r.err, "bzip2 data is corrupt (CRC "
                                  "mismatch or corrupt data, block at byte "));
        free(r.data);
    }
    /* Not bzip2 at all. */
    r = decode(plain(), CKPT_ARCHIVE_TAR_BZ2, 2);
    CHECK_EQ(r.rc, -1);
    CHECK_STR(r.err, "not a bzip2 stream");
    free(r.data);
}

static void test_zdec__gzip(void)
{
    roundtrip("p.gz", "gzip -1", CKPT_ARCHIVE_TAR_GZ);
    CHECK(have_tool("pigz"));
    roundtrip("pigz.gz", "pigz -p 3", CKPT_ARCHIVE_TAR_GZ);
    CHECK(sh("cd %s && head -c 1000000 plain | gzip > cat.gz && "
             "tail -c +1000001 plain | gzip -9 >> cat.gz", test_tmpdir()) ==
          0);
    roundtrip("cat2.gz", "cat cat.gz", CKPT_ARCHIVE_TAR_GZ);
    const char *d = test_tmpdir();
    /* CRC-32, then ISIZE, of the last member broken; cut; trailing. */
    CHECK(sh("cd %s && gzip < plain > g.gz && n=$(stat -c %%s g.gz) && "
             "cp g.gz crc.gz && printf '\\377' | dd of=crc.gz bs=1 "
             "seek=$((n-8)) conv=notrunc status=none && cp g.gz len.gz && "
             "printf '\\377' | dd of=len.gz bs=1 seek=$((n-3)) conv=notrunc "
             "status=none && head -c $((n/2)) g.gz > cut.gz && cp g.gz "
             "tail.gz && printf 'garbage' >> tail.gz", d) == 0);
    const char *bad[] = { "crc.gz", "len.gz" };
    for (int i = 0; i < 2; i++) {
        struct result r = decode(tmp(bad[i]), CKPT_ARCHIVE_TAR_GZ, 1);
        CHECK_EQ(r.rc, -1);
        CHECK_STR(r.err, "gzip checksum mismatch (CRC-32 or length in the "
                  "trailer does not match the data)");
        free(r.data);
    }
    struct result r = decode(tmp("cut.gz"), CKPT_ARCHIVE_TAR_GZ, 1);
    CHECK_EQ(r.rc, -1);
    CHECK_STR(r.err, "truncated gzip input");
    free(r.data);
    r = decode(tmp("tail.gz"), CKPT_ARCHIVE_TAR_GZ, 1);
    CHECK_EQ(r.rc, 0);
    CHECK_EQ(r.used, fsize(tmp("g.gz")));
    free(r.data);
}

static void test_zdec__xz(void)
{
    /* Multi-block, as xz -T0 writes them. */
    roundtrip("p.xz", "xz -T2 -1 --block-size=300000", CKPT_ARCHIVE_TAR_XZ);
    CHECK(sh("cd %s && head -c 1000000 plain | xz -1 > cat.xz && "
             "tail -c +1000001 plain | xz -T2 -1 --block-size=500000 >> "
             "cat.xz", test_tmpdir()) == 0);
    roundtrip("cat2.xz", "cat cat.xz", CKPT_ARCHIVE_TAR_XZ);
    CHECK(sh("cd %s && head -c $(( $(stat -c %%s p.xz) / 2 )) p.xz > "
             "cut.xz", test_tmpdir()) == 0);
    struct result r = decode(tmp("cut.xz"), CKPT_ARCHIVE_TAR_XZ, 2);
    CHECK_EQ(r.rc, -1);
    CHECK_STR(r.err, "truncated xz input");
    free(r.data);
}

static void test_zdec__zstd(void)
{
    roundtrip("p.zst", "zstd -q -T2 -1", CKPT_ARCHIVE_TAR_ZST);
    CHECK(sh("cd %s && head -c 1000000 plain | zstd -q > cat.zst && "
             "tail -c +1000001 plain | zstd -q -3 >> cat.zst",
             test_tmpdir()) == 0);
    roundtrip("cat2.zst", "cat cat.zst", CKPT_ARCHIVE_TAR_ZST);
    CHECK(sh("cd %s && head -c $(( $(stat -c %%s p.zst) / 2 )) p.zst > "
             "cut.zst && cp p.zst tail.zst && printf 'garbage!' >> "
             "tail.zst", test_tmpdir()) == 0);
    struct result r = decode(tmp("cut.zst"), CKPT_ARCHIVE_TAR_ZST, 1);
    CHECK_EQ(r.rc, -1);
    CHECK_STR(r.err, "truncated zstd input");
    free(r.data);
    r = decode(tmp("tail.zst"), CKPT_ARCHIVE_TAR_ZST, 1);
    CHECK_EQ(r.rc, 0);
    CHECK_EQ(r.used, fsize(tmp("p.zst")));
    free(r.data);
}

/* Decode path without and with read ahead in chunks of each size: the
 * same bytes, end, error and offset used, every read in the thread.
 * Reads of 64 KiB (rd's most) fall where they fell without the thread,
 * and the bytes decoded before an error are then the same too; other
 * boundaries may let a decoder give a little more or less before it (and
 * liblzma's threads give what they have decoded by then): a prefix of
 * the same bytes. */
static void same_ahead(const char *name, enum ckpt_archive_kind kind)
{
    static const size_t chunks[] = { 3, 7, 4093, 65536, 1u << 20 };
    const char *path = tmp(name);
    opt.chunk = 0;
    struct result want = decode(path, kind, 2);
    CHECK_EQ(opt.elsewhere, 0);
    for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
        if (chunks[c] < 4093 && fsize(path) > 30000)
            continue; /* (a hand-over per 3 bytes: slow, nothing new) */
        opt.chunk = chunks[c];
        opt.slots = c % 2 ? 2 : 4;
        struct result r = decode(path, kind, 2);
        int exact = want.rc == 0 ||
                    (chunks[c] >= 65536 && kind != CKPT_ARCHIVE_TAR_XZ);
        if (r.rc != want.rc || strcmp(r.err, want.err) ||
            (exact && r.len != want.len))
            fprintf(stderr, "  %s, chunk %zu, fail at %lld: %d '%s' %zu, "
                    "not %d '%s' %zu\n", name, chunks[c],
                    (long long)opt.fail_at, r.rc, r.err, r.len, want.rc,
                    want.err, want.len);
        CHECK_EQ(r.rc, want.rc);
        CHECK_STR(r.err, want.err);
        CHECK_EQ(r.io_failed, want.io_failed);
        CHECK_EQ(r.used, want.used);
        size_t n = r.len < want.len ? r.len : want.len;
        if (exact)
            CHECK_EQ(r.len, want.len);
        CHECK(!memcmp(r.data, want.data, n));
        CHECK(opt.reads > 0);
        CHECK_EQ(opt.elsewhere, opt.reads);
        free(r.data);
    }
    opt.chunk = 0;
    free(want.data);
}

/* Read ahead (zdec_in.c): the input read in a thread of its own gives
 * every decoder exactly what reading it in the decoder's thread gave:
 * whole files, members and frames split anywhere across chunks (a zstd
 * frame's magic, bzip2's look-back), the cut, the corrupt, the trailing
 * bytes, and a read failure at the same offset. */
static void test_zdec__read_ahead(void)
{
    plain();
    CHECK(sh("cd %s && zstd -q -T2 -1 < plain > ra.zst && "
             "gzip -1 < plain > ra.gz && bzip2 -1 < plain > ra.bz2 && "
             "xz -T2 -1 --block-size=300000 < plain > ra.xz && "
             "for i in $(seq 24); do head -c $((i * 37)) plain | zstd -q "
             ">> tiny.zst; head -c $((i * 41)) plain | gzip >> tiny.gz; "
             "done && head -c 5000 plain | bzip2 > tiny.bz2 && "
             "head -c 7000 plain | bzip2 -2 >> tiny.bz2 && "
             "for f in tiny.zst tiny.gz tiny.bz2; do "
             "head -c $(( $(stat -c %%s $f) - 5 )) $f > cut.$f; "
             "cp $f tail.$f; printf 'garbage!' >> tail.$f; "
             "cp $f bad.$f; printf '\\377' | dd of=bad.$f bs=1 "
             "seek=$(( $(stat -c %%s $f) - 40 )) conv=notrunc status=none; "
             "done", test_tmpdir()) == 0);
    static const struct {
        const char *name;
        enum ckpt_archive_kind kind;
    } f[] = {
        { "ra.zst", CKPT_ARCHIVE_TAR_ZST }, { "ra.gz", CKPT_ARCHIVE_TAR_GZ },
        { "ra.bz2", CKPT_ARCHIVE_TAR_BZ2 }, { "ra.xz", CKPT_ARCHIVE_TAR_XZ },
        { "tiny.zst", CKPT_ARCHIVE_TAR_ZST },
        { "tiny.gz", CKPT_ARCHIVE_TAR_GZ },
        { "tiny.bz2", CKPT_ARCHIVE_TAR_BZ2 },
        { "cut.tiny.zst", CKPT_ARCHIVE_TAR_ZST },
        { "cut.tiny.gz", CKPT_ARCHIVE_TAR_GZ },
        { "cut.tiny.bz2", CKPT_ARCHIVE_TAR_BZ2 },
        { "tail.tiny.zst", CKPT_ARCHIVE_TAR_ZST },
        { "tail.tiny.gz", CKPT_ARCHIVE_TAR_GZ },
        { "tail.tiny.bz2", CKPT_ARCHIVE_TAR_BZ2 },
        { "bad.tiny.zst", CKPT_ARCHIVE_TAR_ZST },
        { "bad.tiny.gz", CKPT_ARCHIVE_TAR_GZ },
        { "bad.tiny.bz2", CKPT_ARCHIVE_TAR_BZ2 },
    };
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        same_ahead(f[i].name, f[i].kind);
    /* A read failure halfway (and one at the very start). */
    for (size_t i = 0; i < 7; i++) {
        opt.fail_at = (off_t)fsize(tmp(f[i].name)) / 2 + 1;
        same_ahead(f[i].name, f[i].kind);
        opt.fail_at = 0;
    }
    opt.fail_at = 1;
    same_ahead("ra.zst", CKPT_ARCHIVE_TAR_ZST);
    opt.fail_at = 0;
}

/* Closing stops the thread at any point: before the first read (none
 * started), and with the ring full and the decoder not reading. */
static void test_zdec__read_ahead_close(void)
{
    plain();
    CHECK(sh("cd %s && zstd -q -1 < plain > rc.zst", test_tmpdir()) == 0);
    struct src s = { 0 };
    s.fd = open(tmp("rc.zst"), O_RDONLY);
    s.opener = pthread_self();
    CHECK(s.fd >= 0);
    struct zdec *z = zdec_open(CKPT_ARCHIVE_TAR_ZST, 1, rd, &s);
    zdec_read_ahead(z, 4096, 3);
    zdec_close(z);
    CHECK_EQ(s.reads, 0);
    z = zdec_open(CKPT_ARCHIVE_TAR_ZST, 1, rd, &s);
    zdec_read_ahead(z, 4096, 3);
    char b[1];
    CHECK_EQ(zdec_read(z, b, 1), 1);
    zdec_close(z);
    CHECK(s.reads > 0);
    CHECK_EQ(s.elsewhere, s.reads);
    close(s.fd);
}

TEST_MAIN(T(test_zdec__bzip2), T(test_zdec__bzip2_parallel_tools),
          T(test_zdec__bzip2_false_boundaries),
          T(test_zdec__bzip2_fast_and_libbz2), T(test_zdec__bzip2_damage),
          T(test_zdec__gzip), T(test_zdec__xz), T(test_zdec__zstd),
          T(test_zdec__read_ahead), T(test_zdec__read_ahead_close))
