/*
 * The wandb module without a server: netrc and base URL, GraphQL response
 * parsing, config matching, the .wandb RunRecord reader, evidence
 * gathering over a directory, offline resolution, and the mapping file.
 * (The client against a fake server is tests/integration/map_wandb*.py.)
 */
#include <cjson/cJSON.h>

#include "ckpt/torchfmt.h"
#include "ckpt/util.h"
#include "ckpt/wandb.h"
#include "test.h"
#include "wandb/wandb_int.h"

static void test_wandb__netrc(void)
{
    const char *rc =
        "# comment\n"
        "machine api.wandb.ai login user password k1\n"
        "macdef init\ncd /x\n\n"
        "machine 127.0.0.1:8080\n  login user\n  password \"k 2\"\n"
        "machine api.wandb.ai password k3\n"
        "default login anon password kd\n";
    char *p;
    CHECK_STR(p = ckpt_netrc_password(rc, "api.wandb.ai"), "k3");
    free(p);
    CHECK_STR(p = ckpt_netrc_password(rc, "127.0.0.1:8080"), "k 2");
    free(p);
    CHECK_STR(p = ckpt_netrc_password(rc, "other"), "kd");
    free(p);
    CHECK(ckpt_netrc_password("machine a login b", "a") == NULL);
    CHECK_STR(p = ckpt_url_netloc("https://api.wandb.ai/graphql"),
              "api.wandb.ai");
    free(p);
    CHECK_STR(p = ckpt_url_netloc("http://127.0.0.1:8080"),
              "127.0.0.1:8080");
    free(p);
    CHECK_STR(p = ckpt_wandb_base_url("http://h:1//"), "http://h:1");
    free(p);
}

static void test_wandb__api_key(void)
{
    char path[512], *key, *from;
    struct ckpt_err err;
    snprintf(path, sizeof(path), "%s/netrc", test_tmpdir());
    const char *text = "machine h:9 login u password secret-key\n";
    CHECK(test_write_file(path, text, strlen(text)) == 0);
    unsetenv("WANDB_API_KEY");
    setenv("NETRC", path, 1);
    CHECK(ckpt_wandb_find_api_key("http://h:9", &key, &from, &err) == 0);
    CHECK_STR(key, "secret-key");
    CHECK_STR(from, path);
    free(key);
    free(from);
    CHECK(ckpt_wandb_find_api_key("https://api.wandb.ai", &key, &from,
                                  &err) == -1);
    CHECK_EQ(err.code, CKPT_EAUTH);
    char want[700];
    snprintf(want, sizeof(want), "no W&B API key: set WANDB_API_KEY, or add "
             "'machine api.wandb.ai login user password <key>' to %s (what "
             "`wandb login` writes)", path);
    CHECK_STR(err.msg, want);
    setenv("WANDB_API_KEY", " env-key\n", 1);
    CHECK(ckpt_wandb_find_api_key("http://h:9", &key, &from, &err) == 0);
    CHECK_STR(key, "env-key");
    CHECK_STR(from, "WANDB_API_KEY");
    free(key);
    free(from);
    unsetenv("WANDB_API_KEY");
    unsetenv("NETRC");
}

