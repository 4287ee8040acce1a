/*
 * The YAML reader (src/formats/yaml.c, libyaml's parser): the forms
 * PyYAML/OmegaConf and wandb's Go writer produce, scalar resolution as
 * PyYAML does it, exact error messages (libyaml's, with the line) and the
 * caps on what hostile input can grow. Expected trees were checked against
 * PyYAML 6.0.
 */
#include <cjson/cJSON.h>

#include "test.h"
#include "wandb/wandb_int.h"

/* Parse text and compare the tree, printed unformatted, with want. */
static int yaml_is(const char *text, const char *want)
{
    cJSON *j = NULL;
    struct ckpt_err err = CKPT_ERR_INIT;
    if (ckpt_yaml_parse(text, strlen(text), "t.yaml", &j, &err) != 0) {
        fprintf(stderr, "  parse failed: %s\n", err.msg);
        return 0;
    }
    char *s = cJSON_PrintUnformatted(j);
    int ok = !strcmp(s, want);
    if (!ok)
        fprintf(stderr, "  got  %s\n  want %s\n", s, want);
    free(s);
    cJSON_Delete(j);
    return ok;
}

static int yaml_fails(const char *text, const char *msg)
{
    cJSON *j = NULL;
    struct ckpt_err err = CKPT_ERR_INIT;
    int rc = ckpt_yaml_parse(text, strlen(text), "t.yaml", &j, &err);
    cJSON_Delete(j);
    if (rc == 0 || strcmp(err.msg, msg) || err.code != CKPT_EFORMAT) {
        fprintf(stderr, "  rc %d, message \"%s\"\n", rc, err.msg);
        return 0;
    }
    return 1;
}

static void test_wandb_yaml__olmo_config(void)
{
    /* What OmegaConf.save writes for an OLMo TrainConfig (abridged). */
    CHECK(yaml_is(
        "run_name: OLMo-1B\n"
        "seed: 6198\n"
        "model:\n"
        "  d_model: 2048\n"
        "  init_std: 0.02\n"
        "  rope: true\n"
        "  clip_qkv: null\n"
        "optimizer:\n"
        "  learning_rate: 0.0004\n"
        "  eps: 1.0e-05\n"
        "  betas:\n"
        "  - 0.9\n"
        "  - 0.95\n"
        "save_folder: /results/1234567\n"
        "load_path: null\n"
        "wandb:\n"
        "  name: OLMo-1B\n"
        "  project: olmo-small\n"
        "  entity: ai2-llm\n"
        "  group: null\n"
        "  tags:\n"
        "  - watching\n",
        "{\"run_name\":\"OLMo-1B\",\"seed\":6198,\"model\":{\"d_model\":2048,"
        "\"init_std\":0.02,\"rope\":true,\"clip_qkv\":null},\"optimizer\":"
        "{\"learning_rate\":0.0004,\"eps\":1e-05,\"betas\":[0.9,0.95]},"
        "\"save_folder\":\"/results/1234567\",\"load_path\":null,\"wandb\":"
        "{\"name\":\"OLMo-1B\",\"project\":\"olmo-small\",\"entity\":"
        "\"ai2-llm\",\"group\":null,\"tags\":[\"watching\"]}}"));
}

static void test_wandb_yaml__wandb_go_config(void)
{
    /* wandb-core's files/config.yaml: 4-space indent, value wrappers. */
    CHECK(yaml_is(
        "_wandb:\n"
        "    value:\n"
        "        cli_version: 0.19.1\n"
        "        t:\n"
        "            \"1\":\n"
        "                - 1\n"
        "                - 55\n"
        "save_folder:\n"
        "    value: /results/1234567\n",
        "{\"_wandb\":{\"value\":{\"cli_version\":\"0.19.1\",\"t\":{\"1\":"
        "[1,55]}}},\"save_folder\":{\"value\":\"/results/1234567\"}}"));
}

static void test_wandb_yaml__scalars(void)
{
    /* PyYAML's YAML 1.1 resolver plus OmegaConf's exponent floats. */
    CHECK(yaml_is("a: yes\nb: Off\nc: ~\nd: 0x1F\ne: 017\nf: 1_000\n"
                  "g: 1e-4\nh: .5\ni: -.5\nj: 12:30\nk: 0o17\nl: '1.5'\n"
                  "m: 1.10\nn: -7\no: +3\np: y\nq: 2024-05-01\n",
                  "{\"a\":true,\"b\":false,\"c\":null,\"d\":31,\"e\":15,"
                  "\"f\":1000,\"g\":0.0001,\"h\":0.5,\"i\":\"-.5\",\"j\":750,"
                  "\"k\":\"0o17\",\"l\":\"1.5\",\"m\":1.1,\"n\":-7,\"o\":3,"
                  "\"p\":\"y\",\"q\":\"2024-05-01\"}"));
    CHECK(yaml_is("a: !!str yes\nb: !!float '2'\nc: !!int \"7\"\n",
                  "{\"a\":\"yes\",\"b\":2,\"c\":7}"));
}

