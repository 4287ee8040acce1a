/*
 * gate.c - the delete gate's proof check and its local-file primitives
 * (gate.h). The storage half is gate_storage.c.
 */
#include "ckpt/gate.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/err.h"
#include "ckpt/tempname.h"
#include "ckpt/util.h"
#include "gate/gate_int.h"

static _Thread_local const struct ckpt_gate_proof *active;

static const char *const names[CKPT_GATE_NRULES] = {
    [CKPT_GATE_NONE] = "none",
    [CKPT_GATE_BAD_RUN] = "bad-run",
    [CKPT_GATE_PRUNED] = "pruned",
    [CKPT_GATE_COPIED] = "copied",
    [CKPT_GATE_UNSHARDED] = "unsharded",
    [CKPT_GATE_DROPPED] = "dropped",
    [CKPT_GATE_ASIDE] = "aside",
    [CKPT_GATE_OWN_TEMP] = "own-temp",
    [CKPT_GATE_OWN_STATE] = "own-state",
    [CKPT_GATE_REPLACE] = "replace",
    [CKPT_GATE_EMPTY_DIR] = "empty-dir",
};

const char *ckpt_gate_rule_name(enum ckpt_gate_rule rule)
{
    return (unsigned)rule < CKPT_GATE_NRULES ? names[rule] : "unknown";
}

/* The rules over data ckpt did not write: they act only on a re-check. */
static int needs_recheck(enum ckpt_gate_rule rule)
{
    return rule == CKPT_GATE_BAD_RUN || rule == CKPT_GATE_PRUNED ||
           rule == CKPT_GATE_COPIED || rule == CKPT_GATE_UNSHARDED ||
           rule == CKPT_GATE_DROPPED ||
           rule == CKPT_GATE_ASIDE;
}

int ckpt_gate_check(struct ckpt_gate_proof *p, struct ckpt_err *err)
{
    struct ckpt_err e = CKPT_ERR_INIT;
    err = err ? err : &e;
    if (!p || p->rule <= CKPT_GATE_NONE || p->rule >= CKPT_GATE_NRULES)
        return ckpt_err_set(err, CKPT_EUNSAFE, "delete gate: no proof; "
                            "not deleted");
    const char *rule = ckpt_gate_rule_name(p->rule);
    if (!p->evidence || !*p->evidence)
        return ckpt_err_set(err, CKPT_EUNSAFE, "delete gate: rule %s "
                            "without evidence; not deleted", rule);
    if (needs_recheck(p->rule) && !p->recheck)
        return ckpt_err_set(err, CKPT_EUNSAFE, "delete gate: rule %s (%s) "
                            "without a re-check; not deleted", rule,
                            p->evidence);
    p->gone = 0;
    if (!p->recheck)
        return 0;
    /* The re-check's own message says what changed (callers and their
     * tests name it); one without a message names the rule. */
    int rc = p->recheck(p->data, err);
    if (rc == 1)
        p->gone = 1;
    if (rc < 0 && !err->msg[0])
        ckpt_err_set(err, CKPT_EUNSAFE, "delete gate: rule %s (%s): the "
                     "re-check failed; not deleted", rule, p->evidence);
    return rc < 0 ? -1 : rc;
}

const struct ckpt_gate_proof *gate_enter(const struct ckpt_gate_proof *p)
{
    const struct ckpt_gate_proof *prev = active;
    active = p;
    return prev;
}

void gate_leave(const struct ckpt_gate_proof *prev)
{
    active = prev;
}

/* ---- local files ---- */

int ckpt_gate_unlink(struct ckpt_gate_proof *p, const char *path,
                     struct ckpt_err *err)
{
    int rc = ckpt_gate_check(p, err);
    if (rc != 0)
        return rc < 0 ? -1 : 0;
    if (unlink(path) != 0)
        return ckpt_err_sys(err, "delete '%s'", path);
    return 0;
}

