#include "ckpt/clean.h"
#include "ckpt/orbax.h"
#include "ckpt/run.h"
#include "ckpt/util.h"
#include "test.h"

static void test_run__checkpoint_names(void)
{
    static const struct {
        const char *name;
        int ok;
        long long step;
        int uns;
    } cases[] = {
        { "step1000", 1, 1000, 0 },       { "step1000-unsharded", 1, 1000, 1 },
        { "step_5", 1, 5, 0 },            { "step-5", 1, 5, 0 },
        { "global_step7", 1, 7, 0 },      { "iter_0001000", 1, 1000, 0 },
        { "checkpoint-20", 1, 20, 0 },    { "epoch_3", 1, 3, 0 },
        { "42", 1, 42, 0 },               { "0000000100", 1, 100, 0 },
        { "stepX", 0, 0, 0 },             { "step", 0, 0, 0 },
        { "latest", 0, 0, 0 },            { "step1000-tmp", 1, 1000, 0 },
        { "iter_1-unsharded", 1, 1, 1 },  { "step-unsharded", 0, 0, 0 },
        { "1-unsharded", 1, 1, 1 },       { "checkpoint-7-unsharded", 1, 7, 1 },
        { "-unsharded", 0, 0, 0 },        { "step5-unsharded-tmp", 1, 5, 0 },
        { "", 0, 0, 0 },                  { "1234567890123456789012", 0, 0, 0 },
        { "step10a", 0, 0, 0 },           { "-5", 0, 0, 0 },
        { "dist_epoch_2", 1, 2, 0 },      { "dist_epoch_", 0, 0, 0 },
        /* issue 27: spellings of other writers and users */
        { "step1000-final", 1, 1000, 0 }, { "step1000-hf", 1, 1000, 0 },
        { "step1000.0", 1, 1000, 0 },     { "Step1000", 1, 1000, 0 },
        { "STEP_3", 1, 3, 0 },            { "step=1000", 1, 1000, 0 },
        { "ckpt_1000", 1, 1000, 0 },      { "ckpt-7", 1, 7, 0 },
        { "checkpoint_1000", 1, 1000, 0 }, { "step1000-", 0, 0, 0 },
        { "step1000.", 0, 0, 0 },         { "12-final", 0, 0, 0 },
        { "7.orbax-checkpoint-tmp-123", 1, 7, 0 },
        { "7.orbax-checkpoint-tmp-x", 0, 0, 0 },
        { "step_7.orbax-checkpoint-tmp-123", 1, 7, 0 },
        { "99999999999999999999", 0, 0, 0 },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int64_t step = -1;
        int uns = -1;
        int ok = ckpt_checkpoint_name(cases[i].name, &step, &uns);
        test_cond(cases[i].name, ok == cases[i].ok);
        if (ok && cases[i].ok) {
            test_cond(cases[i].name, step == cases[i].step);
            test_cond(cases[i].name, uns == cases[i].uns);
        }
    }
}

/* A whole zip as torch.save lays it out (one stored record under an
 * archive prefix): what "@zip" stands for in make()'s spec. */
static const unsigned char ZIP[] = {
    0x50, 0x4b, 0x03, 0x04, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x21, 0x50, 0x83, 0x16, 0xdc, 0x8c, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00,
    0x00, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x61, 0x2f, 0x64, 0x61, 0x74, 0x61,
    0x2e, 0x70, 0x6b, 0x6c, 0x78, 0x50, 0x4b, 0x01, 0x02, 0x14, 0x03, 0x14,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x21, 0x50, 0x83, 0x16, 0xdc,
    0x8c, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x0a, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x01, 0x00,
    0x00, 0x00, 0x00, 0x61, 0x2f, 0x64, 0x61, 0x74, 0x61, 0x2e, 0x70, 0x6b,
    0x6c, 0x50, 0x4b, 0x05, 0x06, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01,
    0x00, 0x38, 0x00, 0x00, 0x00, 0x29, 0x00, 0x00, 0x00, 0x00, 0x00
};

/* Create files under TMP/<run>: spec is "path=content;path=content". A
 * path ending in '/' is an empty directory; content "@zip" a whole zip,
 * "@cut" the first 100 bytes of it. */