static void test_wandb_yaml__quoted(void)
{
    CHECK(yaml_is("a: 'it''s # not a comment'\n"
                  "b: \"tab\\t \\u263A \\x41 \\\\ \\\"\"\n"
                  "\"k: x\": 1\n",
                  "{\"a\":\"it's # not a comment\",\"b\":\"tab\\t \xe2\x98"
                  "\xba A \\\\ \\\"\",\"k: x\":1}"));
    /* Folding across lines, as PyYAML wraps long strings at 80 columns. */
    CHECK(yaml_is("a: 'one two\n  three\n\n  four'\n"
                  "b: \"x\\\n  y\"\n"
                  "c: plain\n  folded # comment\n",
                  "{\"a\":\"one two three\\nfour\",\"b\":\"xy\","
                  "\"c\":\"plain folded\"}"));
}

static void test_wandb_yaml__block_scalars(void)
{
    CHECK(yaml_is("lit: |\n  a\n    b\n\n  c\n"
                  "fold: >\n  a\n  b\n\n  c\n"
                  "strip: |-\n  x\n"
                  "keep: |+\n  y\n\n"
                  "end: 1\n",
                  "{\"lit\":\"a\\n  b\\n\\nc\\n\",\"fold\":\"a b\\nc\\n\","
                  "\"strip\":\"x\",\"keep\":\"y\\n\\n\",\"end\":1}"));
}

static void test_wandb_yaml__flow_and_nesting(void)
{
    CHECK(yaml_is("a: [1, 2,\n  3]  # wrapped\n"
                  "b: {x: 1, y: [a, 'b, c'], z: {}}\n"
                  "c: []\n"
                  "d:\n- - x\n  - y\n- k: v\n  k2: v2\n-\n  e: 1\n",
                  "{\"a\":[1,2,3],\"b\":{\"x\":1,\"y\":[\"a\",\"b, c\"],"
                  "\"z\":{}},\"c\":[],\"d\":[[\"x\",\"y\"],{\"k\":\"v\","
                  "\"k2\":\"v2\"},{\"e\":1}]}"));
    CHECK(yaml_is("? long key\n: v\n? 12\n", "{\"long key\":\"v\","
                  "\"12\":null}"));
}

static void test_wandb_yaml__anchors_documents(void)
{
    CHECK(yaml_is("%YAML 1.1\n---\nbase: &b {lr: 1}\ncopy: *b\n"
                  "l: [&x 5, *x]\n...\nignored: 1\n",
                  "{\"base\":{\"lr\":1},\"copy\":{\"lr\":1},\"l\":[5,5]}"));
    CHECK(yaml_is("a: 1\r\nb: 2\r\n", "{\"a\":1,\"b\":2}"));
    CHECK(yaml_is("", "null"));
    CHECK(yaml_is("# only a comment\n", "null"));
    CHECK(yaml_is("just text\n", "\"just text\""));
    CHECK(yaml_is("a: 1\na: 2\n", "{\"a\":2}"));
}

static void test_wandb_yaml__keys(void)
{
    /* Keys keep their text; an alias key takes its node's text. */
    CHECK(yaml_is("1.0: a\nyes: b\n&k key: c\nz: *k\n*k : d\n",
                  "{\"1.0\":\"a\",\"yes\":\"b\",\"z\":\"key\","
                  "\"key\":\"d\"}"));
    CHECK(yaml_is("n: &n 5\n*n : x\n", "{\"n\":5,\"5\":\"x\"}"));
}

