/*
 * test_cred.c - which source of credentials a location resolves to (the
 * AWS chain's order, the flags, the overrides), and the readers of what
 * the sources answer. Nothing here fetches: resolving only chooses, and
 * the sources themselves are asked in tests/integration/creds_*.py.
 */
#include <openssl/sha.h>

#include "ckpt/util.h"
#include "storage/s3_int.h"
#include "test.h"

static const char *vars[] = {
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
    "AWS_PROFILE", "S3_PROFILE", "R2_PROFILE", "GCS_PROFILE", "AWS_REGION",
    "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
    "AWS_ENDPOINT_URL_STS", "AWS_ENDPOINT_URL_SSO", "R2_ENDPOINT_URL",
    "GCS_ENDPOINT_URL", "GOOGLE_APPLICATION_CREDENTIALS",
    "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN", "AWS_ROLE_SESSION_NAME",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "AWS_EC2_METADATA_DISABLED",
    "AWS_EC2_METADATA_SERVICE_ENDPOINT",
    "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE", "CLOUDSDK_CONFIG",
    "GCE_METADATA_HOST", "GCE_METADATA_IP", "GCE_METADATA_ROOT",
};

/* One profile per step of the chain: p1 has everything, each next one
 * lacks the source the previous one used. */
static const char creds_ini[] =
    "[p1]\naws_access_key_id = P1FILE\naws_secret_access_key = s\n"
    "[p2]\naws_access_key_id = P2FILE\naws_secret_access_key = s\n"
    "[p3]\naws_access_key_id = P3FILE\naws_secret_access_key = s\n"
    "aws_session_token = p3token\n"
    "[half]\naws_access_key_id = HALF\n";

static const char config_ini[] =
    "[profile p1]\n"
    "region = eu-west-1\n"
    "web_identity_token_file = /p1/token\n"
    "role_arn = arn:aws:iam::1:role/p1\n"
    "sso_session = corp\nsso_account_id = 111\nsso_role_name = Dev\n"
    "credential_process = /bin/p1\n"
    "aws_access_key_id = P1CONF\naws_secret_access_key = s\n"
    "[profile p2]\n"
    "region = eu-west-2\n"
    "sso_session = corp\nsso_account_id = 222\nsso_role_name = Ops\n"
    "credential_process = /bin/p2\n"
    "aws_access_key_id = P2CONF\naws_secret_access_key = s\n"
    "[profile p3]\n"
    "credential_process = /bin/p3\n"
    "aws_access_key_id = P3CONF\naws_secret_access_key = s\n"
    "[profile p4]\n"
    "credential_process = /bin/p4 --with 'two words'\n"
    "aws_access_key_id = P4CONF\naws_secret_access_key = s\n"
    "[profile p5]\n"
    "aws_access_key_id = P5CONF\naws_secret_access_key = s\n"
    "[profile p6]\n"
    "region = ap-south-1\n"
    "[profile legacy]\n"
    "sso_start_url = https://corp.awsapps.com/start\n"
    "sso_region = us-east-2\nsso_account_id = 333\nsso_role_name = Old\n"
    "[profile partsso]\n"
    "sso_start_url = https://corp.awsapps.com/start\n"
    "[profile chained]\n"
    "role_arn = arn:aws:iam::1:role/x\nsource_profile = p5\n"
    "[profile stsep]\n"
    "web_identity_token_file = /t\nrole_arn = arn:aws:iam::1:role/s\n"
    "services = local\n"
    "[services local]\n"
    "sts =\n  endpoint_url = http://127.0.0.1:7001/\n"
    "[sso-session corp]\n"
    "sso_start_url = https://corp.awsapps.com/start\n"
    "sso_region = eu-central-1\n";

static char creds_path[512], config_path[512];

static void setup_env(void)
{
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        unsetenv(vars[i]);
    snprintf(creds_path, sizeof(creds_path), "%s/credentials",
             test_tmpdir());
    test_write_file(creds_path, creds_ini, sizeof(creds_ini) - 1);
    setenv("AWS_SHARED_CREDENTIALS_FILE", creds_path, 1);
    snprintf(config_path, sizeof(config_path), "%s/config", test_tmpdir());
    test_write_file(config_path, config_ini, sizeof(config_ini) - 1);
    setenv("AWS_CONFIG_FILE", config_path, 1);
    setenv("HOME", "/home/u", 1);
}