int ckpt_gate_unlinkat(struct ckpt_gate_proof *p, int dfd, const char *name,
                       int flags, struct ckpt_err *err)
{
    int rc = ckpt_gate_check(p, err);
    if (rc != 0)
        return rc < 0 ? -1 : 0;
    if (unlinkat(dfd, name, flags) != 0)
        return ckpt_err_sys(err, "delete '%s'", name);
    return 0;
}

int ckpt_gate_rmdir(struct ckpt_gate_proof *p, const char *path,
                    struct ckpt_err *err)
{
    int rc = ckpt_gate_check(p, err);
    if (rc != 0)
        return rc < 0 ? -1 : 0;
    if (rmdir(path) != 0)
        return ckpt_err_sys(err, "delete directory '%s'", path);
    return 0;
}

int ckpt_gate_rename(struct ckpt_gate_proof *p, const char *from,
                     const char *to, struct ckpt_err *err)
{
    int rc = ckpt_gate_check(p, err);
    if (rc != 0)
        return rc < 0 ? -1 : 0;
    if (rename(from, to) != 0)
        return ckpt_err_sys(err, "rename '%s' to '%s'", from, to);
    return 0;
}

int ckpt_gate_renameat2(struct ckpt_gate_proof *p, const char *from,
                        const char *to, unsigned flags, struct ckpt_err *err)
{
    int rc = ckpt_gate_check(p, err);
    if (rc != 0)
        return rc < 0 ? -1 : 0;
    if (renameat2(AT_FDCWD, from, AT_FDCWD, to, flags) != 0)
        return ckpt_err_sys(err, "exchange '%s' with '%s'", from, to);
    return 0;
}

int ckpt_gate_rename_aside(struct ckpt_gate_proof *p, const char *path,
                           char **tmp, struct ckpt_err *err)
{
    *tmp = NULL;
    int rc = ckpt_gate_check(p, err);
    if (rc != 0)
        return rc < 0 ? -1 : 0;
    *tmp = ckpt_del_temp(path);
    if (*tmp && rename(path, *tmp) != 0) {
        rc = ckpt_err_sys(err, "rename '%s' to '%s'", path, *tmp);
        free(*tmp);
        *tmp = NULL;
        return rc;
    }
    return 0;
}

static const char *file_kind(mode_t m)
{
    return S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket"
           : S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device"
           : "not a regular file";
}

/* Remove the entries of the directory open at dfd (on device dev), depth
 * first; how many stay (another filesystem, a FIFO, socket or device,
 * or a failure) is returned, and err names the first. */
static size_t rm_in(int dfd, dev_t dev, const char *disp, struct ckpt_err *err)
{
    int dup_fd = dup(dfd);
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!d) {
        if (dup_fd >= 0)
            close(dup_fd);
        ckpt_err_sys(err, "open directory '%s'", disp);
        return 1;
    }
    /* Names first, removal after: no readdir over a changing directory. */
    char **v = NULL;
    size_t n = 0, left = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            v = ckpt_xreallocarray(v, n + 1, sizeof(*v));
            v[n++] = ckpt_xstrdup(de->d_name);
        }
    closedir(d);
    for (size_t i = 0; i < n; i++) {
        struct stat sb;
        char *path = ckpt_path_join(disp, v[i]);
        int sub = -1;
        if (fstatat(dfd, v[i], &sb, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno != ENOENT && !left++)
                ckpt_err_sys(err, "stat '%s'", path);
        } else if (S_ISDIR(sb.st_mode) && sb.st_dev != dev) {
            if (!left++)
                ckpt_err_set(err, CKPT_EUNSAFE, "'%s' is another "
                             "filesystem; not deleting across it", path);
        } else if (S_ISDIR(sb.st_mode) &&
                   (sub = openat(dfd, v[i], O_RDONLY | O_DIRECTORY |
                                 O_NOFOLLOW | O_CLOEXEC)) < 0) {
            if (errno != ENOENT && !left++)
                ckpt_err_sys(err, "open directory '%s'", path);
        } else if (S_ISDIR(sb.st_mode)) {
            size_t l = rm_in(sub, dev, path, left ? NULL : err);
            close(sub);
            if (l)
                left += l;
            else if (unlinkat(dfd, v[i], AT_REMOVEDIR) != 0 &&
                     errno != ENOENT && !left++)
                ckpt_err_sys(err, "delete directory '%s'", path);
        } else if (!S_ISREG(sb.st_mode) && !S_ISLNK(sb.st_mode)) {
            if (!left++)
                ckpt_err_set(err, CKPT_EUNSAFE, "'%s' is %s; only regular "
                             "files, links and directories are deleted",
                             path, file_kind(sb.st_mode));
        } else if (unlinkat(dfd, v[i], 0) != 0 && errno != ENOENT) {
            if (!left++)
                ckpt_err_sys(err, "delete '%s'", path);
        }
        free(path);
        free(v[i]);
    }
    free(v);
    return left;
}

