#include <sys/stat.h>

#include <openssl/evp.h>

#include "ckpt/archive.h"
#include "ckpt/buf.h"
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

static int sh(const char *fmt, const char *a)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), fmt, a, a, a, a);
    return system(cmd);
}

/* A small run tree in TMP/src/run1 with known contents. */
static const char *make_tree(void)
{
    static char dir[512];
    snprintf(dir, sizeof(dir), "%s/src", test_tmpdir());
    sh("mkdir -p %s/run1/step5 %s/run1/wandb && printf 'a: 1\\n' > "
       "%s/run1/config.yaml && head -c 100000 /dev/urandom > "
       "%s/run1/step5/model.pt", dir);
    return dir;
}

/* List an archive; return "path:size;..." and check content of
 * config.yaml when read through the archive. */
static char *listing(const char *path, int *cfg_ok, int *offsets_ok,
                     uint64_t *fetched, uint64_t *size)
{
    struct ckpt_storage *st = local();
    struct ckpt_archive *a;
    struct ckpt_err err;
    struct ckpt_buf out = CKPT_BUF_INIT;
    *cfg_ok = 0;
    *offsets_ok = 1;
    if (ckpt_archive_open(&a, st, path, &err) != 0) {
        fprintf(stderr, "open: %s\n", err.msg);
        ckpt_storage_close(st);
        return ckpt_buf_detach(&out, NULL);
    }
    struct ckpt_archive_entry e;
    int rc;
    while ((rc = ckpt_archive_next(a, &e, &err)) == 1) {
        if (e.type != CKPT_ENTRY_FILE)
            continue;
        ckpt_buf_addf(&out, "%s:%llu;", e.path, (unsigned long long)e.size);
        if (e.data_offset != CKPT_NO_OFFSET) {
            /* The offset must point at the member's bytes. */
            char b[8];
            size_t n;
            ckpt_storage_read(st, path, e.data_offset, b, 5, &n, &err);
            if (ckpt_str_endswith(e.path, "config.yaml") &&
                (n != 5 || memcmp(b, "a: 1\n", 5) != 0))
                *offsets_ok = 0;
        }
        if (ckpt_str_endswith(e.path, "config.yaml")) {
            char b[64];
            size_t n;
            ckpt_archive_read(a, b, sizeof(b), &n, &err);
            *cfg_ok = n == 5 && memcmp(b, "a: 1\n", 5) == 0;
        }
    }
    CHECK_EQ(rc, 0);
    *fetched = ckpt_archive_bytes_fetched(a);
    *size = ckpt_archive_file_size(a);
    ckpt_archive_close(a);
    ckpt_storage_close(st);
    return ckpt_buf_detach(&out, NULL);
}

static void check_kind(const char *ext, const char *cmd)
{
    const char *src = make_tree();
    char path[600];
    snprintf(path, sizeof(path), "%s/run1%s", test_tmpdir(), ext);
    char full[1500];
    snprintf(full, sizeof(full), "cd %s && %s %s run1 >/dev/null", src, cmd,
             path);
    CHECK(system(full) == 0);
    int cfg_ok, off_ok;
    uint64_t fetched, size;
    char *l = listing(path, &cfg_ok, &off_ok, &fetched, &size);
    /* zip lists in its own order; tar in insertion order (tar sorts?) */
    CHECK(strstr(l, "run1/config.yaml:5;") != NULL);
    CHECK(strstr(l, "run1/step5/model.pt:100000;") != NULL);
    CHECK(cfg_ok);
    CHECK(off_ok);
    free(l);
}

static void test_archive__tar(void) { check_kind(".tar", "tar cf"); }
static void test_archive__tar_gz(void) { check_kind(".tar.gz", "tar czf"); }
static void test_archive__tar_bz2(void) { check_kind(".tar.bz2", "tar cjf"); }
static void test_archive__tar_xz(void) { check_kind(".tar.xz", "tar cJf"); }
static void test_archive__tar_zst(void)
{
    check_kind(".tar.zst", "tar --zstd -cf");
}
static void test_archive__zip(void)
{
    char cmd[600];
    /* zip takes the archive name first. */
    snprintf(cmd, sizeof(cmd), "zip -qr");
    check_kind(".zip", cmd);
}