/* The source s3://bkt resolves to with cfg: its kind, and source. */
static struct s3_conf conf;

static int resolve(const struct ckpt_storage_cfg *cfg, struct ckpt_err *err)
{
    s3_conf_release(&conf);
    return s3_conf_resolve(&conf, CKPT_SCHEME_S3, "bkt", cfg, "s3://bkt",
                           err);
}

static void expect(const struct ckpt_storage_cfg *cfg,
                   enum st_cred_kind kind, const char *source)
{
    struct ckpt_err err = CKPT_ERR_INIT;
    CHECK(resolve(cfg, &err) == 0);
    if (!conf.cred) {
        fprintf(stderr, "  (%s)\n", err.msg);
        return;
    }
    CHECK_EQ(conf.cred->kind, kind);
    CHECK_STR(conf.cred->source, source);
}

static void test_cred__aws_chain_order(void)
{
    setup_env();
    setenv("AWS_PROFILE", "p1", 1);
    setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
    setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:9/c", 1);
    /* 1: the environment beats everything. */
    expect(NULL, ST_CRED_KEYS, "the environment");
    CHECK_STR(conf.cred->ak, "ENVKEY");
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    /* 2: web identity, the profile's; the environment's beats it. */
    expect(NULL, ST_CRED_WEB, "web identity (role arn:aws:iam::1:role/p1)");
    CHECK_STR(conf.cred->file, "/p1/token");
    CHECK_STR(conf.cred->url, "https://sts.eu-west-1.amazonaws.com");
    CHECK(conf.cred->session == NULL);
    setenv("AWS_WEB_IDENTITY_TOKEN_FILE", "/env/token", 1);
    setenv("AWS_ROLE_ARN", "arn:aws:iam::2:role/env", 1);
    setenv("AWS_ROLE_SESSION_NAME", "sess", 1);
    expect(NULL, ST_CRED_WEB, "web identity (role arn:aws:iam::2:role/env)");
    CHECK_STR(conf.cred->file, "/env/token");
    CHECK_STR(conf.cred->session, "sess");
    /* --profile: the environment's keys and web identity are not looked
     * at (aws-cli). */
    struct ckpt_storage_cfg flag = { .profile = "p1" };
    setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
    expect(&flag, ST_CRED_WEB, "web identity (role arn:aws:iam::1:role/p1)");
    CHECK_STR(conf.cred->file, "/p1/token");
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    unsetenv("AWS_WEB_IDENTITY_TOKEN_FILE");
    unsetenv("AWS_ROLE_ARN");
    unsetenv("AWS_ROLE_SESSION_NAME");
    /* 3: SSO. */
    setenv("AWS_PROFILE", "p2", 1);
    expect(NULL, ST_CRED_SSO, "profile 'p2' (SSO)");
    /* 4: the shared credentials file, 5: credential_process, 6: the
     * config file's keys. */
    setenv("AWS_PROFILE", "p3", 1);
    expect(NULL, ST_CRED_KEYS, "profile 'p3'");
    CHECK_STR(conf.cred->ak, "P3FILE");
    CHECK_STR(conf.cred->token, "p3token");
    setenv("AWS_PROFILE", "p4", 1);
    expect(NULL, ST_CRED_PROCESS, "profile 'p4' (credential_process)");
    CHECK_STR(conf.cred->command, "/bin/p4 --with 'two words'");
    setenv("AWS_PROFILE", "p5", 1);
    expect(NULL, ST_CRED_KEYS, "profile 'p5'");
    CHECK_STR(conf.cred->ak, "P5CONF");
    /* 7: container credentials, 8: EC2 instance metadata. */
    setenv("AWS_PROFILE", "p6", 1);
    expect(NULL, ST_CRED_CONTAINER, "container credentials");
    CHECK_STR(conf.cred->url, "http://127.0.0.1:9/c");
    unsetenv("AWS_CONTAINER_CREDENTIALS_FULL_URI");
    expect(NULL, ST_CRED_IMDS, "EC2 instance metadata");
    CHECK_STR(conf.cred->url, "http://169.254.169.254");
    CHECK_STR(conf.region, "ap-south-1");
    s3_conf_release(&conf);
}

