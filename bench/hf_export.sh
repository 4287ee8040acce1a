#!/usr/bin/env bash
# bench/hf_export.sh - `ckpt unshard --format hf` of a 1.5 GB OLMo 2 step
# against transformers' own path to the same HF directory (time, peak RSS),
# and --part N against one process (the work all parts do together).
#
#   SID=/var/tmp/chroot-sid CONVERT_OLMO2=/path/convert_olmo2_weights_to_hf.py \
#       bash bench/hf_export.sh        # as root
#
# The model: tests/support/make_olmo_hf.py's olmo2-big (OLMo 2, 16 layers,
# d_model 1024, 371M parameters, 1.5 GB of float32). Made once into
# $DATA (default /var/tmp/ckpt-bench-hf): the sharded step (OLMo
# torch_new: DCP, 4 ranks, written by Debian's torch 1.13; model only,
# --no-optim, which the export never reads) on the host, and model.pt +
# config.yaml inside the chroot $SID (torch 2.14, transformers 5.12.1).
#
# Reference: transformers' convert_olmo2_weights_to_hf.py (not in this
# project: download it, see scripts/fixtures/gen-olmo-hf.sh) run in the
# chroot through scripts/fixtures/run_convert.py with --no_tokenizer, from
# model.pt: what a user runs after OLMo's own unsharder. ckpt starts from
# the sharded step (so it also does the unshard). ckpt's output must equal
# the script's byte for byte (cmp of model.safetensors and config.json).
#
# Times are medians of RUNS runs, peak RSS the largest seen, from
# /usr/bin/time -v; page cache warm for all. --part: each of N parts run
# one after another on this machine, their wall and CPU times summed, to
# compare the work N nodes do together with one process's.
# Prints Markdown tables.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
CKPT=${CKPT:-build/ckpt}
SID=${SID:-/var/tmp/chroot-sid}
DATA=${DATA:-/var/tmp/ckpt-bench-hf}
RUNS=${RUNS:-3}
PARTS=${PARTS:-4}
W=/work-bench-hf                  # inside the chroot
CW=$SID$W
need_ckpt
[ "$(id -u)" = 0 ] || { echo "needs root (chroot)" >&2; exit 2; }
mountpoint -q "$SID/proc" || mount -t proc proc "$SID/proc"

# --- the checkpoint -----------------------------------------------------
if [ ! -d "$DATA/step/ckpt" ]; then
    mkdir -p "$DATA"
    /usr/bin/python3 tests/support/make_olmo_hf.py sharded "$DATA/step" \
        --case olmo2-big --format torch_new --ranks 4 --no-optim
fi
if [ ! -f "$CW/in/olmo2-big/model.pt" ]; then
    mkdir -p "$CW/gen"
    cp tests/support/{make_olmo_hf.py,torchshim.py} \
       scripts/fixtures/run_convert.py "$CW/gen/"
    chroot "$SID" env -C "$W" python3 gen/make_olmo_hf.py unsharded in \
        --case olmo2-big
