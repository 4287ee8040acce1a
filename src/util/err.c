#include "ckpt/err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int ckpt_err_set(struct ckpt_err *err, int code, const char *fmt, ...)
{
    if (!err)
        return -1;
    va_list ap;
    err->code = code;
    err->sys_errno = 0;
    err->http_status = 0;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    return -1;
}

int ckpt_err_sys(struct ckpt_err *err, const char *fmt, ...)
{
    int saved = errno; /* before any formatting can clobber it */
    if (!err)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    size_t n = strlen(err->msg);
    snprintf(err->msg + n, sizeof(err->msg) - n, ": %s", strerror(saved));
    err->code = saved == ENOENT ? CKPT_ENOTFOUND
              : saved == ENOMEM ? CKPT_ENOMEM
              : saved == EEXIST ? CKPT_EEXIST : CKPT_EIO;
    err->sys_errno = saved;
    err->http_status = 0;
    return -1;
}

void ckpt_err_prefix(struct ckpt_err *err, const char *fmt, ...)
{
    if (!err)
        return;
    char pre[sizeof(err->msg)];
    char old[sizeof(err->msg)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof(pre), fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof(old));
    snprintf(err->msg, sizeof(err->msg), "%s: %s", pre, old);
}

void ckpt_err_clear(struct ckpt_err *err)
{
    if (err)
        memset(err, 0, sizeof(*err));
}

const char *ckpt_err_name(int code)
{
    switch (code) {
    case CKPT_OK: return "ok";
    case CKPT_EIO: return "io";
    case CKPT_ENOTFOUND: return "not-found";
    case CKPT_EEXIST: return "exists";
    case CKPT_EFORMAT: return "format";
    case CKPT_EHTTP: return "http";
    case CKPT_ENET: return "network";
    case CKPT_EUSAGE: return "usage";
    case CKPT_ENOMEM: return "no-memory";
    case CKPT_EAUTH: return "auth";
    case CKPT_EUNSUPPORTED: return "unsupported";
    case CKPT_EUNSAFE: return "unsafe";
    default: return "internal";
    }
}