static void test_wandb__response(void)
{
    cJSON *doc, *data;
    struct ckpt_err err;
    const char *ok = "{\"data\":{\"project\":null}}";
    CHECK(ckpt_gql_parse_response(ok, strlen(ok), &doc, &data, &err) == 0);
    cJSON_Delete(doc);
    const char *e1 = "{\"errors\":[{\"message\":\"x\"}],\"data\":null}";
    CHECK(ckpt_gql_parse_response(e1, strlen(e1), &doc, &data, &err) == -1);
    CHECK_STR(err.msg, "W&B API error: x");
    CHECK_EQ(err.code, CKPT_EHTTP);
    const char *bad = "{\"data\": {\"project\": ";
    CHECK(ckpt_gql_parse_response(bad, strlen(bad), &doc, &data, &err) == -1);
    CHECK_STR(err.msg, "W&B API: malformed JSON response");
    CHECK_EQ(err.code, CKPT_EFORMAT);
    const char *nodata = "{\"errors\":[]}";
    CHECK(ckpt_gql_parse_response(nodata, strlen(nodata), &doc, &data,
                                  &err) == -1);
    CHECK_STR(err.msg, "W&B API: response has no data");

    struct ckpt_buf b = CKPT_BUF_INIT;
    const char *down = "{\"errors\":[\"Server down\"]}";
    ckpt_gql_error_message(down, strlen(down), &b);
    CHECK_STR(b.ptr, "Server down");
    ckpt_buf_reset(&b);
    ckpt_gql_error_message("{\"error\":\"m\"}", 13, &b);
    CHECK_STR(b.ptr, "m");
    ckpt_buf_reset(&b);
    const char *html = "<html>\n  <b>Bad\tGateway</b>\r\n</html>";
    ckpt_gql_error_message(html, strlen(html), &b);
    CHECK_STR(b.ptr, "");
    const char *echo = "{\"errors\":[{\"message\":\"denied\\r\\n"
                       "Authorization: Basic YXBpOmtleQ==\\r\\nAccept: "
                       "x\"}]}";
    ckpt_gql_error_message(echo, strlen(echo), &b);
    CHECK_STR(b.ptr, "denied [redacted] Accept: x");
    ckpt_buf_release(&b);
}

static void test_wandb__runs_page(void)
{
    const char *body =
        "{\"data\":{\"project\":{\"runs\":{\"edges\":["
        "{\"node\":{\"name\":\"ab12cd34\",\"displayName\":\"OLMo-1B\","
        "\"group\":null,\"state\":\"finished\",\"createdAt\":"
        "\"2024-05-01T10:00:00\",\"config\":\"{\\\"run_name\\\":{\\\"value\\\""
        ":\\\"OLMo-1B\\\",\\\"desc\\\":null},\\\"_wandb\\\":{\\\"value\\\":{}},"
        "\\\"plain\\\":3,\\\"nested\\\":{\\\"value\\\":{\\\"value\\\":1}}}\","
        "\"summaryMetrics\":\"{\\\"_step\\\":4000}\"},\"cursor\":\"c1\"},"
        "{\"node\":{\"name\":\"ef56gh78\"},\"cursor\":\"c2\"}],"
        "\"pageInfo\":{\"endCursor\":\"c2\",\"hasNextPage\":true}}}}}";
    cJSON *doc, *data;
    struct ckpt_err err;
    struct ckpt_wandb_runs rs = { NULL, 0 };
    char *cursor;
    int more, found;
    CHECK(ckpt_gql_parse_response(body, strlen(body), &doc, &data, &err) == 0);
    CHECK(ckpt_gql_parse_runs_page(data, &rs, &cursor, &more, &found,
                                   &err) == 0);
    CHECK_EQ(rs.n, 2);
    CHECK_STR(cursor, "c2");
    CHECK(more && found);
    CHECK_STR(rs.v[0].display_name, "OLMo-1B");
    CHECK(rs.v[0].group == NULL);
    CHECK_EQ(rs.v[0].last_step, 4000);
    CHECK_EQ(rs.v[1].last_step, -1);
    CHECK(rs.v[1].config == NULL);
    char *cfg = cJSON_PrintUnformatted(rs.v[0].config);
    /* Only the top level is unwrapped, as the official client does. */
    CHECK_STR(cfg, "{\"run_name\":\"OLMo-1B\",\"plain\":3,\"nested\":"
                   "{\"value\":1}}");
    free(cfg);
    free(cursor);
    ckpt_wandb_runs_release(&rs);
    cJSON_Delete(doc);

    cJSON *nop = cJSON_Parse("{\"project\":null}");
    CHECK(ckpt_gql_parse_runs_page(nop, &rs, &cursor, &more, &found,
                                   &err) == 0);
    CHECK(!found && rs.n == 0 && !cursor);
    cJSON_Delete(nop);
    cJSON *noname = cJSON_Parse("{\"project\":{\"runs\":{\"edges\":"
                                "[{\"node\":{}}]}}}");
    CHECK(ckpt_gql_parse_runs_page(noname, &rs, &cursor, &more, &found,
                                   &err) == -1);
    CHECK_STR(err.msg, "W&B API: run without a name in the response");
    ckpt_wandb_runs_release(&rs);
    cJSON_Delete(noname);
}