static char *make(const char *run, const char *spec)
{
    char *root = ckpt_path_join(test_tmpdir(), run);
    char *s = ckpt_xstrdup(spec);
    for (char *p = s; p && *p;) {
        char *next = strchr(p, ';');
        if (next)
            *next++ = '\0';
        char *eq = strchr(p, '=');
        if (eq)
            *eq = '\0';
        char *path = ckpt_path_join(root, p);
        char cmd[2048];
        char *dir = ckpt_str_endswith(path, "/") ? ckpt_xstrdup(path)
                                                 : ckpt_path_dirname(path);
        snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", dir);
        CHECK(system(cmd) == 0);
        if (eq && (!strcmp(eq + 1, "@zip") || !strcmp(eq + 1, "@cut")))
            CHECK(test_write_file(path, (const char *)ZIP,
                                  eq[2] == 'z' ? sizeof(ZIP) : 100) == 0);
        else if (!ckpt_str_endswith(p, "/"))
            CHECK(test_write_file(path, eq ? eq + 1 : "",
                                  eq ? strlen(eq + 1) : 0) == 0);
        free(dir);
        free(path);
        p = next;
    }
    free(s);
    return root;
}

/* Scan a run and render "name:format:complete[:why]|..." */
static char *judge(const char *run, const char *spec)
{
    char *root = make(run, spec);
    struct ckpt_loc loc;
    struct ckpt_storage *st;
    struct ckpt_err err;
    ckpt_loc_parse(&loc, root, NULL);
    ckpt_storage_open(&st, &loc, NULL, NULL);
    struct ckpt_tree *t;
    struct ckpt_run r;
    char out[4096] = "";
    int loaded = ckpt_tree_load(&t, st, root, NULL, &err) == 0;
    if (!loaded || ckpt_run_scan(&r, t, &err) != 0) {
        snprintf(out, sizeof(out), "error: %s", err.msg);
        if (loaded)
            ckpt_tree_free(t);
    } else {
        size_t len = 0;
        for (size_t i = 0; i < r.n; i++) {
            const struct ckpt_checkpoint *c = &r.ckpts[i];
            len += (size_t)snprintf(out + len, sizeof(out) - len,
                                    "%s%s:%s:%d%s%s", i ? "|" : "", c->name,
                                    ckpt_format_name(c->format), c->complete,
                                    c->why ? ":" : "", c->why ? c->why : "");
        }
        snprintf(out + len, sizeof(out) - len, "%s",
                 ckpt_run_looks_like_run(&r) ? "" : " (not a run)");
        ckpt_run_release(&r);
        ckpt_tree_free(t);
    }
    ckpt_storage_close(st);
    ckpt_loc_release(&loc);
    free(root);
    return ckpt_xstrdup(out);
}

#define JUDGE(run, spec, want)                                             \
    do {                                                                   \
        char *got_ = judge(run, spec);                                     \
        CHECK_STR(got_, want);                                             \
        free(got_);                                                        \
    } while (0)

/* An OCDBT manifest (index.rst) whose latest generation's root B+tree
 * node is d/abc[off, off+len); off == len == UINT64_MAX: no root. */
static void write_manifest(const char *path, uint64_t off, uint64_t len)
{
    unsigned char b[128];
    size_t n = 14;
    uint64_t v[2] = { off, len };
    memcpy(b, "\x0c\xdb\x3a\x2a", 4);
    b[12] = 0;                              /* version */
    b[13] = 0;                              /* uncompressed */
    memset(b + n, 7, 16);                   /* uuid */
    n += 16;
    memcpy(b + n, "\x00\x64\x80\x80\x80\x04\x04\x00", 8);
    n += 8;                                 /* kind, limits, arity, none */
    memcpy(b + n, "\x01\x05\x00" "d/abc", 8);  /* data file table */
    n += 8;
    memcpy(b + n, "\x01\x01\x00\x00", 4);   /* 1 version: gen 1, h 0, f 0 */
    n += 4;
    for (int k = 0; k < 2; k++)
        do {
            b[n++] = (unsigned char)((v[k] & 0x7f) | (v[k] > 0x7f ? 0x80 : 0));
            v[k] >>= 7;
        } while (v[k]);
    memcpy(b + n, "\x00\x00\x00", 3);      /* statistics */
    n += 3;
    memset(b + n, 0, 8);                    /* commit time */
    n += 8;
    b[n++] = 0;                             /* no version nodes */
    n += 4;
    for (int i = 0; i < 8; i++)
        b[4 + i] = (unsigned char)((uint64_t)n >> (8 * i));
    uint32_t c = ckpt_crc32c(0, b, n - 4);
    for (int i = 0; i < 4; i++)
        b[n - 4 + (size_t)i] = (unsigned char)(c >> (8 * i));
    CHECK(test_write_file(path, b, n) == 0);
}

