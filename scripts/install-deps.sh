#!/usr/bin/env bash
# Install what ckpt needs on Debian 12, as root or through sudo (only
# when not root and something is missing).
#   scripts/install-deps.sh          build dependencies
#   scripts/install-deps.sh --demo   plus what scripts/demo.sh uses
#   scripts/install-deps.sh --test   plus what the test suite uses
set -euo pipefail
cd "$(dirname "$0")/.."

build_pkgs=(build-essential cmake pkg-config libcurl4-openssl-dev
            libarchive-dev libzstd-dev libcjson-dev libssl-dev libblosc-dev
            libyaml-dev liblzma-dev libbz2-dev libisal-dev ca-certificates
            go-md2man)
test_pkgs=(clang libclang-rt-14-dev python3 python3-torch python3-botocore
           awscli python3-zarr python3-numcodecs python3-yaml python3-jsonschema
           nodejs npm
           zstd xz-utils bzip2 lbzip2 pbzip2 pigz zip unzip tar time parallel
           slurm-wlm munge strace mount)
demo_pkgs=(python3 tar zstd xz-utils bzip2 zip)

pkgs=("${build_pkgs[@]}")
case "${1:-}" in
    --test) pkgs+=("${test_pkgs[@]}") ;;
    --demo) pkgs+=("${demo_pkgs[@]}") ;;
esac

missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
        missing+=("$p")
done
# Node may come from outside Debian (a preinstalled /usr/bin/node); then
# do not ask apt for it.
if command -v node >/dev/null && command -v npm >/dev/null; then
    missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
fi
missing=($(printf '%s\n' "${missing[@]}" | grep -v '^$' || true))
if [ ${#missing[@]} -gt 0 ]; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || {
            echo "install-deps.sh: missing ${missing[*]}; run as root" \
                 "(or install sudo)" >&2
            exit 1
        }
        SUDO=sudo
    fi
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

if [ "${1:-}" = "--test" ] && [ -f tests/support/package.json ]; then
    # s3rver, the local S3 server of the integration tests (pinned).
    (cd tests/support && { [ -d node_modules/s3rver ] || npm ci --no-audit --no-fund --loglevel=error; })
fi