static int match(const char *local, const char *remote, char *diff)
{
    cJSON *l = cJSON_Parse(local), *r = cJSON_Parse(remote);
    const char *ign[] = { "ignored" };
    int m = ckpt_wandb_config_match(l, r, ign, 1, diff, 128);
    cJSON_Delete(l);
    cJSON_Delete(r);
    return m;
}

static void test_wandb__config_match(void)
{
    char d[128];
    CHECK(match("{\"lr\":0.0004,\"b\":[0.9,0.95],\"m\":{\"x\":1,\"y\":2}}",
                "{\"lr\":\"4e-4\",\"b\":[0.9,0.95],\"m\":{\"x\":1},"
                "\"new\":5}", d));
    CHECK(match("{\"flag\":true,\"n\":null,\"wandb\":{\"a\":1},"
                "\"load_path\":\"/a\",\"ignored\":1,\"k\":1}",
                "{\"flag\":\"True\",\"n\":\"None\",\"wandb\":{\"a\":2},"
                "\"load_path\":\"/b\",\"ignored\":2,\"k\":1}", d));
    CHECK(!match("{\"m\":{\"x\":1,\"y\":[1,2]}}",
                 "{\"m\":{\"x\":1,\"y\":[1,3]}}", d));
    CHECK_STR(d, "m.y[1]");
    CHECK(!match("{\"b\":[1,2]}", "{\"b\":[1,2,3]}", d));
    CHECK_STR(d, "b");
    CHECK(!match("{\"a\":1}", "{\"b\":1}", d));
    CHECK_STR(d, "(no key in common)");
    CHECK(!match("{\"s\":\"x\"}", "{\"s\":{\"x\":1}}", d));
    char *id;
    CHECK_STR(id = ckpt_slurm_id_of("/results/1234567/"), "1234567");
    free(id);
    CHECK(ckpt_slurm_id_of("/results/run-1") == NULL);
    CHECK(ckpt_slurm_id_of("") == NULL);
}

/* A .wandb log: header, a HeaderRecord, then records of data. */
static void log_add(struct ckpt_buf *b, const unsigned char *rec, size_t n)
{
    int first = 1;
    while (1) {
        size_t space = 32768 - b->len % 32768;
        if (space < 7) {
            for (size_t i = 0; i < space; i++)
                ckpt_buf_addch(b, 0);
            continue;
        }
        size_t chunk = n < space - 7 ? n : space - 7;
        int last = chunk == n;
        unsigned char type = (unsigned char)(first ? (last ? 1 : 2)
                                                   : (last ? 4 : 3));
        /* wandb's checksum: CRC-32 of the type byte, then the data */
        uint32_t crc = ckpt_crc32(ckpt_crc32(0, &type, 1), rec, chunk);
        unsigned char h[7] = { (unsigned char)crc,
                               (unsigned char)(crc >> 8),
                               (unsigned char)(crc >> 16),
                               (unsigned char)(crc >> 24),
                               (unsigned char)(chunk & 0xff),
                               (unsigned char)(chunk >> 8), type };
        ckpt_buf_add(b, h, 7);
        ckpt_buf_add(b, rec, chunk);
        rec += chunk;
        n -= chunk;
        first = 0;
        if (last)
            break;
    }
}