static void test_archive__plain_tar_skips_data(void)
{
    /* 40 members of 256 KiB: reading headers only must fetch a tiny
     * fraction of the file. */
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "cd %s && mkdir -p big && for i in $(seq 40);"
             " do head -c 262144 /dev/zero > big/f$i; done && tar cf big.tar"
             " big", test_tmpdir());
    CHECK(system(cmd) == 0);
    char path[600];
    snprintf(path, sizeof(path), "%s/big.tar", test_tmpdir());
    int cfg_ok, off_ok;
    uint64_t fetched, size;
    char *l = listing(path, &cfg_ok, &off_ok, &fetched, &size);
    CHECK(strstr(l, "big/f40:262144;") != NULL);
    CHECK(size > 40 * 262144);
    fprintf(stderr, "  fetched %llu of %llu bytes\n",
            (unsigned long long)fetched, (unsigned long long)size);
    CHECK(fetched * 100 < size);
    free(l);
}

static const char *evil_dir(void)
{
    static char dir[512];
    if (!dir[0]) {
        snprintf(dir, sizeof(dir), "%s/evil", test_tmpdir());
        char cmd[1024];
        snprintf(cmd, sizeof(cmd), "python3 ../tests/support/make_archives.py"
                 " %s 2>/dev/null || python3 support/make_archives.py %s",
                 dir, dir);
        CHECK(system(cmd) == 0);
    }
    return dir;
}

/* Walk an archive to its end; return the error message or "". */
static char *walk_error(const char *name, int *code)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/%s", evil_dir(), name);
    struct ckpt_storage *st = local();
    struct ckpt_archive *a;
    struct ckpt_err err = CKPT_ERR_INIT;
    int rc = ckpt_archive_open(&a, st, path, &err);
    if (rc == 0) {
        struct ckpt_archive_entry e;
        while ((rc = ckpt_archive_next(a, &e, &err)) == 1) {
            char b[4096];
            size_t n;
            do {
                if (ckpt_archive_read(a, b, sizeof(b), &n, &err) != 0) {
                    rc = -1;
                    break;
                }
            } while (n);
            if (rc < 0)
                break;
        }
        ckpt_archive_close(a);
    }
    ckpt_storage_close(st);
    *code = err.code;
    /* strip the directory from the message */
    const char *m = strstr(err.msg, name);
    return ckpt_xstrdup(rc < 0 ? (m ? m : err.msg) : "");
}

static void test_archive__unsafe_members(void)
{
    int code;
    char *m;
    m = walk_error("dotdot.tar", &code);
    CHECK_STR(m, "dotdot.tar: member 'run/../evil' has a '..' component");
    CHECK_EQ(code, CKPT_EUNSAFE);
    free(m);
    m = walk_error("absolute.tar", &code);
    CHECK_STR(m, "absolute.tar: member '/etc/evil' has an absolute path");
    free(m);
    m = walk_error("symlink.tar", &code);
    CHECK_STR(m, "symlink.tar: link 'run/link' points outside the archive "
                 "('../../outside')");
    free(m);
    m = walk_error("hardlink.tar", &code);
    CHECK_STR(m, "hardlink.tar: link 'run/hard' points outside the archive "
                 "('../x')");
    free(m);
    m = walk_error("okaylink.tar", &code);
    CHECK_STR(m, "");
    free(m);
}

static void test_archive__corrupt(void)
{
    int code;
    char *m = walk_error("truncated.tar.gz", &code);
    CHECK(ckpt_str_startswith(m, "truncated.tar.gz: "));
    CHECK_EQ(code, CKPT_EFORMAT);
    free(m);
    m = walk_error("garbage.tar", &code);
    CHECK(ckpt_str_startswith(m, "garbage.tar: "));
    CHECK_EQ(code, CKPT_EFORMAT);
    free(m);
}

