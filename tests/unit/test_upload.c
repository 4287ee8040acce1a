/*
 * test_upload.c - the upload engine's pure parts: part sizing, ETag forms,
 * the journal (what survives a crash, what a rerun sees), the W&B map.
 */
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <stdio.h>
#include <unistd.h>

#include "ckpt/text.h"
#include "ckpt/upload.h"
#include "ckpt/util.h"
#include "ckpt/wandb.h"
#include "test.h"
#include "upload/upload_int.h"

static void test_upload__part_size(void)
{
    CHECK_EQ(up_part_size_for(1, 0), 8 * MIB);
    CHECK_EQ(up_part_size_for(100 * MIB, 0), 8 * MIB);
    CHECK_EQ(up_part_size_for(100 * MIB, 5 * MIB), 5 * MIB);
    /* 10,000 parts at most, whole MiB, so every part but the last is
     * equal: 1 TiB needs 105 MiB parts (104.9 rounded up). */
    CHECK_EQ(up_part_size_for(1ull << 40, 0), 105 * MIB);
    CHECK_EQ(up_part_size_for(5ull << 40, 0), 525 * MIB);
    CHECK(up_parts_for(5ull << 40, up_part_size_for(5ull << 40, 0)) <= 10000);
    CHECK_EQ(up_parts_for(0, 8 * MIB), 1);
    CHECK_EQ(up_parts_for(8 * MIB, 8 * MIB), 1);
    CHECK_EQ(up_parts_for(8 * MIB + 1, 8 * MIB), 2);
}

static void test_upload__etags(void)
{
    unsigned char d[2][16];
    char hex[33], comp[48];
    up_md5_buf("", 0, d[0]);
    ckpt_hex_encode(d[0], 16, hex);
    CHECK_STR(hex, "d41d8cd98f00b204e9800998ecf8427e");
    up_md5_buf("abc", 3, d[1]);
    ckpt_hex_encode(d[1], 16, hex);
    CHECK_STR(hex, "900150983cd24fb0d6963f7d28e17f72");
    unsigned char back[16];
    CHECK(up_hex_md5_parse(hex, back) == 0 && !memcmp(back, d[1], 16));
    CHECK(up_hex_md5_parse("xyz", back) == -1);
    /* md5(md5("") || md5("abc")) with the part count, as S3 computes it
     * (python: hashlib.md5(bytes.fromhex(a) + bytes.fromhex(b))). */
    up_composite_etag((const unsigned char (*)[16])d, 2, comp);
    CHECK_STR(comp, "66027c6d92d43d01c4f2aa8759629be3-2");
}

static char *jdir(void)
{
    return ckpt_xasprintf("%s/journal", test_tmpdir());
}

static void test_upload__journal_roundtrip(void)
{
    char *dir = jdir();
    struct journal *j;
    struct ckpt_err err = CKPT_ERR_INIT;
    unsigned char m1[16], m3[16];
    up_md5_buf("one", 3, m1);
    up_md5_buf("three", 5, m3);
    CHECK(up_journal_open(&j, dir, "copy-a", &err) == 0);
    /* Keys with TABs and newlines survive the escaping. */
    up_journal_start(j, "run/a\tb\nc", "UP1", 20 * MIB, 8 * MIB, "m17");
    up_journal_part(j, "UP1", 1, m1);
    up_journal_part(j, "UP1", 3, m3);
    up_journal_start(j, "run/done", "UP2", 9 * MIB, 8 * MIB, "m5");
    up_journal_end(j, "UP2");
    up_journal_done(j, "run/done", 9 * MIB, "m5", "abc-2");
    up_journal_done(j, "run/small", 3, "m1", "old");
    up_journal_done(j, "run/small", 3, "m2", "new");
    /* A second process on the same copy is refused while we hold it. */
    struct journal *j2;
    CHECK(up_journal_open(&j2, dir, "copy-a", &err) == -1);
    CHECK_EQ(err.code, CKPT_EEXIST);
    up_journal_close(j);

    CHECK(up_journal_open(&j, dir, "copy-a", &err) == 0);
    struct jr_pending *p = up_journal_pending(j, "run/a\tb\nc");
    CHECK(p != NULL);
    if (p) {
        CHECK_STR(p->upload_id, "UP1");
        CHECK_EQ(p->nparts, 3);
        CHECK(p->have[0] && !p->have[1] && p->have[2]);
        CHECK(!memcmp(p->md5[2], m3, 16));
        CHECK_STR(p->srcsig, "m17");
    }
    CHECK(up_journal_pending(j, "run/done") == NULL);
    const struct jr_done *d = up_journal_find_done(j, "run/small");
    CHECK(d && !strcmp(d->srcsig, "m2") && !strcmp(d->etag, "new"));
    d = up_journal_find_done(j, "run/done");
    CHECK(d && d->size == 9 * MIB && !strcmp(d->etag, "abc-2"));
    CHECK(up_journal_find_done(j, "run/none") == NULL);
    CHECK(up_journal_knows_upload(j, "UP1"));
    /* Finished uploads are dropped when the journal is compacted. */
    CHECK(!up_journal_knows_upload(j, "UP2"));
    size_t n;
    struct jr_pending **un = up_journal_unclaimed(j, &n);
    CHECK_EQ(n, 1);
    CHECK(n == 1 && !strcmp(un[0]->upload_id, "UP1"));
    up_journal_close(j);
    free(dir);
}