static void pb_len(struct ckpt_buf *b, int field, const void *d, size_t n)
{
    ckpt_buf_addch(b, (char)(field < 16 ? field << 3 | 2 : 0x8a));
    if (field >= 16)
        ckpt_buf_addch(b, (char)(field >> 4)); /* 17 -> 0x8a 0x01 */
    size_t v = n;
    do {
        ckpt_buf_addch(b, (char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0)));
        v >>= 7;
    } while (v);
    ckpt_buf_add(b, d, n);
}

static void test_wandb__wandbfile(void)
{
    struct ckpt_buf rr = CKPT_BUF_INIT, rec = CKPT_BUF_INIT;
    struct ckpt_buf pad = CKPT_BUF_INIT, log = CKPT_BUF_INIT;
    pb_len(&rr, 1, "ab12cd34", 8);
    pb_len(&rr, 2, "ai2-llm", 7);
    pb_len(&rr, 3, "olmo", 4);
    pb_len(&rr, 8, "OLMo-1B", 7);
    ckpt_buf_add(&rec, "\x08\x02", 2); /* num = 2 */
    pb_len(&rec, 17, rr.ptr, rr.len);
    char big[40000];
    memset(big, 'x', sizeof(big));
    ckpt_buf_add(&pad, "\x08\x01", 2);
    pb_len(&pad, 11, big, sizeof(big)); /* spans a block boundary */
    ckpt_buf_add(&log, ":W&B\xe1\xbe\x00", 7);
    log_add(&log, (const unsigned char *)pad.ptr, pad.len);
    log_add(&log, (const unsigned char *)rec.ptr, rec.len);
    struct ckpt_wandb_runrecord r;
    struct ckpt_err err;
    CHECK(ckpt_wandbfile_runrecord((unsigned char *)log.ptr, log.len, &r,
                                   &err) == 0);
    CHECK_STR(r.run_id, "ab12cd34");
    CHECK_STR(r.entity, "ai2-llm");
    CHECK_STR(r.project, "olmo");
    CHECK_STR(r.display_name, "OLMo-1B");
    CHECK(r.group == NULL);
    ckpt_wandb_runrecord_release(&r);
    /* A prefix that ends inside the run record: not found, not bad. */
    CHECK(ckpt_wandbfile_runrecord((unsigned char *)log.ptr, log.len - 3,
                                   &r, &err) == -1);
    CHECK_EQ(err.code, CKPT_ENOTFOUND);
    CHECK(ckpt_wandbfile_runrecord((const unsigned char *)"PK\3\4xxxx", 8,
                                   &r, &err) == -1);
    CHECK_STR(err.msg, "not a wandb log (bad header)");
    /* A byte of the run record changed, or its stored checksum: damage,
     * an error naming the record, never names read from it. The
     * record's header is at 7 + the padding record's 40,000 bytes and
     * the two headers that split it over the block boundary. */
    size_t at = 7 + pad.len + 2 * 7;
    CHECK(log.ptr[at + 7 + 7] == 'a'); /* "ab12cd34" */
    log.ptr[at + 7 + 7] = 'b';
    CHECK(ckpt_wandbfile_runrecord((unsigned char *)log.ptr, log.len, &r,
                                   &err) == -1);
    CHECK_EQ(err.code, CKPT_EFORMAT);
    char want[96];
    snprintf(want, sizeof(want), "wandb log record at byte %zu: checksum "
             "mismatch (damaged)", at);
    CHECK_STR(err.msg, want);
    log.ptr[at + 7 + 7] = 'a';
    log.ptr[at] ^= 1;
    CHECK(ckpt_wandbfile_runrecord((unsigned char *)log.ptr, log.len, &r,
                                   &err) == -1);
    CHECK_STR(err.msg, want);
    log.ptr[at] ^= 1;
    /* The padding record damaged: it comes first, so the same error. */
    log.ptr[7 + 7 + 100] ^= 0x20;
    CHECK(ckpt_wandbfile_runrecord((unsigned char *)log.ptr, log.len, &r,
                                   &err) == -1);
    CHECK_STR(err.msg, "wandb log record at byte 7: checksum mismatch "
                       "(damaged)");
    log.ptr[7 + 7 + 100] ^= 0x20;
    CHECK(ckpt_wandbfile_runrecord((unsigned char *)log.ptr, log.len, &r,
                                   &err) == 0);
    ckpt_wandb_runrecord_release(&r);
    ckpt_buf_release(&rr);
    ckpt_buf_release(&rec);
    ckpt_buf_release(&pad);
    ckpt_buf_release(&log);
}