static const char *damaged_dir(void)
{
    static char dir[512];
    if (!dir[0]) {
        snprintf(dir, sizeof(dir), "%s/damaged", test_tmpdir());
        char cmd[1024];
        snprintf(cmd, sizeof(cmd), "python3 support/make_damaged.py %s",
                 dir);
        CHECK(system(cmd) == 0);
    }
    return dir;
}

/* List name (salvage or not): "path;path;...|DAMAGE" ("-" for none),
 * or "ERROR: msg". If grow, append 512 zero bytes to the file before the
 * end is reached (a writer still at work). */
static char *walk_damage(const char *name, int salvage, int grow)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/%s", damaged_dir(), name);
    struct ckpt_storage *st = local();
    struct ckpt_archive *a;
    struct ckpt_err err = CKPT_ERR_INIT;
    struct ckpt_buf out = CKPT_BUF_INIT;
    int rc = ckpt_archive_open(&a, st, path, &err);
    if (rc == 0) {
        ckpt_archive_set_salvage(a, salvage);
        struct ckpt_archive_entry e;
        while ((rc = ckpt_archive_next(a, &e, &err)) == 1) {
            if (e.type == CKPT_ENTRY_DIR)
                continue;
            ckpt_buf_addf(&out, "%s%s%s;", e.path,
                          e.hardlink ? "=" : "",
                          e.hardlink ? e.hardlink : "");
            if (grow && !strcmp(e.path, "run/step100/model.pt")) {
                FILE *f = fopen(path, "ab");
                CHECK(f != NULL);
                static const char z[512];
                fwrite(z, 1, sizeof(z), f);
                fclose(f);
            }
        }
        if (rc == 0)
            ckpt_buf_addf(&out, "|%s", ckpt_archive_damage(a)
                                       ? ckpt_archive_damage(a) : "-");
        ckpt_archive_close(a);
    }
    if (rc < 0) {
        const char *m = strstr(err.msg, name);
        ckpt_buf_reset(&out);
        ckpt_buf_addf(&out, "ERROR: %s", m ? m : err.msg);
    }
    ckpt_storage_close(st);
    return ckpt_buf_detach(&out, NULL);
}

#define WANDB "run/config.yaml;run/wandb/f0;run/wandb/f1;run/wandb/f2;" \
              "run/wandb/f3;run/wandb/f4;run/wandb/f5;"
#define NOEOA "no end-of-archive marker (the archive is cut short, or " \
              "still being written)"

static void check_walk(const char *name, int salvage, const char *want)
{
    char *got = walk_damage(name, salvage, 0);
    CHECK_STR(got, want);
    free(got);
}

static void test_archive__proper_end(void)
{
    check_walk("good.tar", 0, WANDB "run/step100/model.pt;|-");
    check_walk("cut-ok.tar", 0, WANDB "run/step100/model.pt;|" NOEOA);
    check_walk("cut.tar", 0, WANDB "|" NOEOA);
    check_walk("cut.tar.gz", 0, WANDB "|" NOEOA);
    check_walk("partial.tar", 0, WANDB "|" NOEOA);
    check_walk("badcrc.tar.gz", 0, WANDB "|gzip checksum mismatch (CRC-32 "
               "or length in the trailer does not match the data)");
    check_walk("tail.tar.gz", 0, WANDB "|100 bytes after the end of the "
               "compressed stream");
    /* strict: what follows the end is not listed, but reported */
    check_walk("cat.tar", 0, WANDB "|data after the end-of-archive marker "
               "at offset 35328");
    check_walk("hardlink.tar", 0, "run/config.yaml;run/blob/w.bin;"
               "run/step100/model.pt=run/blob/w.bin;|-");
    char *got = walk_damage("good.tar", 0, 1);
    CHECK_STR(got, WANDB "run/step100/model.pt;|the archive changed while "
              "it was read");
    free(got);
}

