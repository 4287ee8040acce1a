/*
 * storage_tool.c - drive the storage API from scripts (integration tests,
 * benchmarks): every operation of include/ckpt/storage.h on any location.
 *
 *   storage_tool [-j N] [-r ATTEMPTS] [-k] [-s] CMD ARGS
 *     ls [-r] LOC          one "TYPE<TAB>SIZE<TAB>NAME" line per entry,
 *                          sorted by name (TYPE f, d, l, o)
 *     stat LOC             "file SIZE ETAG" or "dir"
 *     cat LOC [OFF LEN]    bytes to stdout (ranged reads of 1 MiB)
 *     put FILE LOC         streaming write of FILE ("-": stdin)
 *     put-if-absent FILE LOC
 *     rm LOC | rm-tree LOC
 *     probe LOC            ckpt_storage_probe: nothing, or the error
 *     put-many LOC N SIZE [PER_DIR]
 *                          N objects LOC/obj-000000.. of SIZE bytes, -j
 *                          at a time; with PER_DIR, PER_DIR objects to a
 *                          directory: LOC/d0000/obj-000000..
 *   -k skips TLS verification (--insecure).
 *   -s prints the storage's counters to stderr at the end:
 *     "requests=N retries=N bytes_in=N bytes_out=N bytes_read=N".
 * Failure: "storage_tool: CODE: MESSAGE" on stderr, exit 1.
 */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/gate.h"
#include "ckpt/buf.h"
#include "ckpt/pool.h"
#include "ckpt/storage.h"
#include "ckpt/util.h"

#define CHUNK (1u << 20)

static int die(const struct ckpt_err *err)
{
    fprintf(stderr, "storage_tool: %s: %s\n", ckpt_err_name(err->code),
            err->msg);
    return 1;
}

struct names {
    char **v;
    size_t n;
};

static int collect(void *ud, const struct ckpt_entry *e)
{
    struct names *ns = ud;
    static const char types[] = "fdlo";
    ns->v = ckpt_xreallocarray(ns->v, ns->n + 1, sizeof(char *));
    ns->v[ns->n++] = ckpt_xasprintf("%c\t%llu\t%s", types[e->type],
                                    (unsigned long long)e->size, e->name);
    return 0;
}

static int by_name(const void *a, const void *b)
{
    const char *x = strchr(strchr(*(char *const *)a, '\t') + 1, '\t');
    const char *y = strchr(strchr(*(char *const *)b, '\t') + 1, '\t');
    return strcmp(x, y);
}

static int cmd_ls(struct ckpt_storage *st, const char *key, int rec,
                  struct ckpt_err *err)
{
    struct names ns = { NULL, 0 };
    int rc = ckpt_storage_list(st, key, rec ? CKPT_LIST_RECURSIVE : 0,
                               collect, &ns, err);
    if (ns.n)
        qsort(ns.v, ns.n, sizeof(char *), by_name);
    for (size_t i = 0; i < ns.n; i++) {
        if (rc == 0)
            printf("%s\n", ns.v[i]);
        free(ns.v[i]);
    }
    free(ns.v);
    return rc;
}

static int cmd_stat(struct ckpt_storage *st, const char *key,
                    struct ckpt_err *err)
{
    struct ckpt_stat sb;
    if (ckpt_storage_stat(st, key, &sb, err) != 0)
        return -1;
    if (sb.type == CKPT_ENTRY_DIR)
        printf("dir\n");
    else
        printf("file %llu %s\n", (unsigned long long)sb.size, sb.etag);
    return 0;
}

static int cmd_cat(struct ckpt_storage *st, const char *key, uint64_t off,
                   uint64_t len, struct ckpt_err *err)
{
    char *buf = ckpt_xmalloc(CHUNK);
    int rc = 0;
    while (len > 0) {
        size_t want = len < CHUNK ? (size_t)len : CHUNK, got;
        rc = ckpt_storage_read(st, key, off, buf, want, &got, err);
        if (rc != 0 || got == 0)
            break;
        fwrite(buf, 1, got, stdout);
        off += got;
        len -= got;
        if (got < want)
            break;
    }
    free(buf);
    return rc;
}