/* A log the wandb SDK itself wrote (0.10.20.dev1, offline run g9dvvkua;
 * tests/fixtures/wandb-sdk/README.md): its run record is read through
 * checksums the SDK computed, and a byte changed in it is refused. */
static void test_wandb__wandbfile_sdk(void)
{
    FILE *f = fopen("fixtures/wandb-sdk/run-g9dvvkua.wandb", "rb");
    CHECK(f != NULL);
    if (!f)
        return;
    static unsigned char log[16384];
    size_t n = fread(log, 1, sizeof(log), f);
    fclose(f);
    CHECK_EQ(n, 7868);
    struct ckpt_wandb_runrecord r;
    struct ckpt_err err;
    CHECK(ckpt_wandbfile_runrecord(log, n, &r, &err) == 0);
    CHECK_STR(r.run_id, "g9dvvkua");
    CHECK_STR(r.project, "code-toad");
    CHECK(r.entity == NULL); /* an offline run: no entity yet */
    CHECK(r.display_name == NULL && r.group == NULL);
    ckpt_wandb_runrecord_release(&r);
    /* Its second record (after an empty HeaderRecord), the run record,
     * cut: not found, not damage. */
    CHECK(ckpt_wandbfile_runrecord(log, 100, &r, &err) == -1);
    CHECK_EQ(err.code, CKPT_ENOTFOUND);
    /* One bit of the run id flipped ("g9dvvkua" at byte 34). */
    CHECK(memcmp(log + 34, "g9dvvkua", 8) == 0);
    log[34] ^= 0x01;
    CHECK(ckpt_wandbfile_runrecord(log, n, &r, &err) == -1);
    CHECK_EQ(err.code, CKPT_EFORMAT);
    CHECK_STR(err.msg, "wandb log record at byte 17: checksum mismatch "
                       "(damaged)");
    log[34] ^= 0x01;
}

static void mkpath(const char *rel, const char *content)
{
    char p[1024];
    snprintf(p, sizeof(p), "%s/%s", test_tmpdir(), rel);
    for (char *s = p + strlen(test_tmpdir()) + 1; *s; s++)
        if (*s == '/') {
            *s = '\0';
            mkdir(p, 0755);
            *s = '/';
        }
    if (content)
        test_write_file(p, content, strlen(content));
    else
        mkdir(p, 0755);
}

static struct ckpt_wandb_evidence *gather(const char *rel)
{
    struct ckpt_loc loc;
    struct ckpt_storage *st;
    struct ckpt_err err;
    struct ckpt_wandb_evidence *ev = NULL;
    char p[1024];
    snprintf(p, sizeof(p), "%s/%s", test_tmpdir(), rel);
    if (ckpt_loc_parse(&loc, p, &err) != 0 ||
        ckpt_storage_open(&st, &loc, NULL, &err) != 0)
        return NULL;
    struct ckpt_wandb_src src;
    ckpt_wandb_src_storage(&src, st, loc.key);
    if (ckpt_wandb_evidence_gather(&ev, &src, &err) != 0)
        fprintf(stderr, "  gather: %s\n", err.msg);
    ckpt_wandb_src_release(&src);
    ckpt_storage_close(st);
    ckpt_loc_release(&loc);
    return ev;
}