static void test_cred__sso_settings(void)
{
    setup_env();
    setenv("AWS_PROFILE", "p2", 1);
    unsigned char md[20];
    char want[256];
    /* The cache file is named after the session's name... */
    SHA1((const unsigned char *)"corp", 4, md);
    int n = snprintf(want, sizeof(want), "/home/u/.aws/sso/cache/");
    for (int i = 0; i < 20; i++)
        n += snprintf(want + n, sizeof(want) - (size_t)n, "%02x", md[i]);
    snprintf(want + n, sizeof(want) - (size_t)n, ".json");
    expect(NULL, ST_CRED_SSO, "profile 'p2' (SSO)");
    CHECK_STR(conf.cred->file, want);
    CHECK_STR(conf.cred->url, "https://portal.sso.eu-central-1.amazonaws.com");
    CHECK_STR(conf.cred->account, "222");
    CHECK_STR(conf.cred->role, "Ops");
    setenv("AWS_ENDPOINT_URL_SSO", "http://127.0.0.1:7002/", 1);
    expect(NULL, ST_CRED_SSO, "profile 'p2' (SSO)");
    CHECK_STR(conf.cred->url, "http://127.0.0.1:7002");
    unsetenv("AWS_ENDPOINT_URL_SSO");
    /* ... or, for a legacy profile, after the start URL. */
    setenv("AWS_PROFILE", "legacy", 1);
    const char *url = "https://corp.awsapps.com/start";
    SHA1((const unsigned char *)url, strlen(url), md);
    n = snprintf(want, sizeof(want), "/home/u/.aws/sso/cache/");
    for (int i = 0; i < 20; i++)
        n += snprintf(want + n, sizeof(want) - (size_t)n, "%02x", md[i]);
    snprintf(want + n, sizeof(want) - (size_t)n, ".json");
    expect(NULL, ST_CRED_SSO, "profile 'legacy' (SSO)");
    CHECK_STR(conf.cred->file, want);
    CHECK_STR(conf.cred->url, "https://portal.sso.us-east-2.amazonaws.com");
    struct ckpt_err err;
    setenv("AWS_PROFILE", "partsso", 1);
    CHECK(resolve(NULL, &err) != 0);
    CHECK_STR(err.msg, "s3://bkt: profile 'partsso' uses SSO but has no "
                       "sso_region");
    s3_conf_release(&conf);
}

static void test_cred__endpoints_and_flags(void)
{
    setup_env();
    struct ckpt_err err;
    setenv("AWS_PROFILE", "p1", 1);
    /* STS: AWS_ENDPOINT_URL_STS, then AWS_ENDPOINT_URL, then the
     * profile's services section; the region's own otherwise. */
    setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:7000", 1);
    expect(NULL, ST_CRED_WEB, "web identity (role arn:aws:iam::1:role/p1)");
    CHECK_STR(conf.cred->url, "http://127.0.0.1:7000");
    setenv("AWS_ENDPOINT_URL_STS", "http://127.0.0.1:7003/", 1);
    expect(NULL, ST_CRED_WEB, "web identity (role arn:aws:iam::1:role/p1)");
    CHECK_STR(conf.cred->url, "http://127.0.0.1:7003");
    CHECK_STR(conf.endpoint, "http://127.0.0.1:7000");
    unsetenv("AWS_ENDPOINT_URL_STS");
    unsetenv("AWS_ENDPOINT_URL");
    setenv("AWS_PROFILE", "stsep", 1);
    expect(NULL, ST_CRED_WEB, "web identity (role arn:aws:iam::1:role/s)");
    CHECK_STR(conf.cred->url, "http://127.0.0.1:7001");
    /* --endpoint-url and --region beat every variable. */
    setenv("AWS_PROFILE", "p5", 1);
    setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:7004", 1);
    setenv("AWS_REGION", "us-west-1", 1);
    struct ckpt_storage_cfg flags = { .endpoint_url = "http://127.0.0.1:7005/",
                                      .region = "sa-east-1" };
    expect(&flags, ST_CRED_KEYS, "profile 'p5'");
    CHECK_STR(conf.endpoint, "http://127.0.0.1:7005");
    CHECK_STR(conf.region, "sa-east-1");
    expect(NULL, ST_CRED_KEYS, "profile 'p5'");
    CHECK_STR(conf.endpoint, "http://127.0.0.1:7004");
    CHECK_STR(conf.region, "us-west-1");
    unsetenv("AWS_ENDPOINT_URL_S3");
    /* --profile beats S3_PROFILE, which beats AWS_PROFILE. */
    setenv("S3_PROFILE", "p3", 1);
    expect(NULL, ST_CRED_KEYS, "profile 'p3'");
    struct ckpt_storage_cfg prof = { .profile = "p4" };
    expect(&prof, ST_CRED_PROCESS, "profile 'p4' (credential_process)");
    unsetenv("S3_PROFILE");
    /* An r2:// location without R2_PROFILE takes --profile's keys. */
    setenv("R2_ENDPOINT_URL", "https://acct.r2.cloudflarestorage.com", 1);
    s3_conf_release(&conf);
    CHECK(s3_conf_resolve(&conf, CKPT_SCHEME_R2, "bkt", &prof, "r2://bkt",
                          &err) == 0);
    CHECK_STR(conf.cred->source, "profile 'p4' (credential_process)");
    CHECK_STR(conf.region, "auto");
    s3_conf_release(&conf);
    setenv("R2_PROFILE", "p5", 1);
    CHECK(s3_conf_resolve(&conf, CKPT_SCHEME_R2, "bkt", &prof, "r2://bkt",
                          &err) == 0);
    CHECK_STR(conf.cred->source, "profile 'p5'");
    s3_conf_release(&conf);
}

