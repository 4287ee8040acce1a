#!/usr/bin/env bash
# upload_no_md5.sh - an OpenSSL without MD5 (FIPS-style properties, no
# FIPS provider) makes `ckpt upload` fail SRC with an error and exit 1,
# not abort: MD5 is checked before anything is sent.
. "$(dirname "$0")/../support/lib.sh"
# ckpt upload's rows without the total row that ends them; its status.
cd "$T" || exit 1
mkdir src
printf 'one\n' >src/a.txt
cat >nomd5.cnf <<'CNF'
openssl_conf = openssl_init
[openssl_init]
alg_section = evp_properties
[evp_properties]
default_properties = fips=yes
CNF
out=$(OPENSSL_CONF=$T/nomd5.cnf up src dst 2>err)
check "exit 1, no abort" 1 $?
check "failed row" "error	src	dst	MD5 is not available in this OpenSSL (FIPS mode?); upload needs it for S3 checksums and ETags" "$out"
check "nothing written" "" "$(ls -A . | grep -v '^src$\|^nomd5.cnf$\|^err$')"
check "no abort message" "" "$(grep -i abort err)"
# The same upload with the system's OpenSSL works.
"$CKPT" upload -q src dst
check "normal upload" "" "$(diff -r src dst)"
finish