static void test_archive__salvage(void)
{
    /* without salvage, damage inside the archive is an error */
    check_walk("garbled.tar", 0, "ERROR: garbled.tar: Damaged tar archive");
    /* with it, reading goes on as `tar -i` does */
    check_walk("garbled.tar", 1, "run/config.yaml;run/wandb/f0;run/wandb/f2;"
               "run/wandb/f3;run/wandb/f4;run/wandb/f5;run/step100/model.pt;"
               "|damaged header at offset 7168");
    /* a zeroed header is an end-of-archive block to libarchive */
    check_walk("zhdr.tar", 0, "run/config.yaml;run/wandb/f0;|data after the "
               "end-of-archive marker at offset 7168");
    check_walk("hole.tar", 1, "run/config.yaml;run/wandb/f0;run/wandb/f2;"
               "run/wandb/f3;run/wandb/f4;run/wandb/f5;run/step100/model.pt;"
               "|data after the end-of-archive marker at offset 7168");
    check_walk("cat.tar", 1, WANDB WANDB "run/step100/model.pt;|data after "
               "the end-of-archive marker at offset 35328");
    check_walk("junk.tar", 1, WANDB "|data after the end-of-archive marker "
               "at offset 35328");
    /* a member cut short: the listing ends there */
    check_walk("cut-ok.tar", 1, WANDB "run/step100/model.pt;|" NOEOA);
}

static void test_archive__names(void)
{
    CHECK_EQ(ckpt_archive_kind_of("a/run.tar.gz"), CKPT_ARCHIVE_TAR_GZ);
    CHECK_EQ(ckpt_archive_kind_of("run.tgz"), CKPT_ARCHIVE_TAR_GZ);
    CHECK_EQ(ckpt_archive_kind_of("run.tar"), CKPT_ARCHIVE_TAR);
    CHECK_EQ(ckpt_archive_kind_of("run.tar.zst"), CKPT_ARCHIVE_TAR_ZST);
    CHECK_EQ(ckpt_archive_kind_of("run.zip"), CKPT_ARCHIVE_ZIP);
    CHECK_EQ(ckpt_archive_kind_of("run.gz"), CKPT_ARCHIVE_NONE);
    CHECK_EQ(ckpt_archive_kind_of("run"), CKPT_ARCHIVE_NONE);
    char *s = ckpt_archive_stem("x/123456.tar.zst");
    CHECK_STR(s, "123456");
    free(s);
}

/* Every member as ckpt_archive_next gives it, with its data:
 * "path:size:type:link=data;..." ("" when it cannot be opened). */
static char *replayed(struct ckpt_storage *st, const char *path)
{
    struct ckpt_archive *a;
    struct ckpt_err err = CKPT_ERR_INIT;
    struct ckpt_buf out = CKPT_BUF_INIT;
    ckpt_buf_addstr(&out, "");
    if (ckpt_archive_open(&a, st, path, &err) != 0)
        return ckpt_buf_detach(&out, NULL);
    struct ckpt_archive_entry e;
    int rc;
    while ((rc = ckpt_archive_next(a, &e, &err)) == 1) {
        ckpt_buf_addf(&out, "%s:%llu:%d:%s=", e.path,
                      (unsigned long long)e.size, (int)e.type,
                      e.hardlink ? e.hardlink : "-");
        char b[256];
        size_t n;
        while (ckpt_archive_read(a, b, sizeof(b), &n, &err) == 0 && n)
            ckpt_buf_add(&out, b, n);
        ckpt_buf_addch(&out, ';');
    }
    CHECK_EQ(rc, 0);
    CHECK(ckpt_archive_damage(a) == NULL);
    ckpt_archive_close(a);
    return ckpt_buf_detach(&out, NULL);
}

static int entries(const char *dir)
{
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A %s)\"", dir);
    return system(cmd) != 0;
}

/* A spool replays the archive exactly (a name stored twice, a hard link,
 * a file where a directory later stands) and is a tree only when every
 * member found its own path; a changed archive is read again; a damaged
 * one or one over budget leaves nothing. */