static void test_cred__container_and_imds(void)
{
    setup_env();
    struct ckpt_err err;
    setenv("AWS_PROFILE", "p6", 1);
    setenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/x", 1);
    setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:1/", 1);
    setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "tok", 1);
    expect(NULL, ST_CRED_CONTAINER, "container credentials");
    CHECK_STR(conf.cred->url, "http://169.254.170.2/v2/credentials/x");
    CHECK_STR(conf.cred->auth, "tok");
    setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "/var/run/tok", 1);
    expect(NULL, ST_CRED_CONTAINER, "container credentials");
    CHECK_STR(conf.cred->file, "/var/run/tok");
    CHECK(conf.cred->auth == NULL);
    unsetenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
    /* A token only ever goes over plain http to a loopback or the
     * container agent's own address. */
    setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://10.0.0.1/c", 1);
    CHECK(resolve(NULL, &err) != 0);
    CHECK_STR(err.msg, "s3://bkt: AWS_CONTAINER_CREDENTIALS_FULL_URI must "
                       "be https, or http to a loopback or the container "
                       "agent's address");
    setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "https://10.0.0.1/c", 1);
    expect(NULL, ST_CRED_CONTAINER, "container credentials");
    unsetenv("AWS_CONTAINER_CREDENTIALS_FULL_URI");
    setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:7006/", 1);
    expect(NULL, ST_CRED_IMDS, "EC2 instance metadata");
    CHECK_STR(conf.cred->url, "http://127.0.0.1:7006");
    unsetenv("AWS_EC2_METADATA_SERVICE_ENDPOINT");
    setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE", "IPv6", 1);
    expect(NULL, ST_CRED_IMDS, "EC2 instance metadata");
    CHECK_STR(conf.cred->url, "http://[fd00:ec2::254]");
    s3_conf_release(&conf);
}