static int read_file(const char *path, struct ckpt_buf *b)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f)
        return -1;
    char *tmp = ckpt_xmalloc(CHUNK);
    size_t n;
    while ((n = fread(tmp, 1, CHUNK, f)) > 0)
        ckpt_buf_add(b, tmp, n);
    free(tmp);
    if (f != stdin)
        fclose(f);
    return 0;
}

static int cmd_put(struct ckpt_storage *st, const char *file,
                   const char *key, int cond, struct ckpt_err *err)
{
    struct ckpt_buf b = CKPT_BUF_INIT;
    if (read_file(file, &b) != 0)
        return ckpt_err_sys(err, "open '%s'", file);
    int rc;
    if (cond) {
        rc = ckpt_storage_put_if_absent(st, key, b.ptr, b.len, err);
    } else {
        /* Through the streaming writer in odd-sized pieces, as a caller
         * copying a file would. */
        struct ckpt_writer *w;
        rc = ckpt_storage_writer_open(st, key, b.len, &w, err);
        for (size_t off = 0; rc == 0 && off < b.len; off += 777777) {
            size_t n = b.len - off < 777777 ? b.len - off : 777777;
            rc = ckpt_writer_write(w, b.ptr + off, n, err);
        }
        if (rc == 0)
            rc = ckpt_writer_commit(w, err);
        else
            ckpt_writer_abort(w);
    }
    ckpt_buf_release(&b);
    return rc;
}

struct put_task {
    struct ckpt_storage *st;
    char *key;
    const char *data;
    size_t len;
    int rc;
    struct ckpt_err err;
};

static void put_one(void *arg)
{
    struct put_task *t = arg;
    t->rc = ckpt_storage_put(t->st, t->key, t->data, t->len, &t->err);
}

static char *many_key(const char *prefix, size_t i, size_t per_dir)
{
    const char *sep = *prefix ? "/" : "";
    if (per_dir)
        return ckpt_xasprintf("%s%sd%04zu/obj-%06zu", prefix, sep,
                              i / per_dir, i);
    return ckpt_xasprintf("%s%sobj-%06zu", prefix, sep, i);
}

static int cmd_put_many(struct ckpt_storage *st, const char *prefix,
                        size_t n, size_t size, size_t per_dir, int jobs,
                        struct ckpt_err *err)
{
    char *data = ckpt_xmalloc(size ? size : 1);
    for (size_t i = 0; i < size; i++)
        data[i] = (char)('a' + i % 26);
    struct put_task *t = ckpt_xcalloc(n ? n : 1, sizeof(*t));
    struct ckpt_pool *pool = ckpt_pool_new(jobs, 256);
    for (size_t i = 0; i < n; i++) {
        t[i] = (struct put_task){ st, many_key(prefix, i, per_dir), data,
                                  size, 0, CKPT_ERR_INIT };
        ckpt_pool_submit(pool, put_one, &t[i]);
    }
    ckpt_pool_free(pool);
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i].rc != 0 && rc == 0) {
            *err = t[i].err;
            rc = -1;
        }
        free(t[i].key);
    }
    free(t);
    free(data);
    return rc;
}