static void test_archive__spool_replay(void)
{
    char d[600], tmp[700], a1[700], a2[700], cut[700];
    snprintf(d, sizeof(d), "%s/spool", test_tmpdir());
    snprintf(tmp, sizeof(tmp), "%s/tmp", d);
    snprintf(a1, sizeof(a1), "%s/dup.tar.gz", d);
    snprintf(a2, sizeof(a2), "%s/clash.tar.zst", d);
    snprintf(cut, sizeof(cut), "%s/cut.tar.gz", d);
    CHECK(sh("rm -rf %s && mkdir -p %s/s/run/dir %s/tmp && cd %s/s && "
             "printf one > run/a && printf x1 > run/dir/x && ln run/a run/h "
             "&& tar cf ../dup.tar run && printf two! > run/a && "
             "tar rf ../dup.tar run/a && gzip ../dup.tar", d) == 0);
    CHECK(sh("cd %s/s && rm -rf run && mkdir run && printf c > run/c && "
             "tar cf ../clash.tar run && rm run/c && mkdir run/c && "
             "printf d > run/c/d && tar rf ../clash.tar run/c && "
             "zstd -q --rm ../clash.tar && head -c $(($(stat -c %%s "
             "../dup.tar.gz) / 2)) ../dup.tar.gz > ../cut.tar.gz", d) == 0);
    struct ckpt_storage *st = local();
    const char *arcs[] = { a1, a2 };
    for (int i = 0; i < 2; i++) {
        char *want = replayed(st, arcs[i]);
        CHECK(strstr(want, i ? "run/c:1:0:-=c;" : "run/a:4:0:-=two!;"));
        struct ckpt_archive_spool *sp = NULL;
        struct ckpt_spool_cfg cfg = { tmp, NULL, NULL, NULL, 0 };
        struct ckpt_err err = CKPT_ERR_INIT;
        CHECK_EQ(ckpt_archive_spool(&sp, st, arcs[i], &cfg, &err), 0);
        if (!sp)
            continue;
        CHECK(ckpt_archive_spool_bytes(sp) == (i ? 2u : 9u));
        ckpt_archive_spool_attach(sp);
        char *got = replayed(st, arcs[i]);
        CHECK_STR(got, want);
        char *root = ckpt_archive_spool_root(st, arcs[i]);
        CHECK(i ? root == NULL : root != NULL);
        if (root) {
            /* the later copy of run/a stands at its own path */
            char *a = ckpt_path_join(root, "run/a");
            FILE *f = fopen(a, "rb");
            char b[16];
            size_t n = f ? fread(b, 1, sizeof(b), f) : 0;
            CHECK(n == 4 && !memcmp(b, "two!", 4));
            if (f)
                fclose(f);
            free(a);
        }
        free(root);
        /* Changed (another mtime): read again, the spool is no tree. */
        CHECK(sh("touch -d '2 days ago' %s", arcs[i]) == 0);
        root = ckpt_archive_spool_root(st, arcs[i]);
        CHECK(root == NULL);
        free(root);
        free(got);
        got = replayed(st, arcs[i]);
        CHECK_STR(got, want);
        free(got);
        ckpt_archive_spool_free(sp);
        CHECK(!entries(tmp));
        free(want);
    }
    const char *bad[] = { cut, a1 };
    for (int i = 0; i < 2; i++) {
        struct ckpt_archive_spool *sp = NULL;
        struct ckpt_spool_budget b;
        ckpt_spool_budget_init(&b, tmp, 3);
        struct ckpt_spool_cfg cfg = { tmp, i ? &b : NULL, NULL, NULL, 0 };
        struct ckpt_err err = CKPT_ERR_INIT;
        CHECK_EQ(ckpt_archive_spool(&sp, st, bad[i], &cfg, &err), -1);
        CHECK(sp == NULL);
        if (i)
            CHECK_STR(err.msg, "its members pass --spool-limit 3 B");
        else
            CHECK(*err.msg != 0);
        CHECK_EQ(b.used, 0);    /* a failed spool gives back all it took */
        CHECK_EQ(b.refused, i);
        CHECK(!entries(tmp));
        ckpt_spool_budget_destroy(&b);
    }
    ckpt_storage_close(st);
}

/* A hashing spool hands each file member over as its spooled file, with
 * the MD5 of its bytes (the earlier copy of a name stored twice too, moved
 * aside); never a hard link member or one being read; a spooled file
 * written since is told apart. Without hashing, nothing is handed over. */