static void test_cred__refusals(void)
{
    setup_env();
    struct ckpt_err err;
    char want[1024];
    /* Nothing anywhere, the metadata service off: every place named. */
    setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
    CHECK(resolve(NULL, &err) != 0);
    CHECK_EQ(err.code, CKPT_EAUTH);
    snprintf(want, sizeof(want), "s3://bkt: no credentials: none in the "
             "environment (AWS_ACCESS_KEY_ID), web identity "
             "(AWS_WEB_IDENTITY_TOKEN_FILE), profile 'default' of %s and %s "
             "(keys, credential_process, SSO), container credentials "
             "(AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or _FULL_URI); EC2 "
             "instance metadata is off (AWS_EC2_METADATA_DISABLED)",
             creds_path, config_path);
    CHECK_STR(err.msg, want);
    /* On, it is the last resort; the places looked at are kept for its
     * failure. */
    unsetenv("AWS_EC2_METADATA_DISABLED");
    expect(NULL, ST_CRED_IMDS, "EC2 instance metadata");
    CHECK(conf.looked && !strncmp(conf.looked, "the environment", 15));
    setenv("AWS_ACCESS_KEY_ID", "ONLY", 1);
    CHECK(resolve(NULL, &err) != 0);
    CHECK_STR(err.msg, "s3://bkt: AWS_ACCESS_KEY_ID is set but "
                       "AWS_SECRET_ACCESS_KEY is not");
    unsetenv("AWS_ACCESS_KEY_ID");
    setenv("AWS_PROFILE", "half", 1);
    CHECK(resolve(NULL, &err) != 0);
    snprintf(want, sizeof(want), "s3://bkt: profile 'half' in %s has "
             "aws_access_key_id but not aws_secret_access_key", creds_path);
    CHECK_STR(err.msg, want);
    setenv("AWS_PROFILE", "nope", 1);
    CHECK(resolve(NULL, &err) != 0);
    snprintf(want, sizeof(want), "s3://bkt: profile 'nope' not found in %s "
             "or %s", creds_path, config_path);
    CHECK_STR(err.msg, want);
    setenv("AWS_PROFILE", "chained", 1);
    CHECK(resolve(NULL, &err) != 0);
    CHECK_EQ(err.code, CKPT_EUNSUPPORTED);
    CHECK_STR(err.msg, "s3://bkt: profile 'chained' assumes a role with "
                       "source_profile or credential_source, which ckpt "
                       "does not do: give ckpt that role's credentials "
                       "(e.g. credential_process = aws configure "
                       "export-credentials --profile chained)");
    setenv("AWS_PROFILE", "p6", 1);
    setenv("AWS_WEB_IDENTITY_TOKEN_FILE", "/t", 1);
    CHECK(resolve(NULL, &err) != 0);
    CHECK_STR(err.msg, "s3://bkt: web identity: a token file ('/t') but no "
                       "role to assume: set AWS_ROLE_ARN or the profile's "
                       "role_arn");
    s3_conf_release(&conf);
}

static int resolve_gs(struct ckpt_err *err)
{
    s3_conf_release(&conf);
    return s3_conf_resolve(&conf, CKPT_SCHEME_GS, "bkt", NULL, "gs://bkt",
                           err);
}

static void test_cred__gcs_chain(void)
{
    setup_env();
    struct ckpt_err err;
    char dir[512], adc[600];
    snprintf(dir, sizeof(dir), "%s/gcloud", test_tmpdir());
    mkdir(dir, 0700);
    snprintf(adc, sizeof(adc), "%s/application_default_credentials.json",
             dir);
    test_write_file(adc, "{}", 2);
    setenv("CLOUDSDK_CONFIG", dir, 1);
    setenv("GOOGLE_APPLICATION_CREDENTIALS", "/keys/sa.json", 1);
    setenv("GCS_PROFILE", "p5", 1);
    /* HMAC keys, then GOOGLE_APPLICATION_CREDENTIALS, gcloud's file, the
     * metadata server. */
    CHECK(resolve_gs(&err) == 0);
    CHECK_EQ(conf.cred->kind, ST_CRED_KEYS);
    CHECK_STR(conf.cred->ak, "P5CONF");
    unsetenv("GCS_PROFILE");
    CHECK(resolve_gs(&err) == 0);
    CHECK_EQ(conf.cred->kind, ST_CRED_GCS);
    CHECK_STR(conf.cred->source, "GOOGLE_APPLICATION_CREDENTIALS");
    CHECK_STR(conf.cred->file, "/keys/sa.json");
    unsetenv("GOOGLE_APPLICATION_CREDENTIALS");
    CHECK(resolve_gs(&err) == 0);
    CHECK_STR(conf.cred->source, "gcloud's application-default credentials");
    CHECK_STR(conf.cred->file, adc);
    unlink(adc);
    CHECK(resolve_gs(&err) == 0);
    CHECK_STR(conf.cred->source, "the GCE metadata server");
    CHECK_STR(conf.cred->oauth->token_uri, "http://metadata.google.internal/"
              "computeMetadata/v1/instance/service-accounts/default/token");
    CHECK_STR(conf.cred->oauth->probe_url, "http://169.254.169.254/");
    char want[1024];
    snprintf(want, sizeof(want), "GCS_PROFILE (HMAC keys), "
             "GOOGLE_APPLICATION_CREDENTIALS, %s (gcloud auth "
             "application-default login)", adc);
    CHECK_STR(conf.looked, want);
    /* google-auth's overrides: the host for the token, the IP for the
     * probe (the host when only it is given). */
    setenv("GCE_METADATA_HOST", "127.0.0.1:7007", 1);
    CHECK(resolve_gs(&err) == 0);
    CHECK_STR(conf.cred->oauth->token_uri, "http://127.0.0.1:7007/"
              "computeMetadata/v1/instance/service-accounts/default/token");
    CHECK_STR(conf.cred->oauth->probe_url, "http://127.0.0.1:7007/");
    setenv("GCE_METADATA_IP", "127.0.0.1:7008", 1);
    CHECK(resolve_gs(&err) == 0);
    CHECK_STR(conf.cred->oauth->probe_url, "http://127.0.0.1:7008/");
    unsetenv("GCE_METADATA_HOST");
    unsetenv("GCE_METADATA_IP");
    unsetenv("CLOUDSDK_CONFIG");
    CHECK(resolve_gs(&err) == 0);
    snprintf(want, sizeof(want), "GCS_PROFILE (HMAC keys), "
             "GOOGLE_APPLICATION_CREDENTIALS, /home/u/.config/gcloud/"
             "application_default_credentials.json (gcloud auth "
             "application-default login)");
    CHECK_STR(conf.looked, want);
    s3_conf_release(&conf);
}

