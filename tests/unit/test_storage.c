#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "ckpt/buf.h"
#include "ckpt/storage.h"
#include "ckpt/util.h"
#include "test.h"

static struct ckpt_storage *local(void)
{
    struct ckpt_loc loc;
    struct ckpt_storage *st = NULL;
    ckpt_loc_parse(&loc, "/", NULL);
    ckpt_storage_open(&st, &loc, NULL, NULL);
    ckpt_loc_release(&loc);
    return st;
}

static void test_storage__loc_parse(void)
{
    struct ckpt_loc l;
    struct ckpt_err err;
    CHECK(ckpt_loc_parse(&l, "s3://bkt/a/b/", &err) == 0);
    CHECK_EQ(l.scheme, CKPT_SCHEME_S3);
    CHECK_STR(l.bucket, "bkt");
    CHECK_STR(l.key, "a/b");
    CHECK_STR(l.display, "s3://bkt/a/b/");
    char *f = ckpt_loc_format(&l, "x/y");
    CHECK_STR(f, "s3://bkt/x/y");
    free(f);
    ckpt_loc_release(&l);
    CHECK(ckpt_loc_parse(&l, "gs://b", &err) == 0);
    CHECK_EQ(l.scheme, CKPT_SCHEME_GS);
    CHECK_STR(l.key, "");
    ckpt_loc_release(&l);
    CHECK(ckpt_loc_parse(&l, "r2://b//k", &err) == 0);
    CHECK_STR(l.key, "k");
    ckpt_loc_release(&l);
    CHECK(ckpt_loc_parse(&l, "file:///tmp/x/", &err) == 0);
    CHECK_EQ(l.scheme, CKPT_SCHEME_LOCAL);
    CHECK_STR(l.key, "/tmp/x");
    ckpt_loc_release(&l);
    CHECK(ckpt_loc_parse(&l, "/", &err) == 0);
    CHECK_STR(l.key, "/");
    ckpt_loc_release(&l);
    CHECK(ckpt_loc_parse(&l, "s3:///k", &err) == -1);
    CHECK_STR(err.msg, "'s3:///k': missing bucket name");
    CHECK(ckpt_loc_parse(&l, "ftp://x/y", &err) == -1);
    CHECK_STR(err.msg, "'ftp://x/y': unknown scheme (use a path, file://, "
                       "s3://, r2:// or gs://)");
    CHECK(ckpt_loc_parse(&l, "", &err) == -1);
}

static struct ckpt_buf listed = CKPT_BUF_INIT;

