/*
 * member_fuzz - the tar/zip member-name checker (ckpt_archive_check_member
 * in src/archive/archive.c), which every extracted or listed member name
 * and link target passes before anything is written.
 *
 * Input: byte 0 picks the kind (even: plain member, 1 mod 4: symlink,
 * 3 mod 4: hard link), then NAME, NUL, LINK TARGET.
 * Properties: never crashes or leaks; an accepted name is relative and has
 * no ".." component; an accepted link target, resolved by an independent
 * lexical walk (a symlink from the member's directory, a hard link from
 * the archive root), never climbs above the archive root. Conversely a
 * refusal is justified: the same walk finds the escape (checked for names
 * with at least one real component, where "the member's directory" is
 * defined).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/archive.h"

/* Real components of s ("" and "." skipped); -1 if one is "..". */
static int count_real(const char *s, int *dotdot)
{
    int n = 0;
    *dotdot = 0;
    while (*s) {
        size_t k = strcspn(s, "/");
        if (k == 2 && s[0] == '.' && s[1] == '.')
            *dotdot = 1;
        else if (k && !(k == 1 && s[0] == '.'))
            n++;
        s += k;
        if (*s == '/')
            s++;
    }
    return n;
}

/* 1 if target, walked from a directory `depth` levels deep, escapes. */
static int escapes(const char *target, int depth)
{
    if (target[0] == '/')
        return 1;
    while (*target) {
        size_t k = strcspn(target, "/");
        if (k == 2 && target[0] == '.' && target[1] == '.') {
            if (--depth < 0)
                return 1;
        } else if (k && !(k == 1 && target[0] == '.')) {
            depth++;
        }
        target += k;
        if (*target == '/')
            target++;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int kind = data[0] & 1 ? (data[0] & 2 ? 2 : 1) : 0;
    char *buf = malloc(size + 1);
    if (!buf)
        return 0;
    memcpy(buf, data + 1, size - 1);
    buf[size - 1] = '\0';
    buf[size] = '\0';
    const char *name = buf;
    size_t nl = strlen(name);
    const char *link = kind ? buf + (nl < size - 1 ? nl + 1 : nl) : NULL;

    struct ckpt_err err;
    int rc = ckpt_archive_check_member("fuzz.tar", name, link, kind == 2,
                                       &err);
    int dd;
    int real = count_real(name, &dd);
    int name_bad = name[0] == '/' || dd;
    int link_bad = 0;
    if (link)
        link_bad = escapes(link, kind == 2 ? 0 : real - 1);
    if (rc == 0 && (name_bad || link_bad))
        __builtin_trap();   /* an unsafe member accepted */
    if (rc != 0 && !name_bad && real > 0 && !link_bad)
        __builtin_trap();   /* a safe member refused */
    free(buf);
    return 0;
}