/* ls/clean read the OCDBT tree: a real manifest of an empty database is
 * whole; one whose root node lies in a data file that is missing or too
 * short is incomplete. */
static void test_run__orbax_ocdbt(void)
{
    static const struct { const char *run, *data, *want; uint64_t off, len; }
    c[] = {
        { "oc1", NULL, "5:orbax:1", UINT64_MAX, UINT64_MAX },
        { "oc2", NULL, "5:orbax:0:5/state/d/abc missing: referenced by the "
          "OCDBT tree", 0, 40 },
        { "oc3", "short", "5:orbax:0:'5/state/d/abc' has 5 bytes, the "
          "OCDBT tree references bytes up to 42 (truncated)", 2, 40 },
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        char spec[256];
        snprintf(spec, sizeof(spec), "5/commit_success.txt=;5/state/d/%s",
                 c[i].data ? "abc=short" : "");
        char *root = make(c[i].run, spec);
        char *m = ckpt_xasprintf("%s/5/state/manifest.ocdbt", root);
        write_manifest(m, c[i].off, c[i].len);
        JUDGE(c[i].run, "", c[i].want);
        free(m);
        free(root);
    }
}

/* The scan fails (a run-level error naming the file, never a verdict
 * clean acts on): "error: <root>/<run>: <suffix>". */
#define JUDGE_ERR(run, spec, suffix)                                       \
    do {                                                                   \
        char *got_ = judge(run, spec);                                     \
        test_cond(got_, !strncmp(got_, "error: ", 7) &&                    \
                  ckpt_str_endswith(got_, "/" run ": " suffix));           \
        free(got_);                                                        \
    } while (0)

#define ORBAX_UNKNOWN "no commit marker (older Orbax commits by rename): " \
    "cannot tell whether it is complete"

static void test_run__orbax(void)
{
    /* A manifest ckpt cannot decode: an error (when unsure, never
     * delete), not "incomplete". */
    JUDGE_ERR("o1", "100/_CHECKPOINT_METADATA={\"commit_timestamp_nsecs\": 5};"
                    "100/default/manifest.ocdbt=x",
              "100/default/manifest.ocdbt: 1 bytes is too short for an OCDBT "
              "object");
    JUDGE("other2", "100/_CHECKPOINT_METADATA={\"init_timestamp_nsecs\": 5}",
          "100:orbax:0:_CHECKPOINT_METADATA has no commit_timestamp_nsecs");
    JUDGE("other3", "200/commit_success.txt=;200/state/ocdbt.process_0/d/x=1",
          "200:orbax:0:state/manifest.ocdbt missing (per-process files not "
          "merged)");
    JUDGE_ERR("o4", "200/commit_success.txt=;200/state/manifest.ocdbt=m;"
                    "200/state/ocdbt.process_0/d/x=1",
              "200/state/manifest.ocdbt: 1 bytes is too short for an OCDBT "
              "object");
    /* Orbax's temporary name is the step, unfinished (issue 27: its
     * files are then accounted for) */
    JUDGE("o5", "step_7.orbax-checkpoint-tmp-123/_CHECKPOINT_METADATA={};"
                "step_8/_CHECKPOINT_METADATA={\"commit_timestamp_nsecs\":1}",
          "step_7.orbax-checkpoint-tmp-123:orbax:0:temporary orbax directory|"
          "step_8:orbax:1");
    /* Older Orbax committed by renaming the tmp directory and wrote no
     * marker on local disk: readable contents without a marker are of
     * unknown completeness (clean makes such a run an error). */
    JUDGE("o6", "10/default/_METADATA={};10/default/w/.zarray={};"
                "10/default/w/0=x",
          "10:orbax:0:" ORBAX_UNKNOWN);
    JUDGE("o7", "10/default/_METADATA={}",
          "10:orbax:0:no commit_success.txt or _CHECKPOINT_METADATA");
}

