#!/usr/bin/python3
# ctest-cost: 8
"""unshard_olmo_local.py: `ckpt unshard` on OLMo `local` steps (issue #5).

Fixtures are written once, in one torch 1.13 process, by
tests/support/make_olmo_local.py: FSDP flat-parameter shards laid out as
FSDP lays them out, for 2, 3 and 4 ranks, torch >= 2.1 (_shard_param_infos,
with alignment padding, both module paths of _ShardParamInfo) and torch <=
2.0.1 (_shard_indices/_shard_param_offsets) layouts, float32 and bfloat16
flat parameters, 0-d to 3-D parameters, parameters straddling shard
boundaries, a rank holding only padding, optimizer slices that are strided
views, flat_param.data at a storage offset. The script checks them against
an independent copy of OLMo's own unsharder before we look.

Here: every case unsharded (torch and safetensors formats, split
safetensors, --layout single, dry run), a run holding local steps as a
directory, a .tar and a .tar.zst, and bad input (missing rank files or
metadata.yaml, ranks that disagree, out-of-bounds ranges, uncovered or
doubly held elements, truncated files): exit 1, one error line naming the
file and tensor, nothing at DEST. All values are compared at the end in
one torch process (make_olmo_local.py --check).
"""
import json
import os
import shutil
import sys
import tarfile
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
from harness import (PY, SUP, check, failures, refused,  # noqa: E402
                     run, unshard)

MAKE = os.path.join(SUP, "make_olmo_local.py")
CASES = ("w2-21", "w3-20", "w4-21fp", "w4-20")

checks = []     # value comparisons, run together at the end


def compare(name, actual, expected, **kw):
    checks.append(dict(name=name, actual=actual, expected=expected, **kw))


def same(name, a, b):
    checks.append({"name": name, "same": [a, b]})


def files(root):
    out = []
    for d, _, fs in os.walk(root):
        out += [os.path.relpath(os.path.join(d, f), root) for f in fs]
    return sorted(out)


def case_ok(fx, tmp, case):
    ck = os.path.join(fx, case, "ckpt")
    exp = os.path.join(fx, case, "expected")
    out = os.path.join(tmp, "out-" + case)
    p = unshard("--verify", ck, out)
    f = p.stdout.rstrip("\n").split("\t")
    check(case + ": exit 0", p.returncode == 0, p.stderr)
    check(case + ": one row", len(f) == 4 and f[0] == "unshard" and
          f[3].startswith("60 tensors, 1 objects, ") and
          ", 4 files, " in f[3], p.stdout)
    check(case + ": files", sorted(os.listdir(out)) ==
          ["config.yaml", "model.pt", "optim.pt", "train.pt"],
          str(os.listdir(out) if os.path.isdir(out) else p.stderr))
    compare(case + ": model.pt and optim.pt equal OLMo's unshard", out, exp)
    same(case + ": train.pt is train/rank0.pt", os.path.join(out, "train.pt"),
         os.path.join(ck, "train", "rank0.pt"))
    same(case + ": config.yaml copied", os.path.join(out, "config.yaml"),
         os.path.join(ck, "config.yaml"))