static void test_wandb__evidence(void)
{
    mkpath("r1/config.yaml", "save_folder: /results/77\nseed: 1\n"
           "wandb:\n  entity: e\n  project: p\n  name: N\n  group: G\n");
    mkpath("r1/wandb/wandb/run-20240502_100000-bbbbbbbb/files/"
           "wandb-summary.json", "{\"_step\": 2000}");
    mkpath("r1/wandb/wandb/run-20240501_100000-aaaaaaaa-x/files/"
           "wandb-metadata.json", "{\"slurm\":{\"job_id\":\"77\"}}");
    mkpath("r1/wandb/wandb/offline-run-20240503_100000-cccccccc", NULL);
    mkpath("r1/wandb/wandb/latest-run", NULL);
    mkpath("r1/wandb/settings", "[default]\nproject = sp\n");
    mkpath("r1/step1000", NULL);
    mkpath("r1/step500-unsharded", NULL);
    mkpath("r1/step1000-unsharded", NULL);
    mkpath("r1/epoch_3", NULL);
    struct ckpt_wandb_evidence *ev = gather("r1");
    CHECK(ev != NULL);
    if (!ev)
        return;
    CHECK_EQ(ev->nruns, 3);
    CHECK_STR(ev->runs[0].id, "aaaaaaaa");
    CHECK_STR(ev->runs[0].slurm_job_id, "77");
    CHECK_STR(ev->runs[1].dir, "wandb/wandb/run-20240502_100000-bbbbbbbb");
    CHECK_EQ(ev->runs[1].last_step, 2000);
    CHECK(ev->runs[2].offline);
    CHECK_STR(ev->entity, "e");
    CHECK_STR(ev->project, "p");
    CHECK_STR(ev->name, "N");
    CHECK_STR(ev->group, "G");
    CHECK_STR(ev->settings_project, "sp");
    CHECK_STR(ev->slurm_job_id, "77");
    CHECK_STR(ev->config_file, "config.yaml");
    CHECK(cJSON_GetObjectItemCaseSensitive(ev->config, "wandb") == NULL);
    CHECK_EQ(ev->nsteps, 2);
    CHECK_EQ(ev->steps[0], 500);
    CHECK_EQ(ev->steps[1], 1000);
    CHECK(ev->problems == NULL);

    /* Offline: the newest local id, steps split by local summaries. */
    struct ckpt_wandb_result res = { 0 };
    struct ckpt_wandb_resolve_opts o = { NULL, NULL, 1, 1, NULL, 0 };
    struct ckpt_err err;
    CHECK(ckpt_wandb_resolve(NULL, &ev, 1, &o, &res, &err) == 0);
    CHECK_EQ(res.status, CKPT_WANDB_FOUND);
    CHECK_STR(res.path, "e/p/cccccccc");
    CHECK_EQ(res.nruns, 3);
    CHECK_EQ(res.nsteps, 0); /* aaaaaaaa's last step is unknown */
    ckpt_wandb_result_release(&res);
    ckpt_wandb_evidence_free(ev);

    mkpath("r2/config.yaml", "a: [1,\n");
    mkpath("r2/step7/config.yaml", "save_folder: /x/9\n");
    ev = gather("r2");
    CHECK_STR(ev->config_file, "step7/config.yaml");
    CHECK_STR(ev->slurm_job_id, "9");
    CHECK_STR(ev->problems, "config.yaml:2: did not find expected node "
              "content (while parsing a flow node at line 2)");
    ckpt_wandb_evidence_free(ev);
}

