#!/usr/bin/env bash
# bench/hf_trainer.sh - `ckpt unshard --format hf` of HF Trainer steps of
# a 1.07 GB Llama against the tools their users run today (time, peak
# RSS): `accelerate merge-weights` on an accelerate FSDP2 step, DeepSpeed's
# `zero_to_fp32.py --safe_serialization` on a ZeRO-3 step.
#
#   SID=/var/tmp/chroot-sid bash bench/hf_trainer.sh    # as root (chroot)
#
# The data, made once into $SID$W (W=/work-benchhf inside the chroot: the
# Debian sid chroot with torch 2.14.1, transformers 5.12.1, accelerate
# 1.14.0, DeepSpeed 0.19.6 sources at /opt/deepspeed) by the real-writer
# fixture generators in $GEN (hf_fsdp.py, hf_deepspeed.py, common.py,
# launch.sh; default tests/fixtures/real-writers/gen/), each run through
# bench/gen_hf_big.py on 2 CPU ranks (gloo): LlamaForCausalLM, 12 layers, hidden 1024,
# intermediate 4096, vocab 32000, untied, 267M float32 parameters (1.07
# GB); one AdamW step, saved by the Trainer:
#   fsdp/checkpoint-1/  HF Trainer + accelerate FSDP2, SHARDED_STATE_DICT
#                       (pytorch_model_fsdp_0/ and optimizer_0/, DCP);
#                       fsdp/config.json written beside it by the wrapper
#   ds/checkpoint-1/    HF Trainer + DeepSpeed ZeRO-3 (global_step1/,
#                       model.safetensors gathered on save, config.json,
#                       and the zero_to_fp32.py DeepSpeed puts there)
#
# Peers, the whole process under chroot: `accelerate merge-weights
# fsdp/checkpoint-1/pytorch_model_fsdp_0 OUT`, and in ds/checkpoint-1
# `python3 zero_to_fp32.py . OUT --safe_serialization`. ckpt runs on the
# host on what each peer reads: pytorch_model_fsdp_0/ (with --config-dir
# fsdp: the FSDP step holds no config.json) and global_step1/ (config.json
# from the directory above), default (fsync before the rename) and
# --no-sync (neither peer fsyncs). After every run each ckpt output's
# model.safetensors is compared with the peer's: byte for byte, or else
# tensor by tensor (names, dtypes, shapes, bytes); a difference stops the
# script. Times are medians of RUNS runs, peak RSS the largest seen, from
# /usr/bin/time -v (the peer: its python process); page cache warm for
# all. Prints Markdown tables; removes the outputs, keeps the data.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
CKPT=${CKPT:-build/ckpt}
SID=${SID:-/var/tmp/chroot-sid}
RUNS=${RUNS:-3}
GEN=${GEN:-tests/fixtures/real-writers/gen}
W=/work-benchhf                   # inside the chroot
CW=$SID$W
need_ckpt
[ "$(id -u)" = 0 ] || { echo "needs root (chroot)" >&2; exit 2; }
mountpoint -q "$SID/proc" || mount -t proc proc "$SID/proc"
SIDENV=(chroot "$SID" env -C "$W" DS_ACCELERATOR=cpu USE_LIBUV=0
        PYTHONPATH="/opt/deepspeed:$W/gen")

# --- the checkpoints ----------------------------------------------------------
make_step() {   # make_step NAME GENERATOR [ARG]
    [ -f "$CW/$1/checkpoint-1/trainer_state.json" ] && return 0
    mkdir -p "$CW/gen"
    cp "$GEN"/{hf_fsdp.py,hf_deepspeed.py,common.py,launch.sh} \
       bench/gen_hf_big.py "$CW/gen/"
    "${SIDENV[@]}" bash gen/launch.sh 2 29571 python3 gen/gen_hf_big.py \
        "gen/$2" ${3:+"$3"} "$W/$1"
}
make_step fsdp hf_fsdp.py 2
make_step ds hf_deepspeed.py

