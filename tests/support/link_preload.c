/*
 * link_preload.c - LD_PRELOAD shim for tests: which hard links the
 * process makes, and a file changed at that moment. Every link() is
 * appended to CKPT_TEST_LINKS_OUT as a line "OLD\tNEW\tRC" (RC: 0 made,
 * -1 failed). With CKPT_TEST_LINK_CHANGE=PREFIX, the first link whose
 * OLD starts with PREFIX has OLD's first byte rewritten (same size, the
 * kernel moves its mtime) right before the link is made: a spooled
 * archive member changed between the check before the link and the link
 * itself.
 */
#include "preload.h"
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_int changed;

static void change(const char *path)
{
    const char *c = getenv("CKPT_TEST_LINK_CHANGE");
    if (!c || !*c || strncmp(path, c, strlen(c)) ||
        atomic_exchange(&changed, 1))
        return;
    int fd = REAL("open", int (*)(const char *, int, ...))(path, O_RDWR);
    if (fd < 0)
        return;
    unsigned char b = 0;
    if (pread(fd, &b, 1, 0) == 1) {
        b ^= 0xff;
        if (pwrite(fd, &b, 1, 0) != 1)
            b = 0;
    }
    close(fd);
}

int link(const char *old, const char *new)
{
    change(old);
    int rc = REAL("link", int (*)(const char *, const char *))(old, new);
    const char *out = getenv("CKPT_TEST_LINKS_OUT");
    FILE *f = out ? fopen(out, "a") : NULL;
    if (f) {
        fprintf(f, "%s\t%s\t%d\n", old, new, rc);
        fclose(f);
    }
    return rc;
}