static void test_wandb_yaml__errors(void)
{
    /* libyaml's messages (PyYAML prints the same), with 1-based lines. */
    CHECK(yaml_fails("a:\n  b: 1\n c: 2\n", "t.yaml:3: did not find "
                     "expected key (while parsing a block mapping at line "
                     "1)"));
    CHECK(yaml_fails("a: [1, 2\n", "t.yaml:2: did not find expected ',' or "
                     "']' (while parsing a flow sequence at line 1)"));
    CHECK(yaml_fails("a: \"x\n", "t.yaml:2: found unexpected end of stream "
                     "(while scanning a quoted scalar at line 1)"));
    CHECK(yaml_fails("a: 1\n- b\n", "t.yaml:2: did not find expected key "
                     "(while parsing a block mapping at line 1)"));
    CHECK(yaml_fails("a: *nope\n", "t.yaml:1: unknown alias"));
    CHECK(yaml_fails("a: \"x\" y\n", "t.yaml:1: did not find expected key "
                     "(while parsing a block mapping at line 1)"));
    CHECK(yaml_fails("a: [1]]\n", "t.yaml:1: did not find expected key "
                     "(while parsing a block mapping at line 1)"));
    CHECK(yaml_fails("\ta: 1\n", "t.yaml:1: found character that cannot "
                     "start any token (while scanning for the next token at "
                     "line 1)"));
    CHECK(yaml_fails("a: \"\\q\"\n", "t.yaml:1: found unknown escape "
                     "character (while parsing a quoted scalar at line 1)"));
    CHECK(yaml_fails("? [1, 2]\n: x\n", "t.yaml:1: complex mapping keys "
                     "are not supported"));
    CHECK(yaml_fails("a: [[x]: 1]\n", "t.yaml:1: complex mapping keys are "
                     "not supported"));
    CHECK(yaml_fails("l: &l [1]\n*l : x\n", "t.yaml:2: complex mapping "
                     "keys are not supported"));
    CHECK(yaml_fails("- a\nb: 1\n", "t.yaml:2: did not find expected '-' "
                     "indicator (while parsing a block collection at line "
                     "1)"));
    /* An anchor names its node only once the node is complete: no cycles. */
    CHECK(yaml_fails("a: &a [1, *a]\n", "t.yaml:1: unknown alias"));
    /* Bytes that are not UTF-8 (libyaml's reader), with their line. */
    CHECK(yaml_fails("a: 1\nb: \xff\n", "t.yaml:2: invalid leading UTF-8 "
                     "octet"));
}

static void test_wandb_yaml__limits(void)
{
    /* Alias bombs and deep nesting are refused, not followed. */
    struct ckpt_buf b = CKPT_BUF_INIT;
    ckpt_buf_addstr(&b, "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for (int i = 1; i < 9; i++) {
        ckpt_buf_addf(&b, "a%d: &a%d [", i, i);
        for (int k = 0; k < 10; k++)
            ckpt_buf_addf(&b, "%s*a%d", k ? ", " : "", i - 1);
        ckpt_buf_addstr(&b, "]\n");
    }
    CHECK(yaml_fails(b.ptr, "t.yaml:6: too many nodes from aliases"));
    /* Few nodes, much text: 1 MiB copied 40 times passes the text cap. */
    ckpt_buf_reset(&b);
    ckpt_buf_addstr(&b, "s: &s \"");
    for (int i = 0; i < (1 << 20); i++)
        ckpt_buf_addch(&b, 'x');
    ckpt_buf_addstr(&b, "\"\nl: [");
    for (int i = 0; i < 40; i++)
        ckpt_buf_addstr(&b, "*s, ");
    ckpt_buf_addstr(&b, "]\n");
    CHECK(yaml_fails(b.ptr, "t.yaml:2: too much text from aliases"));
    /* Nesting fails at the cap, before the end (here unterminated). */
    ckpt_buf_reset(&b);
    for (int i = 0; i < 300; i++)
        ckpt_buf_addch(&b, '[');
    CHECK(yaml_fails(b.ptr, "t.yaml:1: nesting too deep"));
    for (int i = 0; i < 300; i++)
        ckpt_buf_addch(&b, ']');
    CHECK(yaml_fails(b.ptr, "t.yaml:1: nesting too deep"));
    ckpt_buf_reset(&b);
    for (int i = 0; i < 200; i++)
        ckpt_buf_addch(&b, '[');
    for (int i = 0; i < 200; i++)
        ckpt_buf_addch(&b, ']');
    cJSON *j = NULL;
    struct ckpt_err err = CKPT_ERR_INIT;
    CHECK(ckpt_yaml_parse(b.ptr, b.len, "t.yaml", &j, &err) == 0);
    cJSON_Delete(j);
    /* More nodes than the cap without aliases: the map, "l" and the
     * sequence are 3, so item 499,998 (line 499,999) is node 500,001. */
    ckpt_buf_reset(&b);
    ckpt_buf_addstr(&b, "l:\n");
    for (int i = 0; i < 500001; i++)
        ckpt_buf_addstr(&b, "- 1\n");
    CHECK(yaml_fails(b.ptr, "t.yaml:499999: too many nodes"));
    ckpt_buf_release(&b);
}

TEST_MAIN(T(test_wandb_yaml__olmo_config), T(test_wandb_yaml__wandb_go_config),
          T(test_wandb_yaml__scalars), T(test_wandb_yaml__quoted),
          T(test_wandb_yaml__block_scalars),
          T(test_wandb_yaml__flow_and_nesting),
          T(test_wandb_yaml__anchors_documents), T(test_wandb_yaml__keys),
          T(test_wandb_yaml__errors),
          T(test_wandb_yaml__limits))
