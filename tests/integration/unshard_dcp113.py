#!/usr/bin/python3
# ctest-cost: 10
"""unshard_dcp113.py: `ckpt unshard` against real torch 1.13 DCP checkpoints.

Every case of tests/support/make_dcp.py is written by 2-4 real processes
(gloo, ShardedTensor, save_state_dict), unsharded by $CKPT, and compared
value for value (bit-exact tensors, equal objects) with the state dict the
ranks saved, by tests/support/check_unshard.py. Also: --format safetensors,
--verify, --dry-run, --json, the OLMo layout, run mode and the atomic
rename. Needs Debian's torch 1.13 at /usr/bin/python3.
"""
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
from harness import CKPT, check, compare, finish, generate, run  # noqa: E402

CASES = ["rows", "cols", "blocks2d", "multi", "replicated", "dtypes",
         "objects", "all", "olmo"]


def case_torch(tmp, case):
    d = os.path.join(tmp, case)
    out = os.path.join(d, "out")
    p = run(CKPT, "unshard", "--verify", "--no-progress",
            os.path.join(d, "ckpt"), out, ok=False)
    check(case + ": exit 0", p.returncode == 0, p.stderr)
    if case == "olmo":
        check("olmo: files", sorted(os.listdir(out)) == [
            "config.yaml", "model.pt", "optim.pt", "train.pt"],
            str(os.listdir(out)))
        compare("olmo: model.pt and train.pt equal expected_olmo/", out,
                os.path.join(d, "expected_olmo"), "--allow-pickle")
        with open(os.path.join(out, "train.pt"), "rb") as a, \
                open(os.path.join(d, "ckpt", "train", "rank0.pt"), "rb") as b:
            check("olmo: train.pt is train/rank0.pt", a.read() == b.read())
        return
    check(case + ": only checkpoint.pt", os.listdir(out) == ["checkpoint.pt"],
          str(os.listdir(out)))
    compare(case + ": values equal", os.path.join(out, "checkpoint.pt"),
            os.path.join(d, "expected.pt"))


def case_safetensors(tmp, case):
    d = os.path.join(tmp, case)
    out = os.path.join(d, "st")
    run(CKPT, "unshard", "--format", "safetensors", "--max-shard-size", "300",
        "--verify", os.path.join(d, "ckpt"), out)
    files = sorted(os.listdir(out))
    check(case + ": safetensors shards + index",
          "model.safetensors.index.json" in files and
          any(f.startswith("model-00001-of-") for f in files), str(files))
    compare(case + ": safetensors values",
            os.path.join(out, "model.safetensors.index.json"),
            os.path.join(d, "expected.pt"))


def dry_run_and_json(tmp):
    d = os.path.join(tmp, "rows")
    out = os.path.join(d, "dry")
    p = run(CKPT, "unshard", "-n", "--json", os.path.join(d, "ckpt"), out)
    o = json.loads(p.stdout)
    check("dry-run: nothing written", not os.path.exists(out))
    check("dry-run: json", o["action"] == "would-unshard" and
          o["tensors"] == 5 and o["outputs"][0]["name"] == "checkpoint.pt",
          p.stdout)
    p = run(CKPT, "unshard", os.path.join(d, "ckpt"), os.path.join(d, "tsv"))
    f = p.stdout.rstrip("\n").split("\t")
    check("tsv: one row", len(f) == 4 and f[0] == "unshard" and
          f[2] == os.path.join(d, "tsv"), p.stdout)


def run_mode(tmp):
    """A run directory with two steps: each becomes stepN-unsharded/."""
    run_dir = os.path.join(tmp, "run")
    os.makedirs(run_dir)
    shutil.copytree(os.path.join(tmp, "rows", "ckpt"),
                    os.path.join(run_dir, "step10"))
    shutil.copytree(os.path.join(tmp, "cols", "ckpt"),
                    os.path.join(run_dir, "step20"))
    with open(os.path.join(run_dir, "config.yaml"), "w") as f:
        f.write("run: test\n")
    dest = os.path.join(tmp, "run-out")
    run(CKPT, "unshard", "--latest", run_dir, dest)
    check("run --latest: only step20", os.listdir(dest) ==
          ["step20-unsharded"], str(os.listdir(dest)))
    check("run: config.yaml copied", sorted(os.listdir(os.path.join(
        dest, "step20-unsharded"))) == ["checkpoint.pt", "config.yaml"])
    p = run(CKPT, "unshard", "--delete-sharded", run_dir, dest)
    # step20's complete copy exists already (the --latest run): deleted
    # too (issue 13), not unsharded again.
    check("run: step20 (already unsharded) deleted", p.stdout.splitlines()[1]
          == "delete\tstep20\talready unsharded: %s/step20-unsharded is "
          "complete; deleted %s/step20" % (dest, run_dir) and
          not os.path.exists(os.path.join(run_dir, "step20")), p.stdout)
    check("run: step10 unsharded and deleted",
          os.path.isdir(os.path.join(dest, "step10-unsharded")) and
          not os.path.exists(os.path.join(run_dir, "step10")))
    compare("run: step10 values",
            os.path.join(dest, "step10-unsharded", "checkpoint.pt"),
            os.path.join(tmp, "rows", "expected.pt"))


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-dcp113-")
    try:
        # All fixtures from one torch process: the import costs more than
        # writing them.
        generate(*[["make_dcp.py", os.path.join(tmp, case), "--case", case,
                    "--no-verify"] for case in CASES])
        for case in CASES:
            case_torch(tmp, case)
        for case in ["blocks2d", "multi"]:
            case_safetensors(tmp, case)
        dry_run_and_json(tmp)
        run_mode(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