static void test_run__zarr(void)
{
    JUDGE("z1", "0000000100/.zgroup={};0000000100/.zattrs="
                "{\"write_completed\": true}",
          "0000000100:zarr:1");
    JUDGE("z2", "0000000100/.zgroup={};0000000100/.zattrs={}",
          "0000000100:zarr:0:write_completed is not true in .zattrs");
    JUDGE("z3", "0000000100/.zgroup={}",
          "0000000100:zarr:0:.zattrs missing (write_completed not set)");
}

static void test_run__olmo(void)
{
    JUDGE("l1", "step10/rank0.pt=a;step10/rank1.pt=b;step10/rank2.pt=c",
          "step10:olmo-legacy:1");
    JUDGE("l2", "step10/rank0.pt=a;step10/rank2.pt=c",
          "step10:olmo-legacy:0:rank*.pt: 2 of 3 ranks present");
    JUDGE("l3", "step10/rank0.pt=a;step10/rank1.pt=",
          "step10:olmo-legacy:0:rank1.pt is empty");
    JUDGE("c1", "step5/model/rank0.pt=a;step5/optim/rank0.pt=a;"
                "step5/train/rank0.pt=a;step5/metadata.yaml=world_size: 1\n",
          "step5:olmo-local:1");
    JUDGE("c2", "step5/model/rank0.pt=a;step5/optim/rank0.pt=a;"
                "step5/train/rank0.pt=a;step5/metadata.yaml=world_size: 2\n",
          "step5:olmo-local:0:1 of 2 ranks present");
    JUDGE("c3", "step5/model/rank0.pt=a;step5/model/rank1.pt=a;"
                "step5/optim/rank0.pt=a;step5/train/rank0.pt=a",
          "step5:olmo-local:0:model/, optim/ and train/ rank counts differ");
    JUDGE("k1", "step3/model/rank_0.safetensors=a;step3/model/metadata.json="
                "{\"tensors\":{\"w\":{\"shard_spec_per_file\":"
                "{\"rank_0.safetensors\":{},\"rank_1.safetensors\":{}}}}};"
                "step3/optim/metadata.json={\"tensors\":{}}",
          "step3:olmo-core:0:model/rank_1.safetensors missing");
    JUDGE("k2", "step3/model/rank_0.safetensors=a;step3/model/metadata.json="
                "{\"tensors\":{\"w\":{\"flattened_offsets_per_file\":"
                "{\"rank_0.safetensors\":[0,1],\"rank_2.safetensors\":"
                "[1,2]}}}};step3/optim/metadata.json={\"tensors\":{}}",
          "step3:olmo-core:0:model/rank_2.safetensors missing");
}

#define UNJUDGED "no file ckpt recognises (model.pt, *.safetensors, " \
                 ".metadata, ...)"