static void test_cred__google_keys(void)
{
    struct gcs_oauth o;
    struct ckpt_err err;
    memset(&o, 0, sizeof(o));
    pthread_mutex_init(&o.mu, NULL);
    CHECK(gcs_oauth_parse_key(&o, "{\"type\":\"authorized_user\","
                              "\"client_id\":\"id\",\"client_secret\":"
                              "\"sec\",\"refresh_token\":\"rt\"}", "u.json",
                              &err) == 0);
    CHECK_EQ(o.kind, GCS_USER);
    CHECK_STR(o.token_uri, "https://oauth2.googleapis.com/token");
    gcs_oauth_release(&o);
    memset(&o, 0, sizeof(o));
    pthread_mutex_init(&o.mu, NULL);
    CHECK(gcs_oauth_parse_key(&o, "{\"type\":\"authorized_user\","
                              "\"client_id\":\"id\"}", "u.json", &err) != 0);
    CHECK_STR(err.msg, "'u.json': an authorized_user file needs client_id, "
                       "client_secret and refresh_token");
    gcs_oauth_release(&o);
    memset(&o, 0, sizeof(o));
    pthread_mutex_init(&o.mu, NULL);
    CHECK(gcs_oauth_parse_key(&o, "{\"type\":\"external_account\","
                              "\"audience\":\"x\"}", "wif.json", &err) != 0);
    CHECK_EQ(err.code, CKPT_EUNSUPPORTED);
    CHECK_STR(err.msg, "'wif.json': credentials of type 'external_account' "
                       "are not supported: give ckpt a service_account or "
                       "authorized_user key, or HMAC keys (GCS_PROFILE)");
    gcs_oauth_release(&o);
}