def case_formats(fx, tmp):
    ck = os.path.join(fx, "w4-21fp", "ckpt")
    exp = os.path.join(fx, "w4-21fp", "expected")
    st = os.path.join(tmp, "st")
    p = unshard("--format", "safetensors", ck, st)
    check("safetensors: files", p.returncode == 0 and
          sorted(os.listdir(st)) == ["config.yaml", "extra.json",
                                     "model.safetensors", "optim.safetensors",
                                     "train.pt"], p.stderr)
    compare("safetensors: model", os.path.join(st, "model.safetensors"),
            os.path.join(exp, "model.pt"))
    compare("safetensors: optim", os.path.join(st, "optim.safetensors"),
            os.path.join(exp, "optim.pt"))
    compare("safetensors: extra.json param_groups",
            os.path.join(st, "extra.json"), os.path.join(exp, "optim.pt"),
            extra=True)
    same("safetensors: train.pt is train/rank0.pt",
         os.path.join(st, "train.pt"), os.path.join(ck, "train", "rank0.pt"))
    split = os.path.join(tmp, "split")
    p = unshard("--format", "safetensors", "--max-shard-size", "600",
                os.path.join(fx, "w3-20", "ckpt"), split)
    names = sorted(os.listdir(split)) if os.path.isdir(split) else []
    check("split safetensors: indexes", p.returncode == 0 and
          "model.safetensors.index.json" in names and
          "optim.safetensors.index.json" in names and
          any(n.startswith("model-00001-of-") for n in names) and
          any(n.startswith("optim-00001-of-") for n in names),
          p.stderr + str(names))
    w3 = os.path.join(fx, "w3-20", "expected")
    compare("split safetensors: model",
            os.path.join(split, "model.safetensors.index.json"),
            os.path.join(w3, "model.pt"))
    compare("split safetensors: optim",
            os.path.join(split, "optim.safetensors.index.json"),
            os.path.join(w3, "optim.pt"))
    single = os.path.join(tmp, "single")
    p = unshard("--layout", "single", os.path.join(fx, "w2-21", "ckpt"),
                single)
    check("--layout single: files", p.returncode == 0 and
          sorted(os.listdir(single)) == ["checkpoint.pt", "config.yaml"],
          p.stderr)
    compare("--layout single: values", os.path.join(single, "checkpoint.pt"),
            os.path.join(fx, "w2-21", "single.pt"))
    dry = os.path.join(tmp, "dry")
    p = unshard("-n", ck, dry)
    check("dry run: nothing written", p.returncode == 0 and
          p.stdout.startswith("would-unshard\t") and not os.path.exists(dry),
          p.stdout + p.stderr)


def bad(fx, tmp, name, mutate, want, base="w4-21fp"):
    refused(tmp, name, os.path.join(fx, base, "ckpt"), mutate, want,
            snapshot=files)