static void test_run__unsharded_and_misc(void)
{
    JUDGE("u1", "config.yaml=a;wandb/;step0/;step7-unsharded/model.pt=@zip",
          "step0:unknown:0:empty|step7-unsharded:unsharded:1");
    JUDGE("u2", "step7-unsharded/model.pt=", "step7-unsharded:unsharded:0:"
                                             "model.pt is empty");
    JUDGE("u3", "step9/notes.txt=x", "step9:unknown:0:" UNJUDGED);
    /* Complete means verified: a model.pt cut short is incomplete... */
    JUDGE("u4", "step7-unsharded/model.pt=@cut;step7-unsharded/optim.pt=@zip",
          "step7-unsharded:unsharded:0:model.pt: cut short (no end of "
          "central directory)");
    /* ...one that is no zip (torch.save before 1.6) cannot be judged */
    JUDGE("u5", "step7/model.pt=legacy pickle", "step7:unsharded:0:model.pt: not a zip "
                                    "file (an older torch.save format?): "
                                    "cannot verify");
    /* the OLMo layout: optim.pt without model.pt */
    JUDGE("u6", "step7/optim.pt=@zip;step7/train.pt=@zip",
          "step7:unsharded:0:no model file (model.pt, model.safetensors) "
          "beside optim/train");
    /* an OLMo step's copy with optim.pt but no train.pt */
    JUDGE("u7", "step7/rank0.pt=a;step7-unsharded/model.pt=@zip;"
                "step7-unsharded/optim.pt=@zip",
          "step7:olmo-legacy:1|step7-unsharded:unsharded:0:train.pt missing "
          "(an OLMo step's unsharded copy with optim.pt has train.pt)");
    /* A DeepSpeed step whose model states record no world size is
     * unknown; rank-local DCP metadata ckpt cannot read is an error
     * (layouts.py has the real files). */
    JUDGE("trainer1", "global_step2/mp_rank_00_model_states.pt=@zip;"
                "global_step2/zero_pp_rank_0_mp_rank_00_optim_states.pt=@zip",
          "global_step2:deepspeed:0:cannot read the world size: "
          "mp_rank_00_model_states.pt: unknown opcode 0x78 at offset 0");
    JUDGE_ERR("trainer2", "dist_epoch_3/__0.metadata=x;"
                          "dist_epoch_3/__0_0.distcp=x",
              "dist_epoch_3/__0.metadata: .metadata: unknown opcode 0x78 "
              "at offset 0");
    /* rank-local: a rank's data without its metadata, a gap in ranks */
    JUDGE("trainer5", "step4/__0.metadata=x;step4/__1_0.distcp=x",
          "step4:dcp:0:__1.metadata missing (rank 1 wrote data files)");
    JUDGE("trainer6", "step4/__0.metadata=x;step4/__2.metadata=x",
          "step4:dcp:0:__R.metadata: 2 of 3 ranks present");
    /* a Megatron iter_N whose torch_dist save died before its metadata;
     * a rank-local DCP save in an iter_N directory stays DCP's */
    JUDGE("trainer7", "iter_0000020/__0_0.distcp=x",
          "iter_0000020:megatron:0:metadata.json missing (Megatron writes "
          "it last, after the DCP files)");
    JUDGE("trainer8", "iter_0000020/__0.metadata=x;"
                      "iter_0000020/__1_0.distcp=x",
          "iter_0000020:dcp:0:__1.metadata missing (rank 1 wrote data "
          "files)");
    /* a legacy Megatron rank file cut short; names DeepSpeed does not
     * write are not DeepSpeed's */
    JUDGE("trainer9", "iter_0000010/mp_rank_00/model_optim_rng.pt=@cut",
          "iter_0000010:megatron:0:mp_rank_00/model_optim_rng.pt: cut short "
          "(no end of central directory)");
    JUDGE("trainer10", "global_step2/bf16_mp_rank_00_model_states.pt=x",
          "global_step2:unknown:0:" UNJUDGED);
    /* a zip cut short beside unrecognised weights proves incompleteness */
    JUDGE("trainer3", "checkpoint-4/model.bin=x;checkpoint-4/optimizer.pt=@cut",
          "checkpoint-4:unknown:0:optimizer.pt: cut short (no end of "
          "central directory)");
    JUDGE("n1", "step9/model.pt=x;step9-unfinished=",
          "step9:unsharded:0:marked unfinished");
    /* A directory of Slurm-named runs is not a run of Orbax steps. */
    JUDGE("runs", "2871001/config.yaml=a;2871001/wandb/;"
                  "2871001/step5/model.pt=@zip;2871002/config.yaml=b",
          " (not a run)");
    JUDGE("nested", "config.yaml=a;train_data/;checkpoints/step-40/model.pt=@zip",
          "step-40:unsharded:1");
    JUDGE("dcp1", "config.yaml=a;wandb/;step2/model_and_optim/__0_0.distcp=x",
          "step2:dcp:0:model_and_optim/.metadata missing");
}

/* Load an archive of tests/support/make_damaged.py as clean does
 * (salvage): "ckpt:format:complete[:why]|...#damage" ("-": none). */