static int collect(void *ud, const struct ckpt_entry *e)
{
    ckpt_buf_addf(&listed, "%c:%s:%llu;",
                  e->type == CKPT_ENTRY_DIR ? 'd' : e->type == CKPT_ENTRY_LINK
                  ? 'l' : 'f', e->name, (unsigned long long)e->size);
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sort the ';'-separated records so listings compare independent of
 * readdir order. */
static const char *sorted_listing(void)
{
    static struct ckpt_buf out = CKPT_BUF_INIT;
    char *items[64];
    int n = 0;
    for (char *p = listed.ptr; *p && n < 64;) {
        char *e = strchr(p, ';');
        *e = '\0';
        items[n++] = p;
        p = e + 1;
    }
    qsort(items, (size_t)n, sizeof(*items), cmp_str);
    ckpt_buf_reset(&out);
    for (int i = 0; i < n; i++)
        ckpt_buf_addf(&out, "%s;", items[i]);
    ckpt_buf_reset(&listed);
    return out.ptr;
}

static void test_storage__local_ops(void)
{
    struct ckpt_storage *st = local();
    struct ckpt_err err;
    char *root = ckpt_path_join(test_tmpdir(), "ops");
    char *a = ckpt_path_join(root, "d1/d2/a.txt");
    CHECK(ckpt_storage_put(st, a, "hello", 5, &err) == 0);
    char *b = ckpt_path_join(root, "b.bin");
    CHECK(ckpt_storage_put(st, b, "0123456789", 10, &err) == 0);
    char *l = ckpt_path_join(root, "link");
    CHECK(symlink("/etc", l) == 0);
    CHECK(ckpt_storage_list(st, root, CKPT_LIST_RECURSIVE, collect, NULL,
                            &err) == 0);
    CHECK_STR(sorted_listing(), "f:b.bin:10;f:d1/d2/a.txt:5;l:link:0;");
    CHECK(ckpt_storage_list(st, root, 0, collect, NULL, &err) == 0);
    CHECK_STR(sorted_listing(), "d:d1:0;f:b.bin:10;l:link:0;");
    char buf[16];
    size_t n;
    CHECK(ckpt_storage_read(st, b, 3, buf, 4, &n, &err) == 0);
    CHECK(n == 4 && memcmp(buf, "3456", 4) == 0);
    CHECK(ckpt_storage_read(st, b, 8, buf, 10, &n, &err) == 0);
    CHECK_EQ(n, 2);
    CHECK(ckpt_storage_read(st, b, 20, buf, 10, &n, &err) == 0);
    CHECK_EQ(n, 0);
    struct ckpt_stat sb;
    CHECK(ckpt_storage_stat(st, b, &sb, &err) == 0);
    CHECK(sb.size == 10 && sb.type == CKPT_ENTRY_FILE);
    CHECK(ckpt_storage_stat(st, root, &sb, &err) == 0);
    CHECK_EQ(sb.type, CKPT_ENTRY_DIR);
    char *missing = ckpt_path_join(root, "nope");
    CHECK(ckpt_storage_stat(st, missing, &sb, &err) == -1);
    CHECK_EQ(err.code, CKPT_ENOTFOUND);
    CHECK(ckpt_storage_delete(st, missing, &err) == 0);
    /* conditional create */
    CHECK(ckpt_storage_put_if_absent(st, b, "x", 1, &err) == -1);
    CHECK_EQ(err.code, CKPT_EEXIST);
    char *c = ckpt_path_join(root, "lease");
    CHECK(ckpt_storage_put_if_absent(st, c, "me", 2, &err) == 0);
    char *data;
    size_t len;
    CHECK(ckpt_storage_read_all(st, c, 100, &data, &len, &err) == 0);
    CHECK_STR(data, "me");
    free(data);
    CHECK(ckpt_storage_read_all(st, b, 5, &data, &len, &err) == -1);
    CHECK_EQ(err.code, CKPT_EFORMAT);
    ckpt_storage_close(st);
    free(a); free(b); free(c); free(l); free(missing); free(root);
}

static void test_storage__writer_atomic(void)
{
    struct ckpt_storage *st = local();
    struct ckpt_err err;
    char *root = ckpt_path_join(test_tmpdir(), "atomic");
    char *f = ckpt_path_join(root, "out.pt");
    struct ckpt_writer *w;
    CHECK(ckpt_storage_writer_open(st, f, 10, &w, &err) == 0);
    CHECK(ckpt_writer_write(w, "abc", 3, &err) == 0);
    struct ckpt_stat sb;
    /* not visible before commit */
    CHECK(ckpt_storage_stat(st, f, &sb, &err) == -1);
    ckpt_writer_abort(w);
    CHECK(ckpt_storage_list(st, root, CKPT_LIST_RECURSIVE, collect, NULL,
                            &err) == 0);
    CHECK_STR(sorted_listing(), ""); /* abort left nothing behind */
    CHECK(ckpt_storage_writer_open(st, f, 10, &w, &err) == 0);
    CHECK(ckpt_writer_write(w, "abc", 3, &err) == 0);
    CHECK(ckpt_writer_commit(w, &err) == 0);
    CHECK(ckpt_storage_stat(st, f, &sb, &err) == 0 && sb.size == 3);
    ckpt_storage_close(st);
    free(f);
    free(root);
}

#define MIB (1024ull * 1024)

/* The write policy's rules, one by one (write_policy.c). */
static void test_storage__write_plan(void)
{
    struct ckpt_write_plan p;
    struct ckpt_write_in in = { 20 * MIB, 8, 0, 0, 1, 0 };
    ckpt_write_plan(0, &in, &p);             /* many files: one PUT */
    CHECK(!p.multipart && p.nparts == 1 && p.part_size == 8 * MIB);
    in.files_in_flight = 3;                  /* too few: parts */
    ckpt_write_plan(0, &in, &p);
    CHECK(p.multipart && p.nparts == 3 && p.part_size == 8 * MIB);
    in.size = 8 * MIB;                       /* one part's worth */
    ckpt_write_plan(0, &in, &p);
    CHECK(!p.multipart && p.nparts == 1);
    in.size = 0;
    ckpt_write_plan(0, &in, &p);
    CHECK(!p.multipart && p.nparts == 1);
    in.files_in_flight = 32;
    in.size = CKPT_SINGLE_PUT_MAX;           /* the cut-off is inclusive */
    ckpt_write_plan(0, &in, &p);
    CHECK(!p.multipart);
    in.size = CKPT_SINGLE_PUT_MAX + 1;
    ckpt_write_plan(0, &in, &p);
    CHECK(p.multipart && p.nparts == 26);
    in.size = 64 * MIB;                      /* buffered: budget / 4 */
    in.streamed = 0;
    ckpt_write_plan(0, &in, &p);
    CHECK(p.multipart && p.nparts == 8);
    in.size = 24 * MIB;
    ckpt_write_plan(0, &in, &p);
    CHECK(!p.multipart);
    in.mem_budget = 64 * MIB;
    ckpt_write_plan(0, &in, &p);
    CHECK(p.multipart);
    in.streamed = 1;                         /* local DEST: ranges */
    ckpt_write_plan(1, &in, &p);
    CHECK(p.multipart && p.nparts == 3);
    in.min_part = 5 * MIB;                   /* the floor given */
    in.size = 1ull << 40;                    /* and 10,000 parts at most */
    ckpt_write_plan(0, &in, &p);
    CHECK(p.multipart && p.part_size == 105 * MIB && p.nparts <= 10000);
}

/* An object its writer assembles in memory (unshard outputs): one PUT
 * up to CKPT_SINGLE_PUT_MAX when it fits the room given, even with one
 * file in flight; larger, or beyond the room, multipart. */
static void test_storage__write_plan_assembled(void)
{
    struct ckpt_write_plan p;
    struct ckpt_write_in in = { .size = 34 * MIB, .files_in_flight = 1,
                                .min_part = 8 * MIB,
                                .mem_budget = 96 * MIB, .assembled = 1 };
    ckpt_write_plan(0, &in, &p);
    CHECK(!p.multipart && p.nparts == 1);
    in.assembled = 0;                        /* one file in flight: parts */
    ckpt_write_plan(0, &in, &p);
    CHECK(p.multipart && p.nparts == 5);
    in.assembled = 1;
    in.size = 96 * MIB;                      /* the room is inclusive */
    ckpt_write_plan(0, &in, &p);
    CHECK(!p.multipart);
    in.size = 96 * MIB + 1;
    ckpt_write_plan(0, &in, &p);
    CHECK(p.multipart && p.nparts == 13);
    in.mem_budget = 1ull << 30;              /* room, but above the cut-off */
    in.size = CKPT_SINGLE_PUT_MAX;
    ckpt_write_plan(0, &in, &p);
    CHECK(!p.multipart);
    in.size = CKPT_SINGLE_PUT_MAX + 1;
    ckpt_write_plan(0, &in, &p);
    CHECK(p.multipart && p.nparts == 26);
    in.size = 34 * MIB;                      /* local DEST: ranges */
    ckpt_write_plan(1, &in, &p);
    CHECK(p.multipart && p.nparts == 5);
}

struct membody {
    const char *p;
    int calls;
};

static int mem_body(void *ud, uint64_t off, void *buf, size_t len,
                    struct ckpt_err *err)
{
    struct membody *m = ud;
    (void)err;
    m->calls++;
    memcpy(buf, m->p + off, len);
    return 0;
}

static int fail_body(void *ud, uint64_t off, void *buf, size_t len,
                     struct ckpt_err *err)
{
    (void)ud;
    (void)off;
    (void)buf;
    (void)len;
    return ckpt_err_set(err, CKPT_EIO, "source gone");
}

/* A local streamed PUT lands whole, hashed on the way; bytes that differ
 * from the MD5 given, or a body that fails, leave nothing behind. */
static void test_storage__put_stream_local(void)
{
    struct ckpt_storage *st = local();
    struct ckpt_err err;
    char *root = ckpt_path_join(test_tmpdir(), "stream");
    char *f = ckpt_path_join(root, "o.bin");
    size_t n = 3 * 1024 * 1024 + 5;
    char *data = malloc(n);
    for (size_t i = 0; i < n; i++)
        data[i] = (char)(i * 7 + 3);
    unsigned char md5[16], bad[16];
    EVP_Digest(data, n, md5, NULL, EVP_md5(), NULL);
    memcpy(bad, md5, 16);
    bad[0] ^= 1;
    struct membody m = { data, 0 };
    CHECK(ckpt_storage_put_stream(st, f, n, mem_body, &m, bad, NULL, 0, NULL,
                                  &err) == -1);
    CHECK_EQ(err.code, CKPT_EIO);
    CHECK(ckpt_storage_list(st, root, CKPT_LIST_RECURSIVE, collect, NULL,
                            &err) == 0);
    CHECK_STR(sorted_listing(), "");
    CHECK(ckpt_storage_put_stream(st, f, n, fail_body, NULL, md5, NULL, 0,
                                  NULL, &err) == -1);
    CHECK_STR(err.msg, "source gone");
    CHECK(ckpt_storage_list(st, root, CKPT_LIST_RECURSIVE, collect, NULL,
                            &err) == 0);
    CHECK_STR(sorted_listing(), "");
    m.calls = 0;
    CHECK(ckpt_storage_put_stream(st, f, n, mem_body, &m, md5, NULL, 0, NULL,
                                  &err) == 0);
    CHECK_EQ(m.calls, 4);                    /* 1 MiB at a time */
    char *back = malloc(n + 1);
    size_t got = 0;
    CHECK(ckpt_storage_read(st, f, 0, back, n + 1, &got, &err) == 0);
    CHECK(got == n && !memcmp(back, data, n));
    free(back);
    free(data);
    free(f);
    free(root);
    ckpt_storage_close(st);
}

static void file_ver(const char *path, struct ckpt_file_ver *v)
{
    struct ckpt_err err;
    CHECK(ckpt_file_ver_get(path, -1, v, &err) == 0);
}

static int file_is(const char *path, const char *data, size_t n)
{
    FILE *f = fopen(path, "rb");
    char *b = malloc(n + 1);
    size_t got = f ? fread(b, 1, n + 1, f) : 0;
    int same = f && got == n && !memcmp(b, data, n);
    if (f)
        fclose(f);
    free(b);
    return same;
}

/* put_file: a hard link where a file made in the directory would look
 * the same (with a set-group-ID directory's group), a copy checked
 * against the MD5 where a default ACL would shape a new file; never
 * in place when the file is not the version given, and no temporary
 * left. */
static void test_storage__put_file_local(void)
{
    struct ckpt_storage *st = local();
    struct ckpt_err err;
    char *root = ckpt_path_join(test_tmpdir(), "putfile");
    char *src = ckpt_path_join(root, "spool.bin");
    char *key = ckpt_path_join(root, "dest/a/b.bin");
    CHECK(ckpt_mkdirs(root, &err) == 0);
    size_t n = 3 * 1024 * 1024 + 5;
    char *data = malloc(n);
    for (size_t i = 0; i < n; i++)
        data[i] = (char)(i * 13 + 1);
    FILE *f = fopen(src, "wb");
    CHECK(f && fwrite(data, 1, n, f) == n);
    fclose(f);
    unsigned char md5[16];
    EVP_Digest(data, n, md5, NULL, EVP_md5(), NULL);
    struct ckpt_obj_meta meta;
    memset(&meta, 0, sizeof(meta));
    meta.mtime = 1600000000;
    struct ckpt_file_ver v;
    file_ver(src, &v);
    CHECK(ckpt_local_same_fs(src, key));
    CHECK(!ckpt_local_same_fs(src, "/proc/self"));
    /* Not the version given: nothing placed, nothing left. */
    struct ckpt_file_ver old = v;
    old.mtime_ns++;
    int linked = -1;
    CHECK(ckpt_storage_put_file(st, key, src, &old, md5, &meta, &linked,
                                &err) == -1);
    CHECK(strstr(err.msg, "changed while it was linked (modification "
                 "time differs)"));
    CHECK(ckpt_storage_list(st, root, CKPT_LIST_RECURSIVE, collect, NULL,
                            &err) == 0);
    CHECK_STR(sorted_listing(), "f:spool.bin:3145733;");
    CHECK(ckpt_storage_put_file(st, key, src, &v, md5, &meta, &linked,
                                &err) == 0);
    CHECK_EQ(linked, 1);
    struct stat a, b;
    CHECK(stat(src, &a) == 0 && stat(key, &b) == 0);
    CHECK(a.st_ino == b.st_ino && b.st_mtime == 1600000000);
    CHECK(file_is(key, data, n));
    /* A set-group-ID directory of another group: the link has its group
     * (only root may give a directory any group: elsewhere a SKIP line,
     * which scripts/test.sh counts). */
    char *sg = ckpt_path_join(root, "sgid");
    char *k2 = ckpt_path_join(sg, "c.bin");
    CHECK(mkdir(sg, 0775) == 0);
    if (geteuid() != 0) {
        printf("SKIP: test_storage put_file_local into a set-group-ID "
               "directory of another group (not root)\n");
    } else {
        CHECK(chown(sg, (uid_t)-1, 65534) == 0 && chmod(sg, 02775) == 0);
        file_ver(src, &v);
        CHECK(ckpt_storage_put_file(st, k2, src, &v, md5, &meta, &linked,
                                    &err) == 0);
        CHECK_EQ(linked, 1);
        CHECK(stat(k2, &b) == 0 && b.st_gid == 65534);
    }
    /* A default ACL: copied, and only with the MD5 given. */
    char *acl = ckpt_path_join(root, "acl");
    char *k3 = ckpt_path_join(acl, "d.bin");
    CHECK(mkdir(acl, 0755) == 0);
    /* version 2; USER_OBJ rwx, GROUP_OBJ r-x, OTHER r-x */
    static const unsigned char dacl[] = {
        2, 0, 0, 0, 0x01, 0, 7, 0, 0xff, 0xff, 0xff, 0xff,
        0x04, 0, 5, 0, 0xff, 0xff, 0xff, 0xff,
        0x20, 0, 5, 0, 0xff, 0xff, 0xff, 0xff };
    if (setxattr(acl, "system.posix_acl_default", dacl, sizeof(dacl),
                 0) == 0) {
        file_ver(src, &v);
        unsigned char bad[16];
        memcpy(bad, md5, 16);
        bad[3] ^= 1;
        CHECK(ckpt_storage_put_file(st, k3, src, &v, bad, &meta, &linked,
                                    &err) == -1);
        CHECK(strstr(err.msg, "changed since it was hashed (MD5 differs)"));
        CHECK(access(k3, F_OK) != 0);
        CHECK(ckpt_storage_put_file(st, k3, src, &v, md5, &meta, &linked,
                                    &err) == 0);
        CHECK_EQ(linked, 0);
        CHECK(stat(src, &a) == 0 && stat(k3, &b) == 0);
        CHECK(a.st_ino != b.st_ino && b.st_mtime == 1600000000);
        CHECK(file_is(k3, data, n));
        CHECK(ckpt_storage_list(st, acl, CKPT_LIST_RECURSIVE, collect, NULL,
                                &err) == 0);
        CHECK_STR(sorted_listing(), "f:d.bin:3145733;");
    } else {
        printf("  (no default ACL here: the copy path is not tested)\n");
    }
    free(acl);
    free(k3);
    free(sg);
    free(k2);
    free(data);
    free(key);
    free(src);
    free(root);
    ckpt_storage_close(st);
}

struct ra_reader {
    struct ckpt_storage *ra;
    const char *key;
    const char *data;
    size_t n;
    unsigned seed;
    int bad;
};

/* Random ranges, some across block edges and the end of the file. */
static void *ra_reads(void *arg)
{
    struct ra_reader *r = arg;
    char *buf = malloc(3 << 20);
    struct ckpt_err err;
    for (int i = 0; i < 300 && !r->bad; i++) {
        uint64_t off = (uint64_t)rand_r(&r->seed) % (r->n + 100);
        size_t len = (size_t)rand_r(&r->seed) % (i % 3 ? 70000 : 3 << 20);
        size_t got = 0, want = off >= r->n ? 0
                             : r->n - off < len ? r->n - off : len;
        if (ckpt_storage_read(r->ra, r->key, off, buf, len, &got, &err) ||
            got != want || (got && memcmp(buf, r->data + off, got)))
            r->bad = 1;
    }
    free(buf);
    return NULL;
}

/* The read-ahead view gives exactly the bytes of the file whatever the
 * ranges, from several threads, with fewer slots than the file has
 * blocks (eviction, fetches ahead dropped), and refuses writes. */
static void test_storage__readahead(void)
{
    struct ckpt_storage *st = local(), *ra;
    struct ckpt_err err;
    char *f = ckpt_path_join(test_tmpdir(), "ra.bin");
    size_t n = 5 * 1024 * 1024 + 123;
    char *data = malloc(n);
    for (size_t i = 0; i < n; i++)
        data[i] = (char)(i * 131 + (i >> 12));
    CHECK(ckpt_storage_put(st, f, data, n, &err) == 0);
    CHECK(ckpt_storage_open_readahead(&ra, st, 1 << 20, 1, 2, 2,
                                      &err) == -1);
    CHECK_EQ(err.code, CKPT_EUSAGE);
    CHECK(ckpt_storage_open_readahead(&ra, st, 1 << 20, 3, 2, 2, &err) == 0);
    struct ckpt_stat sb;
    CHECK(ckpt_storage_stat(ra, f, &sb, &err) == 0 && sb.size == n);
    char small[10];
    size_t got = 1;
    CHECK(ckpt_storage_read(ra, f, n, small, 10, &got, &err) == 0);
    CHECK_EQ(got, 0);
    CHECK(ckpt_storage_read(ra, f, n - 3, small, 10, &got, &err) == 0);
    CHECK(got == 3 && !memcmp(small, data + n - 3, 3));
    pthread_t th[4];
    struct ra_reader rr[4];
    for (int i = 0; i < 4; i++) {
        rr[i] = (struct ra_reader){ ra, f, data, n, 17u + (unsigned)i, 0 };
        pthread_create(&th[i], NULL, ra_reads, &rr[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ(rr[i].bad, 0);
    }
    CHECK(ckpt_storage_put(ra, f, "x", 1, &err) == -1);
    CHECK_EQ(err.code, CKPT_EUNSUPPORTED);
    CHECK(ckpt_storage_read(ra, "/nonexistent/x", 0, small, 10, &got,
                            &err) == -1);
    ckpt_storage_close(ra);
    /* No fetchers at all: reads on demand only. */
    CHECK(ckpt_storage_open_readahead(&ra, st, 1 << 20, 2, 0, 2, &err) == 0);
    rr[0] = (struct ra_reader){ ra, f, data, n, 5, 0 };
    ra_reads(&rr[0]);
    CHECK_EQ(rr[0].bad, 0);
    ckpt_storage_close(ra);
    ckpt_storage_close(st);
    free(data);
    free(f);
}

static void test_storage__delete_tree_never_follows_links(void)
{
    struct ckpt_storage *st = local();
    struct ckpt_err err;
    char cmd[2048];
    const char *t = test_tmpdir();
    snprintf(cmd, sizeof(cmd), "mkdir -p %s/outside %s/run/sub/deep && "
             "echo keep > %s/outside/precious && echo x > %s/run/sub/deep/f "
             "&& ln -s %s/outside %s/run/sub/linkdir && ln -s "
             "%s/outside/precious %s/run/linkfile", t, t, t, t, t, t, t, t);
    CHECK(system(cmd) == 0);
    char *run = ckpt_path_join(t, "run");
    CHECK(ckpt_storage_delete_tree(st, run, &err) == 0);
    struct ckpt_stat sb;
    CHECK(ckpt_storage_stat(st, run, &sb, &err) == -1);
    char *precious = ckpt_path_join(t, "outside/precious");
    CHECK(ckpt_storage_stat(st, precious, &sb, &err) == 0);
    /* deleting what is gone is success */
    CHECK(ckpt_storage_delete_tree(st, run, &err) == 0);
    ckpt_storage_close(st);
    free(run);
    free(precious);
}

/* Only regular files are opened for reading: a FIFO is refused at once
 * (opening it would wait for a writer forever), a symlink unless
 * followed, and a read of either through the storage fails naming it. */
static void test_storage__open_read_regular_only(void)
{
    struct ckpt_storage *st = local();
    struct ckpt_err err = CKPT_ERR_INIT;
    const char *t = test_tmpdir();
    char *file = ckpt_path_join(t, "or-file"), *fifo = ckpt_path_join(
        t, "or-fifo"), *link = ckpt_path_join(t, "or-link");
    CHECK(test_write_file(file, "abc", 3) == 0);
    CHECK(mkfifo(fifo, 0600) == 0);
    CHECK(symlink(file, link) == 0);
    int fd = ckpt_local_open_read(file, 0, &err);
    CHECK(fd >= 0);
    if (fd >= 0)
        close(fd);
    CHECK(ckpt_local_open_read(fifo, 0, &err) == -1);
    CHECK(err.code == CKPT_EUNSAFE && strstr(err.msg, "is a FIFO"));
    CHECK(ckpt_local_open_read(fifo, CKPT_OPEN_FOLLOW, &err) == -1);
    CHECK(ckpt_local_open_read(link, 0, &err) == -1);
    CHECK(strstr(err.msg, "is a symbolic link") != NULL);
    fd = ckpt_local_open_read(link, CKPT_OPEN_FOLLOW, &err);
    CHECK(fd >= 0);
    if (fd >= 0)
        close(fd);
    char buf[4];
    size_t got;
    CHECK(ckpt_storage_read(st, fifo, 0, buf, sizeof(buf), &got, &err) == -1);
    CHECK(strstr(err.msg, "is a FIFO") != NULL);
    ckpt_storage_close(st);
    free(file);
    free(fifo);
    free(link);
}

/* delete_below unlinks only below root's real path and on its
 * filesystem: a file reached through a link out of root stays (the link
 * to a file is root's own and goes); a file through a link that stays
 * inside root is deleted where it really is. */
static void test_storage__delete_below_stays_inside(void)
{
    struct ckpt_storage *st = local();
    struct ckpt_err err = CKPT_ERR_INIT;
    char cmd[2048];
    const char *t = test_tmpdir();
    snprintf(cmd, sizeof(cmd), "mkdir -p %s/db/out/d %s/db/src/real && "
             "echo o > %s/db/out/d/f && echo o > %s/db/out/g && "
             "echo i > %s/db/src/real/h && ln -s %s/db/out/d %s/db/src/ld && "
             "ln -s %s/db/out/g %s/db/src/lf && ln -s real %s/db/src/in",
             t, t, t, t, t, t, t, t, t, t);
    CHECK(system(cmd) == 0);
    char *src = ckpt_xasprintf("%s/db/src", t);
    char *a = ckpt_xasprintf("%s/ld/f", src), *b = ckpt_xasprintf(
        "%s/lf", src), *c = ckpt_xasprintf("%s/in/h", src);
    char *outf = ckpt_xasprintf("%s/db/out/d/f", t), *outg = ckpt_xasprintf(
        "%s/db/out/g", t), *inh = ckpt_xasprintf("%s/real/h", src);
    struct stat sb;
    CHECK(ckpt_storage_delete_below(st, src, a, &err) == -1);
    CHECK(err.code == CKPT_EUNSAFE && strstr(err.msg, "is outside"));
    CHECK(stat(outf, &sb) == 0);
    CHECK(ckpt_storage_delete_below(st, src, b, &err) == 0);
    CHECK(lstat(b, &sb) == -1 && stat(outg, &sb) == 0);
    CHECK(ckpt_storage_delete_below(st, src, c, &err) == 0);
    CHECK(stat(inh, &sb) == -1);
    /* gone already: success */
    CHECK(ckpt_storage_delete_below(st, src, c, &err) == 0);
    ckpt_storage_close(st);
    free(src);
    free(a);
    free(b);
    free(c);
    free(outf);
    free(outg);
    free(inh);
}

/* Only the keys given go; a file written meanwhile (not in the listing)
 * stays with the directories that hold it; empty directories go; a
 * symlinked directory swapped in is not followed. */
static void test_storage__delete_keys_exactly(void)
{
    struct ckpt_storage *st = local();
    struct ckpt_err err;
    char cmd[2048];
    const char *t = test_tmpdir();
    snprintf(cmd, sizeof(cmd), "mkdir -p %s/k/outside %s/k/run/step0 "
             "%s/k/run/empty/deeper %s/k/run/step1000 && echo a > "
             "%s/k/run/step0/model.pt && echo b > %s/k/run/config.yaml && "
             "echo new > %s/k/run/step1000/model.pt && echo keep > "
             "%s/k/outside/model.pt && ln -s ../outside %s/k/run/swapped",
             t, t, t, t, t, t, t, t, t);
    CHECK(system(cmd) == 0);
    char *run = ckpt_xasprintf("%s/k/run", t);
    char *keys[] = {
        ckpt_xasprintf("%s/step0/model.pt", run),
        ckpt_xasprintf("%s/config.yaml", run),
        ckpt_xasprintf("%s/swapped/model.pt", run), /* through a link */
        ckpt_xasprintf("%s/gone.txt", run),         /* already gone */
    };
    CHECK(ckpt_storage_delete_keys(st, run, keys, 4, &err) == -1);
    CHECK(strstr(err.msg, "swapped/model.pt") != NULL);
    CHECK(ckpt_storage_delete_keys(st, run, keys, 2, &err) == 0);
    char out[4096] = "";
    snprintf(cmd, sizeof(cmd), "cd %s/k && find . | LC_ALL=C sort | tr '\n' ' '"
             " > %s/k.out", t, t);
    CHECK(system(cmd) == 0);
    char *p = ckpt_xasprintf("%s/k.out", t);
    FILE *f = fopen(p, "r");
    CHECK(f && fgets(out, sizeof(out), f));
    if (f)
        fclose(f);
    CHECK_STR(out, ". ./outside ./outside/model.pt ./run ./run/step1000 "
                   "./run/step1000/model.pt ./run/swapped ");
    for (size_t i = 0; i < 4; i++)
        free(keys[i]);
    free(p);
    free(run);
    ckpt_storage_close(st);
}

struct deleter {
    struct ckpt_storage *st;
    const char *dir;
    int rc;
};

static void *delete_thread(void *arg)
{
    struct deleter *d = arg;
    struct ckpt_err err;
    d->rc = ckpt_storage_delete_tree(d->st, d->dir, &err);
    if (d->rc)
        fprintf(stderr, "  deleter: %s\n", err.msg);
    return NULL;
}

static void test_storage__concurrent_deleters(void)
{
    struct ckpt_storage *st = local();
    for (int round = 0; round < 5; round++) {
        char cmd[1024];
        char dir[512];
        snprintf(dir, sizeof(dir), "%s/cc%d", test_tmpdir(), round);
        snprintf(cmd, sizeof(cmd), "for i in $(seq 30); do mkdir -p %s/d$i/e"
                 " && touch %s/d$i/e/f1 %s/d$i/e/f2 %s/d$i/g; done", dir, dir,
                 dir, dir);
        CHECK(system(cmd) == 0);
        pthread_t th[4];
        struct deleter d[4];
        for (int i = 0; i < 4; i++) {
            d[i] = (struct deleter){ st, dir, -1 };
            pthread_create(&th[i], NULL, delete_thread, &d[i]);
        }
        for (int i = 0; i < 4; i++) {
            pthread_join(th[i], NULL);
            CHECK_EQ(d[i].rc, 0);
        }
        CHECK(access(dir, F_OK) != 0);
    }
    ckpt_storage_close(st);
}

/* A plain tar's members read in place: stat, one-level and recursive
 * listings, reads clipped to the member, writes refused. The "archive"
 * is any file: only offsets matter. */
static void test_storage__tar_members(void)
{
    char dir[] = "/tmp/ckpt-test-members-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char *arc = ckpt_path_join(dir, "run.tar");
    FILE *f = fopen(arc, "wb");
    fputs("hdrAAAAhdrBBBBBBhdrCC", f);
    fclose(f);
    const struct ckpt_member v[] = {
        { "s/e/b", 10, 6 }, { "s/a", 3, 4 }, { "c", 19, 2 },
    };
    struct ckpt_storage *base = local(), *st = NULL;
    struct ckpt_err err;
    struct ckpt_stat sb;
    CHECK(ckpt_storage_open_members(&st, base, arc, v, 3, &err) == 0);
    char *k = ckpt_path_join(arc, "s/e/b");
    CHECK(ckpt_storage_stat(st, k, &sb, &err) == 0);
    CHECK_EQ(sb.type, CKPT_ENTRY_FILE);
    CHECK_EQ(sb.size, 6);
    char buf[16] = {0};
    size_t got;
    CHECK(ckpt_storage_read(st, k, 2, buf, sizeof(buf), &got, &err) == 0);
    CHECK_EQ(got, 4);
    CHECK(!memcmp(buf, "BBBB", 4));
    CHECK(ckpt_storage_read(st, k, 6, buf, 4, &got, &err) == 0);
    CHECK_EQ(got, 0);
    free(k);
    k = ckpt_path_join(arc, "s/e");
    CHECK(ckpt_storage_stat(st, k, &sb, &err) == 0);
    CHECK_EQ(sb.type, CKPT_ENTRY_DIR);
    free(k);
    k = ckpt_path_join(arc, "s/x");
    CHECK(ckpt_storage_stat(st, k, &sb, &err) == -1);
    CHECK_EQ(err.code, CKPT_ENOTFOUND);
    CHECK(ckpt_storage_stat(st, "/elsewhere/s/a", &sb, &err) == -1);
    ckpt_buf_release(&listed);
    CHECK(ckpt_storage_list(st, arc, 0, collect, NULL, &err) == 0);
    CHECK_STR(listed.ptr, "f:c:2;d:s:0;");
    ckpt_buf_release(&listed);
    free(k);
    k = ckpt_path_join(arc, "s");
    CHECK(ckpt_storage_list(st, k, CKPT_LIST_RECURSIVE, collect, NULL,
                            &err) == 0);
    CHECK_STR(listed.ptr, "f:a:4;f:e/b:6;");
    ckpt_buf_release(&listed);
    CHECK(ckpt_storage_put(st, k, "x", 1, &err) == -1);
    CHECK_EQ(err.code, CKPT_EUNSUPPORTED);
    CHECK(ckpt_storage_delete_tree(st, k, &err) == -1);
    free(k);
    ckpt_storage_close(st);
    ckpt_storage_close(base);
    unlink(arc);
    rmdir(dir);
    free(arc);
}

/* Which ETags are content hashes (MD5, multipart "-N"): upload's skip,
 * the unshard sink's and process's checks all ask this one question. */
static void test_storage__etag_is_md5(void)
{
    static const struct { const char *etag; int md5, multi; } c[] = {
        { "d41d8cd98f00b204e9800998ecf8427e", 1, 0 },
        { "D41D8CD98F00B204E9800998ECF8427E", 1, 0 },
        { "d41d8cd98f00b204e9800998ecf8427e-12", 1, 1 },
        { "d41d8cd98f00b204e9800998ecf8427", 0, 0 },     /* 31 digits */
        { "d41d8cd98f00b204e9800998ecf8427e0", 0, 0 },   /* 33 */
        { "d41d8cd98f00b204e9800998ecf8427g", 0, 0 },
        { "d41d8cd98f00b204e9800998ecf8427e:1", 0, 0 },
        { "1700000000000001", 0, 0 },                    /* GCS generation */
        { "", 0, 0 },
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        int multi = -1;
        CHECK_EQ(ckpt_etag_is_md5(c[i].etag, &multi), c[i].md5);
        CHECK_EQ(multi, c[i].multi);
    }
}

TEST_MAIN(T(test_storage__loc_parse), T(test_storage__local_ops),
          T(test_storage__tar_members),
          T(test_storage__writer_atomic),
          T(test_storage__write_plan), T(test_storage__write_plan_assembled),
          T(test_storage__put_stream_local), T(test_storage__put_file_local),
          T(test_storage__etag_is_md5),
          T(test_storage__readahead),
          T(test_storage__delete_tree_never_follows_links),
          T(test_storage__delete_keys_exactly),
          T(test_storage__open_read_regular_only),
          T(test_storage__delete_below_stays_inside),
          T(test_storage__concurrent_deleters))
