# s3env.sh - bash helpers around s3env.py for integration tests and
# benchmarks. Source it, then:
#   s3env_start [--no-proxy] [--bucket B]... [--proxy-arg ARG]...
#       starts s3rver (+ s3proxy), exports AWS_* for ckpt and aws-cli,
#       S3ENV_PROXY, S3ENV_S3RVER, S3ENV_BUCKET; stops on shell exit
#   s3env_stop
#   s3env_stats            the proxy's counters as JSON on stdout
#   s3env_reset_stats
#   s3env_faults JSON      e.g. s3env_faults '{"slowdown":0.3}'
S3ENV_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# The offline environment (offline.env): no credential source reaches past
# the loopback, so a test that finds no credentials fails here.
while IFS= read -r _line; do
    case $_line in
    '' | '#'*) ;;
    -*) unset "${_line#-}" ;;
    *) export "${_line?}" ;;
    esac
done <"$S3ENV_DIR/offline.env"
unset _line

s3env_start() {
    S3ENV_TMP=$(mktemp -d)
    /usr/bin/python3 "$S3ENV_DIR/s3env.py" serve \
        --env-file "$S3ENV_TMP/env" "$@" 2>"$S3ENV_TMP/log" &
    S3ENV_PID=$!
    local i
    for i in $(seq 1 300); do
        [ -f "$S3ENV_TMP/env" ] && break
        if ! kill -0 "$S3ENV_PID" 2>/dev/null; then
            cat "$S3ENV_TMP/log" >&2
            return 1
        fi
        sleep 0.1
    done
    [ -f "$S3ENV_TMP/env" ] || { echo "s3env: no start" >&2; return 1; }
    # shellcheck disable=SC1091
    . "$S3ENV_TMP/env"
    trap s3env_stop EXIT
}

s3env_stop() {
    if [ -n "${S3ENV_PID:-}" ]; then
        kill "$S3ENV_PID" 2>/dev/null || true
        wait "$S3ENV_PID" 2>/dev/null || true
        S3ENV_PID=
    fi
    [ -n "${S3ENV_TMP:-}" ] && rm -rf "$S3ENV_TMP"
    S3ENV_TMP=
}

# Python's urllib rather than curl(1): one dependency fewer on CI.
s3env_control() { # PATH [JSON-BODY]
    /usr/bin/python3 - "$S3ENV_PROXY" "$@" <<'PY'
import sys, urllib.request
host, path = sys.argv[1], sys.argv[2]
data = sys.argv[3].encode() if len(sys.argv) > 3 else None
with urllib.request.urlopen("http://%s/__proxy/%s" % (host, path), data,
                            timeout=30) as r:
    sys.stdout.write(r.read().decode())
PY
}

s3env_stats() {
    s3env_control stats
}

s3env_reset_stats() {
    s3env_control reset '{}'
}

s3env_faults() {
    s3env_control config "$1" >/dev/null
}