def case_bad(fx, tmp):
    b = os.path.join(fx, "bad")
    with open(os.path.join(b, "ids.json")) as f:
        ids = json.load(f)

    def rm(*rel):
        return lambda d: [os.remove(os.path.join(d, r)) for r in rel]

    def put(src, rel, fxdir=b):
        return lambda d: shutil.copy(os.path.join(fxdir, src),
                                     os.path.join(d, rel))

    def truncate(d):
        with open(os.path.join(d, "model", "rank3.pt"), "r+b") as f:
            f.truncate(1000)

    def write(rel, text):
        def w(d):
            with open(os.path.join(d, rel), "w") as f:
                f.write(text)
        return w

    bad(fx, tmp, "missing-rank", rm("optim/rank2.pt"),
        "'%(d)s/optim/rank2.pt' is missing (metadata.yaml: world_size 4)")
    bad(fx, tmp, "missing-rank0", rm("model/rank0.pt"),
        "'%(d)s/model/rank0.pt' is missing (metadata.yaml: world_size 4)")
    bad(fx, tmp, "missing-last-ranks",
        rm("model/rank3.pt", "optim/rank3.pt", "train/rank3.pt"),
        "'%(d)s/model/rank3.pt' is missing (metadata.yaml: world_size 4)")
    bad(fx, tmp, "no-metadata", rm("metadata.yaml"),
        "'%(d)s/metadata.yaml' is missing: the checkpoint is incomplete")
    bad(fx, tmp, "bad-metadata", write("metadata.yaml", "world_size: x\n"),
        "'%(d)s/metadata.yaml': no world_size between 1 and 65536")
    bad(fx, tmp, "shape-differs", put("model-shape.pt", "model/rank1.pt"),
        "%(d)s: ranks 0 and 1 disagree on the shape of parameter "
        "'transformer.blocks.0.att_proj.bias': [12] and [3, 4] "
        "(model/rank1.pt)")
    bad(fx, tmp, "dtype-differs", put("model-dtype.pt", "model/rank1.pt"),
        "%(d)s: ranks 0 and 1 disagree on flat parameter 1 (module "
        "'_fsdp_wrapped_module.transformer.blocks.0', 4 parameters, "
        "float16; model/rank1.pt)")
    bad(fx, tmp, "foreign-rank",
        put("model/rank1.pt", "model/rank1.pt",
            os.path.join(fx, "w2-21", "ckpt")),
        "%(d)s: parameter 'transformer.wte.weight': elements [19, 37) of 60 "
        "are in none of model/rank*.pt")
    bad(fx, tmp, "held-twice", put("model/rank0.pt", "model/rank1.pt",
                                   os.path.join(fx, "w4-21fp", "ckpt")),
        "%(d)s: parameter 'transformer.wte.weight': elements [0, 19) are "
        "in both model/rank0.pt and model/rank1.pt")
    bad(fx, tmp, "out-of-bounds", put("model-oob.pt", "model/rank1.pt"),
        "%(d)s: 'model/rank1.pt': parameter 'transformer.wte.weight' would "
        "lie at elements [1000, 1019) of flat_param.data, which holds 19 "
        "(and 0 of padding)")
    r = ids["oob20-range"]
    bad(fx, tmp, "out-of-param", put("model-oob20.pt", "model/rank1.pt"),
        "%%(d)s: 'model/rank1.pt': range [%d, %d] of parameter '%s' is "
        "outside its %d elements" % (r[0], r[1], ids["oob20-fqn"],
                                     ids["oob20-numel"]), base="w4-20")
    bad(fx, tmp, "uncovered", put("model-gap.pt", "model/rank1.pt"),
        "%%(d)s: parameter '%s': elements [38, 72) of 72 are in none of "
        "model/rank*.pt" % ids["gap-fqn"])
    bad(fx, tmp, "step-differs", put("optim-step.pt", "optim/rank2.pt"),
        "%%(d)s: ranks 0 and 2 disagree on the value of 'step' of "
        "optimizer state %d (optim/rank2.pt)" % ids["optim-step"])
    r = ids["optim-missing-range"]
    bad(fx, tmp, "optim-uncovered", put("optim-missing.pt", "optim/rank1.pt"),
        "%%(d)s: 'exp_avg_sq' of optimizer state %d ('%s'): elements [%d, "
        "%d) of %d are in none of optim/rank*.pt" % (
            ids["optim-missing"], ids["optim-missing-fqn"], r[0], r[1] + 1,
            ids["optim-missing-numel"]))
    bad(fx, tmp, "groups-differ", put("optim-groups.pt", "optim/rank1.pt"),
        "%(d)s: ranks 0 and 1 disagree on param_groups (optim/rank1.pt)")
    bad(fx, tmp, "optim-foreign",
        put("optim/rank1.pt", "optim/rank1.pt",
            os.path.join(fx, "w2-21", "ckpt")),
        "%(d)s: 'optim/rank1.pt': 'exp_avg' of optimizer state 0 "
        "('transformer.wte.weight') has 23 elements, but model/rank1.pt "
        "holds 19 of the parameter")
    bad(fx, tmp, "truncated", truncate,
        "%(d)s/model/rank3.pt: not a torch.save zip (no end of central "
        "directory)")


def make_run(fx, root):
    r = os.path.join(root, "run1")
    os.makedirs(os.path.join(r, "wandb"))
    with open(os.path.join(r, "config.yaml"), "w") as f:
        f.write("run: local\n")
    shutil.copytree(os.path.join(fx, "w2-21", "ckpt"), os.path.join(r, "step5"))
    os.makedirs(os.path.join(r, "step5-unsharded"))
    with open(os.path.join(r, "step5-unsharded", "model.pt"), "wb") as f:
        f.write(b"x" * 8)
    shutil.copytree(os.path.join(fx, "w2-21", "ckpt"),
                    os.path.join(r, "step10"))
    shutil.copytree(os.path.join(fx, "w3-20", "ckpt"),
                    os.path.join(r, "step20"))
    os.remove(os.path.join(r, "step20", "config.yaml"))
    s30 = os.path.join(r, "step30")
    shutil.copytree(os.path.join(fx, "w4-20", "ckpt"), s30)
    for d in ("model", "optim", "train"):
        os.remove(os.path.join(s30, d, "rank3.pt"))
    return r