/* kill -9 in the middle of a write leaves a torn last line: ignored. */
static void test_upload__journal_torn_line(void)
{
    char *dir = jdir();
    struct journal *j;
    struct ckpt_err err = CKPT_ERR_INIT;
    unsigned char m[16];
    up_md5_buf("x", 1, m);
    CHECK(up_journal_open(&j, dir, "copy-torn", &err) == 0);
    up_journal_start(j, "k", "UPT", 16 * MIB, 8 * MIB, "m1");
    up_journal_part(j, "UPT", 1, m);
    up_journal_close(j);
    /* Append half a P line, as a process killed mid-write leaves. */
    struct jr_pending *p;
    CHECK(up_journal_open(&j, dir, "copy-torn", &err) == 0);
    char *path = ckpt_xstrdup(up_journal_file(j));
    up_journal_close(j);
    FILE *f = fopen(path, "a");
    CHECK(f != NULL);
    if (f) {
        fputs("P\tUPT\t2\t0123", f);
        fclose(f);
    }
    free(path);
    CHECK(up_journal_open(&j, dir, "copy-torn", &err) == 0);
    p = up_journal_pending(j, "k");
    CHECK(p && p->have[0] && !p->have[1]);
    up_journal_close(j);
    free(dir);
}

static void test_upload__map(void)
{
    const char *text =
        "# comment\n"
        "\n"
        "1234567\tai2-llm/olmo-small/ab12cd34\tslurm job\n"
        "dup\t-\tambiguous: 2 W&B runs\n"
        "{\"run\":\"local1\",\"path\":\"ai2-llm/olmo-small/ef56gh78\"}\n"
        "{\"run\":\"gone\",\"path\":null,\"status\":\"unknown\"}\n"
        "1234567\tai2-llm/olmo-big/zz99\tlater line wins\r\n";
    struct ckpt_wandb_map *m;
    struct ckpt_err err = CKPT_ERR_INIT;
    CHECK(ckpt_wandb_map_parse(&m, text, strlen(text), "map.tsv",
                                &err) == 0);
    CHECK_STR(ckpt_wandb_map_path(m, "1234567", -1),
              "ai2-llm/olmo-big/zz99");
    CHECK_STR(ckpt_wandb_map_path(m, "local1", -1),
              "ai2-llm/olmo-small/ef56gh78");
    CHECK(ckpt_wandb_map_path(m, "dup", -1) == NULL &&
          ckpt_wandb_map_find(m, "dup"));
    CHECK(ckpt_wandb_map_path(m, "gone", -1) == NULL &&
          ckpt_wandb_map_find(m, "gone"));
    CHECK(!ckpt_wandb_map_find(m, "nope"));
    ckpt_wandb_map_free(m);

    const char *bad = "r1\tent/proj\tx\n";
    CHECK(ckpt_wandb_map_parse(&m, bad, strlen(bad), "map.tsv",
                                &err) == -1);
    CHECK_STR(err.msg, "map.tsv:1: bad W&B path 'ent/proj'");
    const char *esc = "r1\ta/../b\tx\n";
    CHECK(ckpt_wandb_map_parse(&m, esc, strlen(esc), "m", &err) == -1);
    const char *junk = "\n\njust-one-field\n";
    CHECK(ckpt_wandb_map_parse(&m, junk, strlen(junk), "m", &err) == -1);
    CHECK_STR(err.msg, "m:3: expected RUN_ID<TAB>PATH<TAB>EVIDENCE");
}

