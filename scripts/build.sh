#!/usr/bin/env bash
# Configure and build into build/ (or $1 with extra cmake args after it),
# warnings as errors (CKPT_WERROR; a plain cmake leaves it off).
# CKPT_BUILD_TARGET=ckpt builds that target only (the demo).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}; shift || true
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCKPT_WERROR=ON "$@" >/dev/null
cmake --build "$dir" -j"$(nproc)" ${CKPT_BUILD_TARGET:+--target "$CKPT_BUILD_TARGET"}
