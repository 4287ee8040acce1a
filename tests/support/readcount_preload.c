/*
 * readcount_preload.c - LD_PRELOAD shim for tests: how many bytes the
 * process read from one file, and how many times it opened it. The file
 * is named by CKPT_TEST_READS_PATH (found by device and inode when the
 * process starts, so a rename or delete later does not lose it); every
 * read(), pread() and pread64() on a descriptor of that file counts, and
 * every open() / open64() / openat() of it. At exit the counts are
 * appended to CKPT_TEST_READS_OUT as one line "BYTES OPENS". With
 * CKPT_TEST_READS_KILL_AT=N the process SIGKILLs itself once it has read
 * N bytes of the file (a kill at an exact point of a pass). With
 * CKPT_TEST_READS_KILL_CREATE=S it SIGKILLs itself right after it created
 * (O_CREAT|O_EXCL) a file whose path holds S for the second time: the
 * first such file is whole, wherever the reads stand (the archive is read
 * ahead of the decoder: a kill by bytes read lands at no exact point of
 * what was written). With CKPT_TEST_READS_EIO_AT=N a pread of the file
 * stops short at offset N and one from N on fails with EIO: the same
 * bytes arrive first, however the reads are cut.
 *
 * `ckpt process` of a compressed archive must read it once: BYTES is then
 * the archive's size plus a few header bytes sniffed, never twice it.
 */
#undef _FILE_OFFSET_BITS
#include "preload.h"
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static dev_t target_dev;
static ino_t target_ino;
static int active;
static atomic_ullong nbytes, nopens;
static unsigned long long kill_at;
static const char *kill_create;
static long long eio_at = -1;
static atomic_int creates;

__attribute__((constructor)) static void init(void)
{
    const char *p = getenv("CKPT_TEST_READS_PATH");
    struct stat sb;
    if (p && getenv("CKPT_TEST_READS_OUT") && stat(p, &sb) == 0) {
        target_dev = sb.st_dev;
        target_ino = sb.st_ino;
        active = 1;
        const char *k = getenv("CKPT_TEST_READS_KILL_AT");
        kill_at = k ? strtoull(k, NULL, 10) : 0;
        kill_create = getenv("CKPT_TEST_READS_KILL_CREATE");
        const char *e = getenv("CKPT_TEST_READS_EIO_AT");
        eio_at = e ? strtoll(e, NULL, 10) : -1;
    }
}

__attribute__((destructor)) static void fini(void)
{
    if (!active)
        return;
    FILE *f = fopen(getenv("CKPT_TEST_READS_OUT"), "a");
    if (!f)
        return;
    fprintf(f, "%llu %llu\n", (unsigned long long)nbytes,
            (unsigned long long)nopens);
    fclose(f);
}

static int is_target(int fd)
{
    struct stat sb;
    return active && fd >= 0 && fstat(fd, &sb) == 0 &&
           sb.st_dev == target_dev && sb.st_ino == target_ino;
}

static void count(int fd, ssize_t n)
{
    if (n <= 0 || !is_target(fd))
        return;
    unsigned long long now = atomic_fetch_add(&nbytes, (unsigned long long)n)
                             + (unsigned long long)n;
    if (kill_at && now >= kill_at)
        raise(SIGKILL);
}

static int opened(int fd, const char *path, int flags)
{
    if (is_target(fd))
        nopens++;
    if (fd >= 0 && kill_create && (flags & (O_CREAT | O_EXCL)) ==
                                  (O_CREAT | O_EXCL) &&
        strstr(path, kill_create) && atomic_fetch_add(&creates, 1) == 1)
        raise(SIGKILL);
    return fd;
}

ssize_t read(int fd, void *buf, size_t n)
{
    ssize_t r = REAL("read", ssize_t (*)(int, void *, size_t))(fd, buf, n);
    count(fd, r);
    return r;
}

/* CKPT_TEST_READS_EIO_AT: -1 (EIO) for a read from eio_at on, else n cut
 * at it. */
static ssize_t eio_cut(int fd, long long off, size_t *n)
{
    if (eio_at < 0 || !is_target(fd))
        return 0;
    if (off >= eio_at) {
        errno = EIO;
        return -1;
    }
    if ((long long)*n > eio_at - off)
        *n = (size_t)(eio_at - off);
    return 0;
}

ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
    if (eio_cut(fd, (long long)off, &n) < 0)
        return -1;
    ssize_t r = REAL("pread", ssize_t (*)(int, void *, size_t, off_t))(
        fd, buf, n, off);
    count(fd, r);
    return r;
}

ssize_t pread64(int fd, void *buf, size_t n, off64_t off)
{
    if (eio_cut(fd, (long long)off, &n) < 0)
        return -1;
    ssize_t r = REAL("pread64", ssize_t (*)(int, void *, size_t, off64_t))(
        fd, buf, n, off);
    count(fd, r);
    return r;
}

int open(const char *path, int flags, ...)
{
    mode_t mode = 0;
    PRELOAD_MODE_OF(flags, mode);
    return opened(REAL("open", int (*)(const char *, int, ...))(path, flags,
                                                                mode),
                  path, flags);
}

int open64(const char *path, int flags, ...)
{
    mode_t mode = 0;
    PRELOAD_MODE_OF(flags, mode);
    return opened(REAL("open64", int (*)(const char *, int, ...))(path,
                                                                  flags,
                                                                  mode),
                  path, flags);
}

int openat(int dfd, const char *path, int flags, ...)
{
    mode_t mode = 0;
    PRELOAD_MODE_OF(flags, mode);
    return opened(REAL("openat", int (*)(int, const char *, int, ...))(
        dfd, path, flags, mode), path, flags);
}

int openat64(int dfd, const char *path, int flags, ...)
{
    mode_t mode = 0;
    PRELOAD_MODE_OF(flags, mode);
    return opened(REAL("openat64", int (*)(int, const char *, int, ...))(
        dfd, path, flags, mode), path, flags);
}