int ckpt_gate_rm_tree(struct ckpt_gate_proof *p, const char *path,
                      struct ckpt_err *err)
{
    struct ckpt_err e = CKPT_ERR_INIT;
    err = err ? err : &e;
    int rc = ckpt_gate_check(p, err);
    if (rc != 0)
        return rc < 0 ? -1 : 0;
    struct stat sb;
    if (!path || lstat(path, &sb) != 0)
        return !path || errno == ENOENT ? 0
               : ckpt_err_sys(err, "stat '%s'", path);
    if (!S_ISDIR(sb.st_mode)) {
        if (!S_ISREG(sb.st_mode) && !S_ISLNK(sb.st_mode))
            return ckpt_err_set(err, CKPT_EUNSAFE, "'%s' is %s; only regular "
                                "files, links and directories are deleted",
                                path, file_kind(sb.st_mode));
        return unlink(path) == 0 || errno == ENOENT
               ? 0 : ckpt_err_sys(err, "delete '%s'", path);
    }
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : ckpt_err_sys(err, "open directory '%s'",
                                                  path);
    size_t left = rm_in(fd, sb.st_dev, path, err);
    close(fd);
    if (left)
        return -1;
    return rmdir(path) == 0 || errno == ENOENT
           ? 0 : ckpt_err_sys(err, "delete directory '%s'", path);
}

/* ---- re-checks of rename-first deletes ---- */

/* The path's base name, and whether it is gone (1), there (0), or -1. */
static int aside_there(const char *path, struct ckpt_err *err)
{
    struct stat sb;
    if (lstat(path, &sb) == 0)
        return 0;
    return errno == ENOENT ? 1 : ckpt_err_sys(err, "stat '%s'", path);
}

int ckpt_gate_dead_aside(void *path, struct ckpt_err *err)
{
    int rc = aside_there(path, err);
    if (rc == 0 && !ckpt_del_dead(path, NULL))
        return ckpt_err_set(err, CKPT_EUNSAFE, "'%s' is no delete a dead "
                            "process of this host left; not deleted",
                            (const char *)path);
    return rc;
}

int ckpt_gate_own_aside(void *path, struct ckpt_err *err)
{
    char host[256] = "";
    if (gethostname(host, sizeof(host) - 1) != 0 || !*host)
        snprintf(host, sizeof(host), "unknown");
    char *mark = ckpt_xasprintf(".ckpt-del-%s-%ld", host, (long)getpid());
    int rc = aside_there(path, err);
    if (rc == 0 && (!ckpt_is_del_name(path) ||
                    !ckpt_str_endswith(path, mark)))
        rc = ckpt_err_set(err, CKPT_EUNSAFE, "'%s' is not renamed aside by "
                          "this process; not deleted", (const char *)path);
    free(mark);
    return rc;
}

/* ---- a backend's syscalls, under the gate only ---- */

/* Whether this thread runs a storage delete for the gate; else errno
 * EPERM. */
static int held(void)
{
    if (active)
        return 1;
    errno = EPERM;
    return 0;
}

int ckpt_gate_held_unlinkat(int dfd, const char *name, int flags)
{
    return held() ? unlinkat(dfd, name, flags) : -1;
}

int ckpt_gate_held_rmdir(const char *path)
{
    return held() ? rmdir(path) : -1;
}

int ckpt_gate_held_unlink(const char *path)
{
    return held() ? unlink(path) : -1;
}