/* SRC and DEST compared by identity, whatever the spelling. */
static void test_upload__relation(void)
{
    struct ckpt_loc loc;
    struct ckpt_storage *st;
    struct ckpt_err err = CKPT_ERR_INIT;
    const char *t = test_tmpdir();
    char *sf = ckpt_xasprintf("%s/rel/sf", t);
    char *sub = ckpt_xasprintf("%s/sub", sf);
    char *file = ckpt_xasprintf("%s/a.txt", sf);
    char *lnk = ckpt_xasprintf("%s/rel/lnk", t);
    char *sib = ckpt_xasprintf("%s/rel/sf2", t);
    CHECK(ckpt_mkdirs(sub, &err) == 0 && ckpt_mkdirs(sib, &err) == 0);
    FILE *f = fopen(file, "w");
    CHECK(f != NULL);
    if (f)
        fclose(f);
    CHECK(symlink("sf", lnk) == 0);
    CHECK(ckpt_loc_parse(&loc, "/", &err) == 0);
    CHECK(ckpt_storage_open(&st, &loc, NULL, &err) == 0);
    struct {
        const char *a, *b;
        enum ckpt_loc_rel want;
    } c[] = {
        { "sf", "sf", CKPT_LOC_SAME },
        { "sf", "lnk", CKPT_LOC_SAME },
        { "lnk/", "sf/sub/..", CKPT_LOC_SAME },
        { "sf", "sf/x/../y/../.", CKPT_LOC_SAME },      /* not there */
        { "sf/a.txt", "lnk/a.txt", CKPT_LOC_SAME },
        { "sf", "lnk/sub", CKPT_LOC_B_INSIDE_A },
        { "sf", "sf/new/deeper", CKPT_LOC_B_INSIDE_A }, /* not there */
        { "sf", "sf/x/../../sf/q", CKPT_LOC_B_INSIDE_A },
        { "lnk/sub", "sf", CKPT_LOC_A_INSIDE_B },
        { "sf/a.txt", ".", CKPT_LOC_A_INSIDE_B },
        { "sf", "sf2", CKPT_LOC_APART },
        { "sf2", "sf", CKPT_LOC_APART },
        { "sf", "sf/x/../../other", CKPT_LOC_APART },
        { "missing", "sf", CKPT_LOC_APART },
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        char *a = ckpt_xasprintf("%s/rel/%s", t, c[i].a);
        char *b = ckpt_xasprintf("%s/rel/%s", t, c[i].b);
        enum ckpt_loc_rel got = ckpt_storage_relation(st, a, st, b);
        if (got != c[i].want)
            fprintf(stderr, "relation(%s, %s) = %d, want %d\n", c[i].a,
                    c[i].b, (int)got, (int)c[i].want);
        CHECK_EQ(got, c[i].want);
        free(a);
        free(b);
    }
    CHECK(ckpt_storage_same_file(st, file, st, file));
    CHECK(!ckpt_storage_same_file(st, file, st, sub));
    ckpt_storage_close(st);
    ckpt_loc_release(&loc);
    free(sf);
    free(sub);
    free(file);
    free(lnk);
    free(sib);
}

/* A rewrite in place with the mtime put back still shows (ctime); a
 * replacement with the same bytes and mtime too (inode). */
static void test_upload__srcver(void)
{
    char *path = ckpt_xasprintf("%s/ver.bin", test_tmpdir());
    char *other = ckpt_xasprintf("%s/ver.new", test_tmpdir());
    struct ckpt_err err = CKPT_ERR_INIT;
    struct srcver a, b;
    FILE *f = fopen(path, "w");
    CHECK(f && fputs("one", f) >= 0 && fclose(f) == 0);
    CHECK(up_srcver_get(path, &a, &err) == 0);
    CHECK(up_srcver_get(path, &b, &err) == 0);
    CHECK(up_srcver_diff(&a, &b) == NULL);
    struct timespec keep[2] = { { 0, UTIME_OMIT },
                                { (time_t)(a.mtime_ns / 1000000000),
                                  (long)(a.mtime_ns % 1000000000) } };
    usleep(20000);
    f = fopen(path, "r+");
    CHECK(f && fputs("two", f) >= 0 && fclose(f) == 0);
    CHECK(utimensat(AT_FDCWD, path, keep, 0) == 0);
    CHECK(up_srcver_get(path, &b, &err) == 0);
    CHECK(b.size == a.size && b.mtime_ns == a.mtime_ns && b.ino == a.ino);
    CHECK_STR(up_srcver_diff(&a, &b), "ctime");
    char s1[96], s2[96];
    up_srcver_sig(&a, s1, sizeof(s1));
    up_srcver_sig(&b, s2, sizeof(s2));
    CHECK(strcmp(s1, s2) != 0);
    f = fopen(other, "w");
    CHECK(f && fputs("two", f) >= 0 && fclose(f) == 0);
    CHECK(utimensat(AT_FDCWD, other, keep, 0) == 0);
    CHECK(up_srcver_get(path, &a, &err) == 0);
    CHECK(rename(other, path) == 0);
    CHECK(up_srcver_get(path, &b, &err) == 0);
    CHECK(up_srcver_diff(&a, &b) != NULL);
    CHECK(b.ino != a.ino);
    b.ctime_ns = a.ctime_ns;
    CHECK_STR(up_srcver_diff(&a, &b), "inode");
    b.size++;
    CHECK_STR(up_srcver_diff(&a, &b), "size");
    free(path);
    free(other);
}