static void test_wandb__rundir_names(void)
{
    char *id, stamp[16];
    int off;
    CHECK(ckpt_wandb_parse_rundir("run-20240501_100000-ab12cd34", &id,
                                  stamp, &off) == 0);
    CHECK_STR(id, "ab12cd34");
    CHECK_STR(stamp, "20240501_100000");
    CHECK(!off);
    free(id);
    CHECK(ckpt_wandb_parse_rundir("offline-run-20240501_100000-x-sfx", &id,
                                  stamp, &off) == 0);
    CHECK_STR(id, "x");
    CHECK(off);
    free(id);
    CHECK(ckpt_wandb_parse_rundir("run-2024_1-x", &id, stamp, &off) == -1);
    CHECK(ckpt_wandb_parse_rundir("latest-run", &id, stamp, &off) == -1);
    CHECK(ckpt_wandb_parse_rundir("run-20240501_100000-", &id, stamp,
                                  &off) == -1);
}

static void test_wandb__map_file(void)
{
    const char *text =
        "# comment\n"
        "r1\te/p/a\tvia x\n"
        "\n"
        "{\"run\":\"r2\",\"path\":\"e/p/c\",\"evidence\":\"y\","
        "\"steps\":{\"2000\":\"e/p/c\",\"1000\":\"e/p/b\"}}\n"
        "r3\t-\tunknown: z\n"
        "r1\te/p/a2\tagain\n";
    struct ckpt_wandb_map *m;
    struct ckpt_err err;
    CHECK(ckpt_wandb_map_parse(&m, text, strlen(text), "m.tsv", &err) == 0);
    CHECK_EQ(m->n, 3);
    CHECK_STR(ckpt_wandb_map_path(m, "r1", -1), "e/p/a2");
    CHECK_STR(ckpt_wandb_map_path(m, "r2", 1000), "e/p/b");
    CHECK_STR(ckpt_wandb_map_path(m, "r2", 1500), "e/p/c");
    CHECK(ckpt_wandb_map_path(m, "r3", -1) == NULL);
    CHECK(ckpt_wandb_map_path(m, "nope", -1) == NULL);
    /* Lines are kept as read, TSV and JSON alike. */
    char *t = ckpt_wandb_map_text(m, 0);
    CHECK_STR(t, "r1\te/p/a2\tagain\n"
                 "{\"run\":\"r2\",\"path\":\"e/p/c\",\"evidence\":\"y\","
                 "\"steps\":{\"2000\":\"e/p/c\",\"1000\":\"e/p/b\"}}\n"
                 "r3\t-\tunknown: z\n");
    free(t);
    ckpt_wandb_map_free(m);

    static const char *const bad[][2] = {
        { "r1\n", "m.tsv:1: expected RUN_ID<TAB>PATH<TAB>EVIDENCE" },
        { "r1\te/p\tx\n", "m.tsv:1: bad W&B path 'e/p'" },
        { "r1\te/../x\tx\n", "m.tsv:1: bad W&B path 'e/../x'" },
        { "{\"path\":\"e/p/x\"}\n",
          "m.tsv:1: expected a JSON object with \"run\"" },
        { "{\"run\":\"r\",\"steps\":{\"x\":\"e/p/r\"}}",
          "m.tsv:1: bad step 'x'" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK(ckpt_wandb_map_parse(&m, bad[i][0], strlen(bad[i][0]),
                                   "m.tsv", &err) == -1);
        CHECK_STR(err.msg, bad[i][1]);
    }
    /* Run names with TAB, newline, backslash or bad UTF-8 round-trip
     * through a TSV mapping file (escaped as on stdout). */
    static const char *const odd[] = { "tab\tname", "tab name",
                                       "nl\nx", "back\\x41", "b\xff" };
    m = ckpt_wandb_map_new();
    for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
        struct ckpt_wandb_map_entry e = { 0 };
        e.run = (char *)odd[i];
        e.path = "e/p/r";
        e.evidence = "ev\t1";
        ckpt_wandb_map_put(m, &e);
    }
    t = ckpt_wandb_map_text(m, 0);
    CHECK_STR(t, "tab\\tname\te/p/r\tev\\t1\n"
                 "tab name\te/p/r\tev\\t1\n"
                 "nl\\nx\te/p/r\tev\\t1\n"
                 "back\\\\x41\te/p/r\tev\\t1\n"
                 "b\\xff\te/p/r\tev\\t1\n");
    ckpt_wandb_map_free(m);
    CHECK(ckpt_wandb_map_parse(&m, t, strlen(t), "m.tsv", &err) == 0);
    CHECK_EQ(m->n, 5);
    for (size_t i = 0; i < m->n && i < 5; i++) {
        CHECK_STR(m->v[i].run, odd[i]);
        CHECK_STR(m->v[i].evidence, "ev\t1");
    }
    ckpt_wandb_map_free(m);
    free(t);
    CHECK(ckpt_wandb_path_valid("a/b/c"));
    CHECK(!ckpt_wandb_path_valid("a/b/c/"));
    CHECK(!ckpt_wandb_path_valid("a//c"));
    CHECK(!ckpt_wandb_path_valid("a/b c/d"));
    /* a hidden component: DEST's own .ckpt-process/ (issue 20) */
    CHECK(!ckpt_wandb_path_valid(".ckpt-process/x/y"));
    CHECK(!ckpt_wandb_path_valid("a/.b/c"));
    CHECK(!ckpt_wandb_path_valid("a/b/.."));
    CHECK(ckpt_wandb_path_valid("a.b/c-d/e_f"));
}

