/*
 * test_s3.c - the object-storage client's pure parts: configuration
 * resolution (env, profiles, endpoints; the credential chains are in
 * test_cred.c), INI and XML readers, part sizes, the retry policy.
 * Network behaviour is in tests/integration/s3_*.
 */
#include "ckpt/util.h"
#include "storage/s3_int.h"
#include "test.h"

static const char *vars[] = {
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
    "AWS_PROFILE", "S3_PROFILE", "R2_PROFILE", "GCS_PROFILE", "AWS_REGION",
    "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
    "R2_ENDPOINT_URL", "GCS_ENDPOINT_URL", "GOOGLE_APPLICATION_CREDENTIALS",
    "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",
};

static const char creds_ini[] =
    "[default]\n"
    "aws_access_key_id = DEFAULTKEY\n"
    "aws_secret_access_key = defaultsecret\n"
    "\n"
    "# a comment\n"
    "[r2]\n"
    "aws_access_key_id=R2KEY\n"
    "aws_secret_access_key=r2secret\n"
    "[gcs]\n"
    "aws_access_key_id = GOOGKEY\n"
    "aws_secret_access_key = googsecret\n"
    "[tok]\n"
    "aws_access_key_id = ASIAKEY\n"
    "aws_secret_access_key = toksecret\n"
    "aws_session_token = thetoken\n";

static const char config_ini[] =
    "[default]\n"
    "region = eu-west-1\n"
    "[profile r2]\n"
    "services = r2svc\n"
    "[services r2svc]\n"
    "s3 =\n"
    "  endpoint_url = https://acct.r2.cloudflarestorage.com\n"
    "[profile tok]\n"
    "region = us-west-2\n"
    "endpoint_url = http://127.0.0.1:9000/\n"
    "[profile nested]\n"
    "aws_access_key_id = NESTKEY\n"
    "aws_secret_access_key = nestsecret\n"
    "s3 =\n"
    "    endpoint_url = http://minio:9000\n"
    "    addressing_style = path\n";

static void setup_env(void)
{
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        unsetenv(vars[i]);
    char path[512];
    snprintf(path, sizeof(path), "%s/credentials", test_tmpdir());
    test_write_file(path, creds_ini, sizeof(creds_ini) - 1);
    setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
    snprintf(path, sizeof(path), "%s/config", test_tmpdir());
    test_write_file(path, config_ini, sizeof(config_ini) - 1);
    setenv("AWS_CONFIG_FILE", path, 1);
}

static void test_s3__ini(void)
{
    struct ini *ini = st_ini_parse(config_ini);
    CHECK_STR(st_ini_get(ini, "default", NULL, "region"), "eu-west-1");
    CHECK_STR(st_ini_get(ini, "services r2svc", "s3", "endpoint_url"),
              "https://acct.r2.cloudflarestorage.com");
    CHECK_STR(st_ini_get(ini, "profile nested", "s3", "addressing_style"),
              "path");
    CHECK(st_ini_get(ini, "profile nested", NULL, "endpoint_url") == NULL);
    CHECK(st_ini_has_section(ini, "profile tok"));
    CHECK(!st_ini_has_section(ini, "tok"));
    st_ini_free(ini);
}

static void test_s3__env_keys_default_profile(void)
{
    setup_env();
    struct s3_conf c;
    struct ckpt_err err;
    CHECK(s3_conf_resolve(&c, CKPT_SCHEME_S3, "bkt", NULL, "s3://bkt",
                          &err) == 0);
    CHECK_STR(c.cred->ak, "DEFAULTKEY");
    CHECK_STR(c.region, "eu-west-1");
    CHECK_STR(c.endpoint, "https://s3.eu-west-1.amazonaws.com");
    CHECK(c.virtual_host);
    s3_conf_release(&c);

    setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
    setenv("AWS_SESSION_TOKEN", "envtoken", 1);
    setenv("AWS_REGION", "ap-south-1", 1);
    setenv("AWS_DEFAULT_REGION", "ignored-1", 1);
    CHECK(s3_conf_resolve(&c, CKPT_SCHEME_S3, "my.bkt", NULL, "s3://my.bkt",
                          &err) == 0);
    CHECK_STR(c.cred->ak, "ENVKEY");
    CHECK_STR(c.cred->token, "envtoken");
    CHECK_STR(c.region, "ap-south-1");
    CHECK(!c.virtual_host); /* dotted bucket: path-style */
    s3_conf_release(&c);
}

