/*
 * archive_fuzz - property: any bytes given as a run archive (tar, any
 * compression, zip) are either read to the end or rejected with an error;
 * never a crash, a hang, or a member path that escapes the archive.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ckpt/archive.h"
#include "ckpt/run.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("archive", 0);
    if (fd < 0)
        return 0;
    if (write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    struct ckpt_loc loc;
    struct ckpt_storage *st;
    ckpt_loc_parse(&loc, "/", NULL);
    ckpt_storage_open(&st, &loc, NULL, NULL);
    struct ckpt_archive *a;
    struct ckpt_err err;
    if (ckpt_archive_open(&a, st, path, &err) == 0) {
        struct ckpt_archive_entry e;
        int n = 0;
        while (ckpt_archive_next(a, &e, &err) == 1 && n++ < 10000) {
            /* Names are checked before we see them: no absolute path, no
             * ".." component. */
            if (e.path[0] == '/' || !strcmp(e.path, "..") ||
                !strncmp(e.path, "../", 3) || strstr(e.path, "/../") ||
                (strlen(e.path) >= 3 &&
                 !strcmp(e.path + strlen(e.path) - 3, "/..")))
                __builtin_trap();
            char buf[4096];
            size_t got;
            int k = 0;
            while (ckpt_archive_read(a, buf, sizeof(buf), &got, &err) == 0 &&
                   got && k++ < 4096)
                ;
        }
        ckpt_archive_close(a);
    }
    ckpt_storage_close(st);
    ckpt_loc_release(&loc);
    close(fd);
    return 0;
}