static void test_cred__readers(void)
{
    struct st_keys k;
    struct ckpt_err err;
    CHECK_EQ(st_parse_time("2024-05-01T12:00:00Z"), 1714564800);
    CHECK_EQ(st_parse_time("2024-05-01T12:00:00.123Z"), 1714564800);
    CHECK_EQ(st_parse_time("2024-05-01T13:00:00+01:00"), 1714564800);
    CHECK_EQ(st_parse_time("2024-05-01T12:00:00UTC"), 1714564800);
    CHECK_EQ(st_parse_time("tomorrow"), 0);

    CHECK(st_parse_cred_json("{\"Code\":\"Success\",\"Type\":\"AWS-HMAC\","
                             "\"AccessKeyId\":\"ASIA1\",\"SecretAccessKey\":"
                             "\"s\",\"Token\":\"t\",\"Expiration\":"
                             "\"2024-05-01T12:00:00Z\"}", ST_JSON_METADATA,
                             "m", &k, &err) == 0);
    CHECK_STR(k.ak, "ASIA1");
    CHECK_STR(k.token, "t");
    CHECK_EQ(k.expires, 1714564800);
    st_keys_release(&k);
    CHECK(st_parse_cred_json("{\"Code\":\"Failure\"}", ST_JSON_METADATA, "m",
                             &k, &err) != 0);
    CHECK_STR(err.msg, "m: the reply's Code is not Success");
    CHECK(st_parse_cred_json("{\"AccessKeyId\":\"A\",\"SecretAccessKey\":"
                             "\"s\"}", ST_JSON_METADATA, "m", &k, &err) != 0);
    CHECK_STR(err.msg, "m: the reply has no session token");
    /* credential_process: Version 1; no Expiration is "never". */
    CHECK(st_parse_cred_json("{\"Version\":1,\"AccessKeyId\":\"A\","
                             "\"SecretAccessKey\":\"s\"}", ST_JSON_PROCESS,
                             "p", &k, &err) == 0);
    CHECK(k.token == NULL && k.expires == 0);
    st_keys_release(&k);
    CHECK(st_parse_cred_json("{\"Version\":2,\"AccessKeyId\":\"A\","
                             "\"SecretAccessKey\":\"s\"}", ST_JSON_PROCESS,
                             "p", &k, &err) != 0);
    CHECK_STR(err.msg, "p: the output's Version is not 1 (the only one "
                       "there is)");
    CHECK(st_parse_cred_json("{\"roleCredentials\":{\"accessKeyId\":\"A\","
                             "\"secretAccessKey\":\"s\",\"sessionToken\":"
                             "\"t\",\"expiration\":1714564800000}}",
                             ST_JSON_SSO, "s", &k, &err) == 0);
    CHECK_EQ(k.expires, 1714564800);
    st_keys_release(&k);
    const char sts[] =
        "<AssumeRoleWithWebIdentityResponse xmlns=\"https://sts.amazonaws."
        "com/doc/2011-06-15/\"><AssumeRoleWithWebIdentityResult>"
        "<Credentials><AccessKeyId>ASIA2</AccessKeyId><SecretAccessKey>s&amp;"
        "</SecretAccessKey><SessionToken>t</SessionToken><Expiration>"
        "2024-05-01T12:00:00Z</Expiration></Credentials>"
        "</AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentity"
        "Response>";
    CHECK(st_parse_sts_xml(sts, sizeof(sts) - 1, "w", &k, &err) == 0);
    CHECK_STR(k.sk, "s&");
    CHECK_EQ(k.expires, 1714564800);
    st_keys_release(&k);
    CHECK(st_parse_sts_xml("<x/>", 4, "w", &k, &err) != 0);
    CHECK(st_parse_sso_cache("{\"accessToken\":\"a\",\"expiresAt\":"
                             "\"2024-05-01T12:00:00Z\"}", "c", &k, &err) == 0);
    CHECK_STR(k.token, "a");
    st_keys_release(&k);
}

static void test_cred__words(void)
{
    char **w = st_split_words("  /bin/helper --a 'b c' \"d \\\"e\\\"\" "
                              "f\\ g ");
    CHECK(w != NULL);
    if (w) {
        CHECK_STR(w[0], "/bin/helper");
        CHECK_STR(w[1], "--a");
        CHECK_STR(w[2], "b c");
        CHECK_STR(w[3], "d \"e\"");
        CHECK_STR(w[4], "f g");
        CHECK(w[5] == NULL);
        for (int i = 0; w[i]; i++)
            free(w[i]);
        free(w);
    }
    CHECK(st_split_words("a 'b") == NULL);
    w = st_split_words("");
    CHECK(w && !w[0]);
    free(w);
}

static void test_cred__refresh_time(void)
{
    /* Five minutes early; halfway for keys that live under ten. */
    CHECK_EQ(st_cred_refresh_time(1000, 1000 + 3600), 1000 + 3300);
    CHECK_EQ(st_cred_refresh_time(1000, 1000 + 20), 1010);
    CHECK_EQ(st_cred_refresh_time(1000, 0), 0);
}

TEST_MAIN(T(test_cred__aws_chain_order), T(test_cred__sso_settings),
          T(test_cred__endpoints_and_flags), T(test_cred__container_and_imds),
          T(test_cred__refusals), T(test_cred__gcs_chain),
          T(test_cred__google_keys), T(test_cred__readers),
          T(test_cred__words), T(test_cred__refresh_time))