def run_lines(dest):
    return [
        "skip\tstep5\talready unsharded: step5-unsharded in the run",
        "unshard\tstep10\t%s/step10-unsharded: 4 files, 60 tensors" % dest,
        "unshard\tstep20\t%s/step20-unsharded: 4 files, 60 tensors" % dest,
        "skip\tstep30\tincomplete: 3 of 4 ranks present",
    ]


def run_outputs(name, fx, dest):
    check(name + ": files", files(dest) == [
        "step10-unsharded/config.yaml", "step10-unsharded/model.pt",
        "step10-unsharded/optim.pt", "step10-unsharded/train.pt",
        "step20-unsharded/config.yaml", "step20-unsharded/model.pt",
        "step20-unsharded/optim.pt", "step20-unsharded/train.pt"],
        str(files(dest)))
    for step, case in (("step10", "w2-21"), ("step20", "w3-20")):
        o = os.path.join(dest, step + "-unsharded")
        compare("%s: %s values" % (name, step), o,
                os.path.join(fx, case, "expected"))
        same("%s: %s train.pt" % (name, step), os.path.join(o, "train.pt"),
             os.path.join(fx, case, "ckpt", "train", "rank0.pt"))
    with open(os.path.join(dest, "step20-unsharded", "config.yaml")) as f:
        check(name + ": step20 gets the run's config.yaml",
              f.read() == "run: local\n")


def case_run(fx, tmp):
    r = make_run(fx, os.path.join(tmp, "runs"))
    before = files(r)
    dest = os.path.join(tmp, "run-out")
    p = unshard(r, dest)
    lines = p.stdout.splitlines()
    check("run dir: exit 0", p.returncode == 0, p.stderr)
    check("run dir: lines", lines == run_lines(dest), "\n".join(lines))
    check("run dir: source untouched", files(r) == before)
    run_outputs("run dir", fx, dest)
    tar = os.path.join(tmp, "run1.tar")
    with tarfile.open(tar, "w") as t:
        t.add(r, arcname="run1")
    zst = os.path.join(tmp, "run1.tar.zst")
    run("zstd", "-q", "-f", tar, "-o", zst)
    for arc in (tar, zst):
        ext = arc[len(os.path.join(tmp, "run1")):]
        dest = os.path.join(tmp, "run-out" + ext)
        p = unshard(arc, dest)
        lines = p.stdout.splitlines()
        check(ext + ": exit 0", p.returncode == 0, p.stderr)
        want = run_lines(dest)
        if ext != ".tar":
            # One streaming pass: skipped steps first, then each step as
            # its last member arrives (tarfile stores names sorted).
            want = [ln for ln in want if ln.startswith("skip")] + \
                [ln for ln in want if ln.startswith("unshard\t")]
        check(ext + ": lines", lines == want, "\n".join(lines))
        run_outputs(ext, fx, dest)


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-olmo-local-")
    try:
        fx = os.path.join(tmp, "fx")
        print(run(PY, MAKE, fx).stdout.strip())
        for case in CASES:
            case_ok(fx, tmp, case)
        case_formats(fx, tmp)
        case_bad(fx, tmp)
        case_run(fx, tmp)
        path = os.path.join(tmp, "checks.json")
        with open(path, "w") as f:
            json.dump(checks, f)
        p = run(PY, MAKE, "--check", path, ok=False)
        sys.stdout.write(p.stdout)
        failures.extend(ln for ln in p.stdout.splitlines()
                        if ln.startswith("FAIL"))
        if p.returncode != 0 and not any(ln.startswith("FAIL")
                                         for ln in p.stdout.splitlines()):
            failures.append("value checks: " + p.stderr.strip()[-500:])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
