/*
 * ckpt/err.h - the one error record every fallible call fills.
 *
 * Functions return 0 on success or -1 with *err filled. The record is passed
 * explicitly (last argument) so a worker thread's failure reaches the
 * coordinator without thread-local state. Messages name the object as the
 * user wrote it and never contain secrets; callers prefix context with
 * ckpt_err_prefix().
 */
#ifndef CKPT_ERR_H
#define CKPT_ERR_H

#include <stddef.h>

enum ckpt_errcode {
    CKPT_OK = 0,
    CKPT_EIO,        /* local I/O failure (sys_errno set) */
    CKPT_ENOTFOUND,  /* file, object or key does not exist */
    CKPT_EEXIST,     /* already exists (conditional create lost) */
    CKPT_EFORMAT,    /* malformed or unsupported input bytes */
    CKPT_EHTTP,      /* HTTP/service error (http_status set) */
    CKPT_ENET,       /* transport: connect, reset, timeout */
    CKPT_EUSAGE,     /* bad argument or location */
    CKPT_ENOMEM,     /* allocation failed */
    CKPT_EAUTH,      /* missing or rejected credentials */
    CKPT_EUNSUPPORTED, /* valid but not handled */
    CKPT_EUNSAFE,    /* refused: would escape a tree, delete a non-run */
    CKPT_EINTERNAL
};

struct ckpt_err {
    int code;        /* enum ckpt_errcode */
    int sys_errno;   /* errno at failure, or 0 */
    int http_status; /* HTTP status, or 0 */
    char msg[512];   /* names the object; NUL-terminated */
};

#define CKPT_ERR_INIT { 0, 0, 0, { 0 } }

#if defined(__GNUC__)
#define CKPT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CKPT_PRINTF(a, b)
#endif

/* Fill err (NULL allowed) with code and message; returns -1. */
int ckpt_err_set(struct ckpt_err *err, int code, const char *fmt, ...)
    CKPT_PRINTF(3, 4);
/* As ckpt_err_set with code CKPT_EIO (or CKPT_ENOTFOUND for ENOENT),
 * appending ": strerror(errno)". Reads errno first. Returns -1. */
int ckpt_err_sys(struct ckpt_err *err, const char *fmt, ...)
    CKPT_PRINTF(2, 3);
/* Prepend "prefix: " to err->msg (truncating at the end if needed). */
void ckpt_err_prefix(struct ckpt_err *err, const char *fmt, ...)
    CKPT_PRINTF(2, 3);
void ckpt_err_clear(struct ckpt_err *err);
/* Short stable name of a code: "io", "not-found", ... */
const char *ckpt_err_name(int code);

#endif
