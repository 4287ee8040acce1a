#!/usr/bin/env bash
# README command 1: install build dependencies, build, generate a sample
# scratch directory of training runs (real torch checkpoint bytes; run
# directories and every archive kind) and run the headline job over it:
# `ckpt process`, judging, mapping to W&B, uploading, verifying and
# deleting every run, into a local directory standing in for the bucket.
# Needs no credentials and no network (W&B paths from local evidence).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
bash scripts/install-deps.sh --demo   # sudo only when not root
CKPT_BUILD_TARGET=ckpt bash scripts/build.sh build >/dev/null   # ckpt only, not the tests
CKPT=$ROOT/build/ckpt
W=${CKPT_DEMO_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/ckpt-demo-XXXXXX")}
mkdir -p "$W"
cd "$W"
python3 "$ROOT/tests/support/gen_runs.py" scratch --archives
# The sample was written a moment ago, so by ckpt's live-run guard (a
# file's mtime or ctime within --min-age, 1d by default) every run may
# still be training and would be skipped. --min-age 0 below says these
# runs are finished; on a real scratch filesystem, leave the default.
AGE=(--min-age 0)

# Print a command as typed (`ckpt`, not the build path), run it, and say
# its exit status when it is not 0 (kept in $rc).
step() {
    local shown=("$@")
    [ "$1" = "$CKPT" ] && shown[0]=ckpt
    printf '\n$ %s\n' "${shown[*]}"
    rc=0
    "$@" || rc=$?
    [ $rc -eq 0 ] || echo "(exit status $rc)"
    return 0
}

echo "in $W: the sample runs are in scratch/, the bucket is bucket/"
# What the scratch directory holds: every checkpoint, then one screen.
step "$CKPT" ls scratch
step "$CKPT" ls --summary "${AGE[@]}" scratch

# Merging a sharded step (3 ranks, written by torch's DCP) on its own:
# the tensors come out bit-exact, the very bytes torch saved unsharded
# (scratch/2871001/step1000-unsharded, written by torch.save).
step "$CKPT" unshard scratch/2871001/step1000 unsharded/2871001-step1000
python3 - unsharded/2871001-step1000 scratch/2871001/step1000-unsharded <<'EOF'
import hashlib, os, sys, zipfile
def blobs(path):  # a torch.save file's tensor storages, by content
    with zipfile.ZipFile(path) as z:
        return sorted(hashlib.sha256(z.read(n)).hexdigest()
                      for n in z.namelist() if "/data/" in n)
for f in ("model.pt", "train.pt"):
    ours, torchs = (blobs(os.path.join(d, f)) for d in sys.argv[1:3])
    print("%s: %d tensor storages, %s torch's own" % (
        f, len(ours), "bit-exact equal to" if ours == torchs
        else "DIFFERENT from"))
EOF

# The W&B run path of every run, from local evidence (no network).
step "$CKPT" map-wandb --offline -o wandb-map.tsv scratch/2871*

# The headline job. First the plan (-n: nothing is written or deleted),
# then the real thing: bad runs deleted, good ones (directories and
# archives, read in place) uploaded with their logs under
# bucket/ENTITY/PROJECT/RUN_ID/, verified, and deleted at the source.
# 2871101.tar is 2871001 archived (the same W&B run): it lands in the
# same place, where every file is already there.
step "$CKPT" process -n "${AGE[@]}" --wandb-map wandb-map.tsv --logs scratch/logs scratch --dest bucket
step "$CKPT" process "${AGE[@]}" --wandb-map wandb-map.tsv --logs scratch/logs scratch --dest bucket

echo
echo "the bucket now holds (bucket/.ckpt-process/: one state file per run):"
find bucket -maxdepth 4 ! -path 'bucket/.ckpt-process/*' | LC_ALL=C sort
echo
echo "scratch/ keeps what is not a run: $(ls scratch | tr '\n' ' ')"

# Idempotent: a second pass (cron's next one) finds nothing left to do.
step "$CKPT" process "${AGE[@]}" --wandb-map wandb-map.tsv --logs scratch/logs scratch --dest bucket
echo "(exit status $rc: nothing left to do)"