static int run(struct ckpt_storage *st, const char *key, int argc,
               char **argv, int jobs, struct ckpt_err *err)
{
    const char *cmd = argv[0];
    uint64_t a = 0, b = UINT64_MAX;
    if (!strcmp(cmd, "ls"))
        return cmd_ls(st, key, argc > 2, err);
    if (!strcmp(cmd, "stat"))
        return cmd_stat(st, key, err);
    if (!strcmp(cmd, "cat")) {
        if (argc == 4 && (ckpt_parse_u64(argv[2], &a) != 0 ||
                          ckpt_parse_u64(argv[3], &b) != 0))
            return ckpt_err_set(err, CKPT_EUSAGE, "bad range");
        return cmd_cat(st, key, a, b, err);
    }
    if (!strcmp(cmd, "put") || !strcmp(cmd, "put-if-absent"))
        return cmd_put(st, argv[1], key, cmd[3] == '-', err);
    if (!strcmp(cmd, "rm"))
        return ckpt_gate_delete(CKPT_GATE_OWN(CKPT_GATE_OWN_TEMP, "test"), st, key, err);
    if (!strcmp(cmd, "rm-tree"))
        return ckpt_gate_delete_tree(CKPT_GATE_OWN(CKPT_GATE_OWN_TEMP, "test"), st, key, err);
    if (!strcmp(cmd, "probe"))
        return ckpt_storage_probe(st, key, err);
    if (!strcmp(cmd, "put-many")) {
        uint64_t per = 0;
        if (argc < 4 || argc > 5 || ckpt_parse_u64(argv[2], &a) != 0 ||
            ckpt_parse_u64(argv[3], &b) != 0 ||
            (argc == 5 && ckpt_parse_u64(argv[4], &per) != 0))
            return ckpt_err_set(err, CKPT_EUSAGE,
                                "put-many LOC N SIZE [PER_DIR]");
        return cmd_put_many(st, key, (size_t)a, (size_t)b, (size_t)per,
                            jobs, err);
    }
    return ckpt_err_set(err, CKPT_EUSAGE, "unknown command '%s'", cmd);
}

int main(int argc, char **argv)
{
    int jobs = 16, stats = 0, attempts = 0, insecure = 0, opt;
    while ((opt = getopt(argc, argv, "+j:r:ks")) != -1) {
        if (opt == 'j')
            jobs = (int)strtol(optarg, NULL, 10);
        else if (opt == 'r')
            attempts = (int)strtol(optarg, NULL, 10);
        else if (opt == 's')
            stats = 1;
        else if (opt == 'k')
            insecure = 1;
        else
            return 2;
    }
    argc -= optind;
    argv += optind;
    if (argc < 2) {
        fprintf(stderr, "usage: storage_tool [-j N] [-s] CMD ARGS "
                        "(see the source)\n");
        return 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    /* The location is the last argument, except for "ls -r LOC". */
    const char *where = argv[argc - 1];
    if (!strcmp(argv[0], "cat") || !strcmp(argv[0], "put-many") ||
        !strcmp(argv[0], "ls"))
        where = !strcmp(argv[1], "-r") ? argv[2] : argv[1];
    struct ckpt_err err = CKPT_ERR_INIT;
    struct ckpt_loc loc;
    struct ckpt_storage *st = NULL;
    struct ckpt_storage_cfg cfg = { .insecure = insecure, .retries = attempts,
                                    .jobs = jobs };
    int rc = ckpt_loc_parse(&loc, where, &err);
    if (rc == 0)
        rc = ckpt_storage_open(&st, &loc, &cfg, &err);
    if (rc == 0)
        rc = run(st, loc.key, argc, argv, jobs, &err);
    if (st && stats) {
        struct ckpt_storage_stats s;
        ckpt_storage_stats(st, &s);
        fprintf(stderr, "requests=%llu retries=%llu bytes_in=%llu "
                "bytes_out=%llu bytes_read=%llu\n",
                (unsigned long long)s.requests,
                (unsigned long long)s.retries,
                (unsigned long long)s.bytes_in,
                (unsigned long long)s.bytes_out,
                (unsigned long long)ckpt_storage_bytes_read(st));
    }
    ckpt_storage_close(st);
    ckpt_loc_release(&loc);
    curl_global_cleanup();
    fflush(stdout);
    return rc == 0 ? 0 : die(&err);
}