# same A B: exit unless the safetensors files A and B hold the same tensors;
# prints "byte for byte" or "same tensors".
same() {
    if cmp -s "$1" "$2"; then echo "byte for byte"; return; fi
    /usr/bin/python3 - "$1" "$2" <<'EOF'
import json, struct, sys
def tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        head.pop("__metadata__", None)
        out = {}
        for k, v in head.items():
            a, b = v["data_offsets"]
            f.seek(8 + n + a)
            out[k] = (v["dtype"], v["shape"], f.read(b - a))
        return out
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
if sorted(a) != sorted(b):
    sys.exit("names differ: %s" % sorted(set(a) ^ set(b)))
bad = [k for k in a if a[k] != b[k]]
if bad:
    sys.exit("tensors differ: %s" % bad[:5])
print("same tensors")
EOF
}

# bench TITLE PEER STEP WARM PEER-CMD...: RUNS rounds of the peer (in the
# chroot, writing $W/out-peer) and of ckpt on STEP (with the options in the
# array copts), default and --no-sync, after reading WARM (what both read)
# into the page cache; prints a table.
bench() {
    local title=$1 peer=$2 step=$3 i t r pt=() ct=() nt=() prss=0 crss=0
    local nrss=0 load0 eq=() e o warm=$4
    find "$warm" -type f -exec cat {} + >/dev/null
    shift 4
    load0=$(loadavg)
    for i in $(seq "$RUNS"); do
        rm -rf "$CW/out-peer"; sync
        read -r t r _ < <(measure "${SIDENV[@]}" "$@")
        pt+=("$t"); [ "$r" -gt "$prss" ] && prss=$r
        rm -rf "$CW/out-ckpt"; sync
        read -r t r _ < <(measure "$CKPT" unshard --no-progress --format hf \
                          "${copts[@]}" "$step" "$CW/out-ckpt")
        ct+=("$t"); [ "$r" -gt "$crss" ] && crss=$r
        rm -rf "$CW/out-nosync"; sync
        read -r t r _ < <(measure "$CKPT" unshard --no-progress --format hf \
                          "${copts[@]}" --no-sync "$step" "$CW/out-nosync")
        nt+=("$t"); [ "$r" -gt "$nrss" ] && nrss=$r
        for o in out-ckpt out-nosync; do
            e=$(same "$CW/$o/model.safetensors" \
                     "$CW/out-peer/model.safetensors") || {
                echo "$peer run $i: $o differs from the peer's" >&2; exit 1; }
            eq+=("$e")
        done
    done
    e=$(printf '%s\n' "${eq[@]}" | sort -u | paste -sd/)
    local p c n
    p=$(med "${pt[@]}"); c=$(med "${ct[@]}"); n=$(med "${nt[@]}")
    echo "### $title"
    echo
    echo "$(machine_line "$CW" "$load0");"
    echo "checkpoint-1/ $(gib "$(du -sb "$(dirname "$step")" | cut -f1)") GiB, of which both read $(gib "$(du -sb "$warm" | cut -f1)") GiB;"
    echo "model.safetensors $(gib "$(stat -c %s "$CW/out-peer/model.safetensors")") GiB;"
    echo "$RUNS runs, medians; ckpt's model.safetensors against the peer's after every run: $e."
    echo
    echo "| tool | wall s | peak RSS MiB | speed vs peer | memory vs peer |"
    echo "| --- | ---: | ---: | ---: | ---: |"
    echo "| $peer | $p | $((prss / 1024)) | 1x | 1 |"
    echo "| ckpt unshard --format hf | $c | $((crss / 1024)) | $(ratio "$p" "$c")x | 1/$((prss / crss)) |"
    echo "| ckpt ... --no-sync | $n | $((nrss / 1024)) | $(ratio "$p" "$n")x | 1/$((prss / nrss)) |"
    echo
    rm -rf "$CW/out-peer" "$CW/out-ckpt" "$CW/out-nosync"
}

copts=(--config-dir "$CW/fsdp")
bench "HF Trainer + accelerate FSDP2 step" "accelerate merge-weights" \
    "$CW/fsdp/checkpoint-1/pytorch_model_fsdp_0" \
    "$CW/fsdp/checkpoint-1/pytorch_model_fsdp_0" \
    accelerate merge-weights fsdp/checkpoint-1/pytorch_model_fsdp_0 out-peer
copts=()
bench "HF Trainer + DeepSpeed ZeRO-3 step" \
    "zero_to_fp32.py --safe_serialization" \
    "$CW/ds/checkpoint-1/global_step1" "$CW/ds/checkpoint-1/global_step1" \
    sh -c "cd ds/checkpoint-1 && exec python3 zero_to_fp32.py . $W/out-peer --safe_serialization"