static void test_s3__profiles_and_endpoints(void)
{
    setup_env();
    struct s3_conf c;
    struct ckpt_err err;
    setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
    /* S3_PROFILE is like --profile: it beats the environment's keys. */
    setenv("S3_PROFILE", "tok", 1);
    CHECK(s3_conf_resolve(&c, CKPT_SCHEME_S3, "bkt", NULL, "s3://bkt",
                          &err) == 0);
    CHECK_STR(c.cred->ak, "ASIAKEY");
    CHECK_STR(c.cred->token, "thetoken");
    CHECK_STR(c.region, "us-west-2");
    CHECK_STR(c.endpoint, "http://127.0.0.1:9000");
    CHECK(!c.virtual_host);
    s3_conf_release(&c);

    setenv("AWS_ENDPOINT_URL", "http://global:1", 1);
    setenv("AWS_ENDPOINT_URL_S3", "http://s3only:2", 1);
    CHECK(s3_conf_resolve(&c, CKPT_SCHEME_S3, "bkt", NULL, "s3://bkt",
                          &err) == 0);
    CHECK_STR(c.endpoint, "http://s3only:2");
    s3_conf_release(&c);
    setenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true", 1);
    CHECK(s3_conf_resolve(&c, CKPT_SCHEME_S3, "bkt", NULL, "s3://bkt",
                          &err) == 0);
    CHECK_STR(c.endpoint, "https://s3.us-west-2.amazonaws.com");
    s3_conf_release(&c);
    unsetenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS");
    unsetenv("AWS_ENDPOINT_URL");
    unsetenv("AWS_ENDPOINT_URL_S3");

    setenv("S3_PROFILE", "nested", 1);
    CHECK(s3_conf_resolve(&c, CKPT_SCHEME_S3, "bkt", NULL, "s3://bkt",
                          &err) == 0);
    CHECK_STR(c.endpoint, "http://minio:9000");
    s3_conf_release(&c);

    setenv("S3_PROFILE", "nope", 1);
    CHECK(s3_conf_resolve(&c, CKPT_SCHEME_S3, "bkt", NULL, "s3://bkt",
                          &err) != 0);
    CHECK_EQ(err.code, CKPT_EAUTH);
    char want[1024];
    snprintf(want, sizeof(want), "s3://bkt: profile 'nope' not found in "
             "%s/credentials or %s/config", test_tmpdir(), test_tmpdir());
    CHECK_STR(err.msg, want);
}

static void test_s3__r2_and_gcs(void)
{
    setup_env();
    struct s3_conf c;
    struct ckpt_err err;
    setenv("R2_PROFILE", "r2", 1);
    CHECK(s3_conf_resolve(&c, CKPT_SCHEME_R2, "bkt", NULL, "r2://bkt",
                          &err) == 0);
    CHECK_STR(c.cred->ak, "R2KEY");
    CHECK_STR(c.region, "auto");
    CHECK_STR(c.endpoint, "https://acct.r2.cloudflarestorage.com");
    CHECK(!c.virtual_host);
    s3_conf_release(&c);
    setenv("R2_ENDPOINT_URL", "https://other.r2.cloudflarestorage.com", 1);
    CHECK(s3_conf_resolve(&c, CKPT_SCHEME_R2, "bkt", NULL, "r2://bkt",
                          &err) == 0);
    CHECK_STR(c.endpoint, "https://other.r2.cloudflarestorage.com");
    s3_conf_release(&c);
    unsetenv("R2_ENDPOINT_URL");
    unsetenv("R2_PROFILE");
    CHECK(s3_conf_resolve(&c, CKPT_SCHEME_R2, "bkt", NULL, "r2://bkt",
                          &err) != 0);
    CHECK_STR(err.msg, "r2://bkt: no R2 endpoint: set R2_ENDPOINT_URL "
                       "(https://ACCOUNT.r2.cloudflarestorage.com)");

    setenv("GCS_PROFILE", "gcs", 1);
    CHECK(s3_conf_resolve(&c, CKPT_SCHEME_GS, "bkt", NULL, "gs://bkt",
                          &err) == 0);
    CHECK_STR(c.cred->ak, "GOOGKEY");
    CHECK_STR(c.endpoint, "https://storage.googleapis.com");
    CHECK_STR(c.region, "auto");
    s3_conf_release(&c);
    unsetenv("GCS_PROFILE");
    setenv("GOOGLE_APPLICATION_CREDENTIALS", "/x/sa.json", 1);
    setenv("GCS_ENDPOINT_URL", "http://127.0.0.1:1", 1);
    CHECK(s3_conf_resolve(&c, CKPT_SCHEME_GS, "bkt", NULL, "gs://bkt",
                          &err) == 0);
    CHECK_EQ(c.cred->kind, ST_CRED_GCS);
    CHECK_STR(c.cred->file, "/x/sa.json");
    CHECK(c.cred->ak == NULL);
    CHECK_STR(c.endpoint, "http://127.0.0.1:1");
    s3_conf_release(&c);
}

static void test_s3__xml(void)
{
    const char *x = "<?xml version=\"1.0\"?><ListBucketResult xmlns=\"x\">"
                    "<Contents><Key>a &amp; b&#x2F;&#233;</Key><Size>5"
                    "</Size></Contents><Contents><Key>c</Key></Contents>"
                    "<Empty/></ListBucketResult>";
    size_t pos = 0, n;
    const char *in;
    struct ckpt_buf b = CKPT_BUF_INIT;
    CHECK(st_xml_next(x, strlen(x), &pos, "Contents", &in, &n) == 0);
    CHECK(st_xml_text(in, n, "Key", &b) == 0);
    CHECK_STR(b.ptr, "a & b/\xc3\xa9");
    CHECK(st_xml_next(x, strlen(x), &pos, "Contents", &in, &n) == 0);
    CHECK(st_xml_next(x, strlen(x), &pos, "Contents", &in, &n) != 0);
    pos = 0;
    CHECK(st_xml_next(x, strlen(x), &pos, "Empty", &in, &n) == 0 && n == 0);
    ckpt_buf_reset(&b);
    st_xml_escape(&b, "<a&'\">\n");
    CHECK_STR(b.ptr, "&lt;a&amp;&apos;&quot;&gt;&#10;");
    ckpt_buf_release(&b);
}