static void test_wandb__result_json(void)
{
    struct ckpt_wandb_result r = { 0 };
    char *runs[] = { "e/p/a", "e/p/b" };
    struct ckpt_wandb_step steps[] = { { 10, "e/p/a" }, { 20, "e/p/b" } };
    r.status = CKPT_WANDB_FOUND;
    r.path = "e/p/b";
    r.evidence = "ev";
    r.source = "local-id";
    r.runs = runs;
    r.nruns = 2;
    r.steps = steps;
    r.nsteps = 2;
    cJSON *j = ckpt_wandb_result_json("run1", &r);
    char *s = cJSON_PrintUnformatted(j);
    CHECK_STR(s, "{\"run\":\"run1\",\"path\":\"e/p/b\",\"status\":\"found\","
                 "\"evidence\":\"ev\",\"source\":\"local-id\",\"runs\":"
                 "[\"e/p/a\",\"e/p/b\"],\"steps\":{\"10\":\"e/p/a\","
                 "\"20\":\"e/p/b\"}}");
    free(s);
    cJSON_Delete(j);
    struct ckpt_wandb_map_entry e;
    ckpt_wandb_map_entry_of(&e, "run\t1", &r, 0);
    CHECK_STR(e.line, "run\\t1\te/p/b\tev"); /* escaped, one field */
    ckpt_wandb_map_entry_release(&e);
    /* A W&B answer with a hidden component leaves the run unmapped: it
     * would land in DEST/.ckpt-process/ (issue 20). */
    steps[1].path = ".ckpt-process/p/b";
    ckpt_wandb_map_entry_of(&e, "run1", &r, 0);
    CHECK(e.path == NULL && e.nsteps == 0);
    CHECK_STR(e.line, "run1\t-\terror: W&B path '.ckpt-process/p/b' is no "
                      "place below DEST (an empty, hidden, '.' or '..' "
                      "component)");
    ckpt_wandb_map_entry_release(&e);
    steps[1].path = "e/p/b";
}

TEST_MAIN(T(test_wandb__netrc), T(test_wandb__api_key),
          T(test_wandb__response), T(test_wandb__runs_page),
          T(test_wandb__config_match), T(test_wandb__wandbfile),
          T(test_wandb__wandbfile_sdk),
          T(test_wandb__evidence), T(test_wandb__rundir_names),
          T(test_wandb__map_file), T(test_wandb__result_json))