static void test_archive__spooled_files(void)
{
    char d[600], tmp[700], arc[700];
    snprintf(d, sizeof(d), "%s/spooled", test_tmpdir());
    snprintf(tmp, sizeof(tmp), "%s/tmp", d);
    snprintf(arc, sizeof(arc), "%s/dup.tar.zst", d);
    CHECK(sh("rm -rf %s && mkdir -p %s/s/run/dir %s/tmp && cd %s/s && "
             "printf one > run/a && printf x1 > run/dir/x && ln run/a run/h "
             "&& tar cf ../dup.tar --no-recursion run run/a run/dir run/h && "
             "printf two! > run/a && tar rf ../dup.tar run/a && "
             "zstd -q --rm ../dup.tar", d) == 0);
    struct ckpt_storage *st = local();
    for (int hash = 0; hash < 2; hash++) {
        struct ckpt_archive_spool *sp = NULL;
        struct ckpt_spool_cfg cfg = { tmp, NULL, NULL, NULL, hash };
        struct ckpt_err err = CKPT_ERR_INIT;
        CHECK_EQ(ckpt_archive_spool(&sp, st, arc, &cfg, &err), 0);
        if (!sp)
            continue;
        ckpt_archive_spool_attach(sp);
        struct ckpt_archive *a;
        CHECK_EQ(ckpt_archive_open(&a, st, arc, &err), 0);
        struct ckpt_archive_entry e;
        struct ckpt_buf got = CKPT_BUF_INIT;
        char *xfile = NULL;
        while (ckpt_archive_next(a, &e, &err) == 1) {
            struct ckpt_spooled f;
            int is = ckpt_archive_spooled(a, &f);
            ckpt_buf_addf(&got, "%s:%d;", e.path, is);
            if (!is)
                continue;
            CHECK_EQ(ckpt_spooled_same(&f, &err), 0);
            char b[64];
            size_t n = 0;
            CHECK_EQ(ckpt_archive_read(a, b, sizeof(b), &n, &err), 0);
            unsigned char md5[16];
            EVP_Digest(b, n, md5, NULL, EVP_md5(), NULL);
            CHECK(f.ver.size == n && !memcmp(md5, f.md5, 16));
            struct ckpt_spooled again;
            CHECK_EQ(ckpt_archive_spooled(a, &again), 0);   /* being read */
            if (!xfile)
                xfile = f.path;
            else
                free(f.path);
        }
        ckpt_archive_close(a);
        CHECK_STR(got.ptr, hash ? "run:0;run/a:1;run/dir:0;run/h:0;"
                                  "run/a:1;"
                                : "run:0;run/a:0;run/dir:0;run/h:0;"
                                  "run/a:0;");
        if (xfile) {
            struct ckpt_spooled f;
            memset(&f, 0, sizeof(f));
            f.path = xfile;
            CHECK_EQ(ckpt_file_ver_get(xfile, -1, &f.ver, &err), 0);
            CHECK(f.ver.size == 3);
            CHECK_EQ(ckpt_spooled_same(&f, &err), 0);
            CHECK(sh("printf 2 >> %s", xfile) == 0);
            CHECK_EQ(ckpt_spooled_same(&f, &err), -1);
            CHECK(strstr(err.msg, "changed since the archive was spooled "
                         "(size differs)"));
            free(xfile);
        }
        ckpt_buf_release(&got);
        ckpt_archive_spool_free(sp);
        CHECK(!entries(tmp));
    }
    ckpt_storage_close(st);
}

TEST_MAIN(T(test_archive__tar), T(test_archive__tar_gz),
          T(test_archive__tar_bz2), T(test_archive__tar_xz),
          T(test_archive__tar_zst), T(test_archive__zip),
          T(test_archive__plain_tar_skips_data), T(test_archive__unsafe_members),
          T(test_archive__corrupt), T(test_archive__proper_end),
          T(test_archive__salvage), T(test_archive__names),
          T(test_archive__spool_replay), T(test_archive__spooled_files))