fi
step=$DATA/step/ckpt
load0=$(loadavg)
bytes=$(du -sbL "$step" | cut -f1)
cat "$step"/model_and_optim/* "$CW/in/olmo2-big/model.pt" >/dev/null

# --- transformers' script against ckpt ------------------------------------
r_t=(); c_t=(); n_t=(); r_rss=0; c_rss=0; n_rss=0; c_cpu=(); have_ref=0
if [ -n "${CONVERT_OLMO2:-}" ]; then
    cp "$CONVERT_OLMO2" "$CW/gen/convert_olmo2_weights_to_hf.py"
    have_ref=1
fi
for i in $(seq "$RUNS"); do
    if [ "$have_ref" = 1 ]; then
        rm -rf "$CW/out-ref"; sync
        read -r t r _ < <(measure chroot "$SID" env -C "$W" python3 \
            gen/run_convert.py gen/convert_olmo2_weights_to_hf.py \
            --input_dir in/olmo2-big --output_dir out-ref --no_tokenizer)
        r_t+=("$t"); [ "$r" -gt "$r_rss" ] && r_rss=$r
    fi
    rm -rf "$DATA/out"; sync
    read -r t r c < <(measure "$CKPT" unshard --no-progress --format hf \
                      "$step" "$DATA/out")
    c_t+=("$t"); c_cpu+=("$c"); [ "$r" -gt "$c_rss" ] && c_rss=$r
    rm -rf "$DATA/out-nosync"; sync
    read -r t r _ < <(measure "$CKPT" unshard --no-progress --format hf \
                      --no-sync "$step" "$DATA/out-nosync")
    n_t+=("$t"); [ "$r" -gt "$n_rss" ] && n_rss=$r
done
same="not compared (no reference)"
if [ "$have_ref" = 1 ]; then
    same=identical
    for f in model.safetensors config.json generation_config.json; do
        cmp -s "$DATA/out/$f" "$CW/out-ref/$f" || same="DIFFERENT ($f)"
    done
fi
echo "## HF export of a 1.5 GB OLMo 2 step (\`bench/hf_export.sh\`)"
echo
echo "$(machine_line "$DATA" "$load0"); sharded step $(gib "$bytes") GiB (torch_new, 4 ranks),"
echo "$RUNS runs, medians; output byte for byte: $same."
echo
echo "| tool | wall s | peak RSS MiB | speed vs script | memory vs script |"
echo "| --- | ---: | ---: | ---: | ---: |"
ct=$(med "${c_t[@]}"); nt=$(med "${n_t[@]}")
if [ "$have_ref" = 1 ]; then
    rt=$(med "${r_t[@]}")
    echo "| convert_olmo2_weights_to_hf.py (from model.pt) | $rt | $((r_rss / 1024)) | 1x | 1 |"
    echo "| ckpt unshard --format hf (from the shards) | $ct | $((c_rss / 1024)) | $(ratio "$rt" "$ct")x | 1/$((r_rss / c_rss)) |"
    echo "| ckpt ... --no-sync | $nt | $((n_rss / 1024)) | $(ratio "$rt" "$nt")x | 1/$((r_rss / n_rss)) |"
else
    echo "| ckpt unshard --format hf | $ct | $((c_rss / 1024)) | - | - |"
    echo "| ckpt ... --no-sync | $nt | $((n_rss / 1024)) | - | - |"
fi

# --- --part N against one process ------------------------------------------
rm -rf "$DATA/parts"
p_wall=0; p_cpu=0; p_rss=0
rows=""
for i in $(seq 0 $((PARTS - 1))); do
    sync
    read -r t r c < <(measure "$CKPT" unshard --no-progress --format hf \
                      --max-shard-size 200M --part "$i/$PARTS" "$step" \
                      "$DATA/parts")
    p_wall=$(awk -v a="$p_wall" -v b="$t" 'BEGIN { print a + b }')
    p_cpu=$(awk -v a="$p_cpu" -v b="$c" 'BEGIN { print a + b }')
    [ "$r" -gt "$p_rss" ] && p_rss=$r
    rows="$rows| part $i/$PARTS | $t | $c | $((r / 1024)) |\n"
done
rm -rf "$DATA/one"; sync
read -r ot or oc < <(measure "$CKPT" unshard --no-progress --format hf \
                     --max-shard-size 200M "$step" "$DATA/one")
psame=identical
diff -rq "$DATA/parts" "$DATA/one" >/dev/null || psame=DIFFERENT
echo
echo "### --part $PARTS (shards of 200 MiB), parts run one after another"
echo
echo "| run | wall s | CPU s | peak RSS MiB |"
echo "| --- | ---: | ---: | ---: |"
printf "%b" "$rows"
echo "| all $PARTS parts | $p_wall | $p_cpu | $((p_rss / 1024)) |"
echo "| one process | $ot | $oc | $((or / 1024)) |"
echo
echo "Parts together / one process: wall $(ratio "$p_wall" "$ot")x, CPU" \
     "$(ratio "$p_cpu" "$oc")x; DEST after the last part: $psame to one" \
     "process's output."