static char *judge_archive(const char *name)
{
    static int made;
    char dir[512], path[700], out[4096] = "";
    snprintf(dir, sizeof(dir), "%s/damaged", test_tmpdir());
    if (!made++) {
        char cmd[1024];
        snprintf(cmd, sizeof(cmd), "python3 support/make_damaged.py %s", dir);
        CHECK(system(cmd) == 0);
    }
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    struct ckpt_loc loc;
    struct ckpt_storage *st;
    struct ckpt_err err;
    ckpt_loc_parse(&loc, "/", NULL);
    ckpt_storage_open(&st, &loc, NULL, NULL);
    struct ckpt_tree *t;
    struct ckpt_run r;
    if (ckpt_tree_load_flags(&t, st, path, NULL, CKPT_TREE_SALVAGE,
                             &err) != 0 ||
        ckpt_run_scan(&r, t, &err) != 0) {
        snprintf(out, sizeof(out), "error: %s", err.msg);
    } else {
        size_t len = 0;
        for (size_t i = 0; i < r.n; i++) {
            const struct ckpt_checkpoint *c = &r.ckpts[i];
            len += (size_t)snprintf(out + len, sizeof(out) - len,
                                    "%s%s:%s:%d%s%s", i ? "|" : "", c->name,
                                    ckpt_format_name(c->format), c->complete,
                                    c->why ? ":" : "", c->why ? c->why : "");
        }
        const struct ckpt_tree_file *m = ckpt_tree_find(t,
                                                        "step100/model.pt");
        snprintf(out + len, sizeof(out) - len, "#%s#%llu", t->damage
                 ? t->damage : "-", m ? (unsigned long long)m->size : 0ULL);
        ckpt_run_release(&r);
        ckpt_tree_free(t);
    }
    ckpt_storage_close(st);
    ckpt_loc_release(&loc);
    return ckpt_xstrdup(out);
}

#define JUDGE_ARCHIVE(name, want)                                          \
    do {                                                                   \
        char *got_ = judge_archive(name);                                  \
        CHECK_STR(got_, want);                                             \
        free(got_);                                                        \
    } while (0)

static void test_run__archives_hardlinks_and_damage(void)
{
    JUDGE_ARCHIVE("good.tar", "step100:unsharded:1#-#3000");
    /* a hard link member is its target: 3000 bytes, not 0 */
    JUDGE_ARCHIVE("hardlink.tar", "step100:unsharded:1#-#3000");
    /* (a link to nothing says nothing about the step: not "empty") */
    JUDGE_ARCHIVE("dangling.tar", "step100:unsharded:0:step100/model.pt is "
                  "not a regular file"
                  "#hard link 'run/step100/model.pt' names "
                  "'run/blob/gone.bin', which is not a file in the archive#0");
    /* found past the damage, which is still reported */
    JUDGE_ARCHIVE("hole.tar", "step100:unsharded:1#data after the "
                  "end-of-archive marker at offset 7168#3000");
    JUDGE_ARCHIVE("cut.tar", "#no end-of-archive marker (the archive is cut "
                  "short, or still being written)#0");
}

/* --min-age and --lease-ttl: what the help says (digits, one unit), and
 * nothing strtod would also take. */
static void test_run__parse_duration(void)
{
    static const struct { const char *s; int64_t secs; } ok[] = {
        { "0", 0 }, { "5", 5 }, { "90m", 5400 }, { "6h", 21600 },
        { "2d", 172800 }, { "1w", 604800 }, { "10800", 10800 },
        { "30s", 30 }, { "007", 7 },
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        int64_t v = -1;
        CHECK_EQ(ckpt_parse_duration(ok[i].s, &v), 0);
        CHECK_EQ(v, ok[i].secs);
    }
    static const char *const bad[] = {
        "", "0x10", "1e3", " 5", "5 ", "+5", "-1", "1.5h", "5x", "d",
        "5dd", "5m0", "inf", "nan", "99999999999999999999",
        "99999999999999w", "\t5",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int64_t v = 42;
        CHECK_EQ(ckpt_parse_duration(bad[i], &v), -1);
        CHECK_EQ(v, 42);
    }
}

TEST_MAIN(T(test_run__checkpoint_names), T(test_run__parse_duration), T(test_run__orbax),
          T(test_run__orbax_ocdbt), T(test_run__zarr),
          T(test_run__olmo), T(test_run__unsharded_and_misc),
          T(test_run__archives_hardlinks_and_damage))