/* rclone-style rules: anchoring, '*' vs '**', '?', directory rules,
 * first match wins, default by whether any include was given. */
static void test_upload__filter(void)
{
    struct ckpt_err err = CKPT_ERR_INIT;
    CHECK(ckpt_filter_match(NULL, "a/b") == 1);
    struct ckpt_filter *f = ckpt_filter_new();
    CHECK(ckpt_filter_add(f, 0, "*.npy", &err) == 0);
    CHECK(ckpt_filter_add(f, 0, "step0/", &err) == 0);
    CHECK(ckpt_filter_add(f, 0, "/a/*.pt", &err) == 0);
    CHECK(ckpt_filter_match(f, "train_data/rank0.npy") == 0);
    CHECK(ckpt_filter_match(f, "rank0.npy") == 0);
    CHECK(ckpt_filter_match(f, "step0/train/rank0.pt") == 0);
    CHECK(ckpt_filter_match(f, "x/step0/model.pt") == 0);  /* any level */
    CHECK(ckpt_filter_match(f, "step0") == 1);      /* a file, not a dir */
    CHECK(ckpt_filter_match(f, "step00/model.pt") == 1);
    CHECK(ckpt_filter_match(f, "a/model.pt") == 0);
    CHECK(ckpt_filter_match(f, "a/b/model.pt") == 1);  /* '*' stops at / */
    CHECK(ckpt_filter_match(f, "x/a/model.pt") == 1);  /* anchored */
    CHECK(ckpt_filter_count(f) == 3);
    ckpt_filter_free(f);

    f = ckpt_filter_new();
    CHECK(ckpt_filter_add(f, 1, "step0/**", &err) == 0);
    CHECK(ckpt_filter_add(f, 0, "step0/train/", &err) == 0);
    CHECK(ckpt_filter_add(f, 1, "rank?.pt", &err) == 0);
    CHECK(ckpt_filter_match(f, "step0/train/rank0.pt") == 1);  /* first */
    CHECK(ckpt_filter_match(f, "step1/train/rank1.pt") == 1);
    CHECK(ckpt_filter_match(f, "step1/train/rank10.pt") == 0);
    CHECK(ckpt_filter_match(f, "config.yaml") == 0);  /* includes given */
    ckpt_filter_free(f);

    f = ckpt_filter_new();
    CHECK(ckpt_filter_add(f, 1, "[ab]", &err) == -1 &&
          err.code == CKPT_EUSAGE);
    ckpt_err_clear(&err);
    CHECK(ckpt_filter_add(f, 0, "/", &err) == -1);
    ckpt_err_clear(&err);
    CHECK(ckpt_filter_count(f) == 0);
    ckpt_filter_free(f);

    /* Many stars against a long name that does not match: bounded time
     * (the recursive matcher tried every split, exponential in the stars:
     * the filter fuzz target's input ran past its 15 s limit). */
    f = ckpt_filter_new();
    CHECK(ckpt_filter_add(f, 1, "*/********************=****", &err) == 0);
    CHECK(ckpt_filter_add(f, 1, "a/**?**?**?**?**?**?**?**?**/", &err) == 0);
    char name[200];
    memset(name, 'x', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    name[1] = '/';
    time_t t0 = time(NULL);
    CHECK(ckpt_filter_match(f, name) == 0);
    name[0] = 'a';
    CHECK(ckpt_filter_match(f, name) == 0);     /* no '/' after it */
    name[150] = '=';
    CHECK(ckpt_filter_match(f, name) == 1);     /* x/xx..=xx */
    CHECK(time(NULL) - t0 < 5);
    ckpt_filter_free(f);
}

TEST_MAIN(T(test_upload__part_size), T(test_upload__etags),
          T(test_upload__srcver),
          T(test_upload__relation),
          T(test_upload__journal_roundtrip),
          T(test_upload__journal_torn_line), T(test_upload__map),
          T(test_upload__filter))