static void test_s3__part_size(void)
{
    const uint64_t MiB = 1 << 20;
    CHECK_EQ(s3_part_size(100, 0), 8 * MiB);
    CHECK_EQ(s3_part_size(100 * 1024 * MiB, 0), 11 * MiB);
    /* 5 TiB (known or not) fits in 10,000 whole-MiB parts. */
    uint64_t five_tib = 5ull << 40;
    uint64_t p = s3_part_size(five_tib, 0);
    CHECK(p % MiB == 0 && (five_tib + p - 1) / p <= 10000);
    CHECK_EQ(s3_part_size(UINT64_MAX, 0), p);
    CHECK_EQ(s3_part_size(100, 5 * MiB), 5 * MiB);
}

static void test_s3__retry_policy(void)
{
    struct http_resp r;
    http_resp_init(&r);
    r.status = 503;
    CHECK(http_retryable(&r, "SlowDown", ""));
    r.status = 429;
    CHECK(http_retryable(&r, "", ""));
    r.status = 400;
    CHECK(http_retryable(&r, "RequestTimeout", ""));
    CHECK(!http_retryable(&r, "InvalidArgument", ""));
    /* R2's throttle is recognised by its message whatever its code. */
    CHECK(http_retryable(&r, "Whatever", "Reduce your concurrent request "
                         "rate for the same object."));
    r.status = 403;
    CHECK(!http_retryable(&r, "AccessDenied", ""));
    r.status = 404;
    CHECK(!http_retryable(&r, "NoSuchKey", ""));
    r.status = 0;
    r.curl = CURLE_RECV_ERROR;
    CHECK(http_retryable(&r, "", ""));
    r.curl = CURLE_SSL_CACERT_BADFILE;
    CHECK(!http_retryable(&r, "", ""));
    for (int a = 1; a < 40; a++) {
        double d = http_backoff(a, -1);
        CHECK(d >= 0 && d <= 20.0);
    }
    CHECK(http_backoff(1, 3.0) == 3.0);   /* Retry-After honoured */
    CHECK(http_backoff(1, 1e6) == 120.0); /* but bounded */
    http_resp_release(&r);
}

static void test_s3__iso8601(void)
{
    CHECK_EQ(s3_parse_iso8601("2015-08-30T12:36:00.000Z"), 1440938160);
    CHECK_EQ(s3_parse_iso8601("garbage"), 0);
}

static void url_of(const char *endpoint, int vhost, const char *key,
                   const char *want_host, const char *want_url)
{
    struct s3 s3;
    memset(&s3, 0, sizeof(s3));
    s3.conf.endpoint = (char *)endpoint;
    s3.conf.virtual_host = vhost;
    s3.bucket = "bkt";
    struct ckpt_err err;
    CHECK(s3_parse_endpoint(&s3, "s3://bkt", &err) == 0);
    CHECK_STR(s3.host, want_host);
    struct s3_req r;
    s3_req_init(&r, "GET", key);
    if (!key) {
        s3_req_param(&r, "prefix", "a b/");
        s3_req_param(&r, "list-type", "2");
    }
    struct ckpt_buf u = CKPT_BUF_INIT;
    s3_url(&s3, &r, &u);
    CHECK_STR(u.ptr, want_url);
    ckpt_buf_release(&u);
    free(s3.host);
    free(s3.scheme_host);
    free(s3.base_path);
}

static void test_s3__urls(void)
{
    /* Path-style, non-default port kept (and signed as Host). */
    url_of("http://127.0.0.1:4568", 0, "run 1/a+b=c\xc3\xa9~",
           "127.0.0.1:4568",
           "http://127.0.0.1:4568/bkt/run%201/a%2Bb%3Dc%C3%A9~");
    /* Default ports are left out, as curl leaves them out of Host. */
    url_of("https://minio.local:443/base", 0, "k", "minio.local",
           "https://minio.local/base/bkt/k");
    url_of("http://h:80", 0, NULL, "h",
           "http://h/bkt/?list-type=2&prefix=a%20b%2F");
    /* Virtual-hosted: the bucket moves into the host name. */
    url_of("https://s3.us-east-1.amazonaws.com", 1, "x//y",
           "bkt.s3.us-east-1.amazonaws.com",
           "https://bkt.s3.us-east-1.amazonaws.com/x//y");
}

TEST_MAIN(T(test_s3__urls), T(test_s3__ini), T(test_s3__env_keys_default_profile),
          T(test_s3__profiles_and_endpoints), T(test_s3__r2_and_gcs),
          T(test_s3__xml), T(test_s3__part_size),
          T(test_s3__retry_policy), T(test_s3__iso8601))
