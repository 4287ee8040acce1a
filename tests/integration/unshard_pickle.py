#!/usr/bin/python3
# ctest-cost: 12
"""unshard_pickle.py: what `ckpt unshard` writes into pickles stays within
torch.load(weights_only=True)'s list (docs/formats/pickle.md), and hostile
pickles fail in bounded memory.

Starts from real torch 1.13 checkpoints (tests/support/make_dcp.py cases
objects and olmo, make_olmo_legacy.py, make_olmo_local.py,
make_olmo_core.py) and, with lib/dcpmod.py, replaces the data.pkl of byte
items by pickles crafted opcode by opcode. Nothing here ever loads one of
those pickles: their globals are only named, and outputs are inspected with
pickletools (tests/support/pickle_globals.py).

- every global of issue 11 fails the checkpoint naming file, key and global;
  with --allow-unsafe-pickle it is written, with one warning per global;
- a benign byte item state (ints, floats, strings, lists, dicts,
  OrderedDict, tensors, torch.Size, dtypes, set, bytearray) passes, equal to
  what the ranks saved;
- a train/rank0.pt copied as train.pt is checked the same way;
- the exact globals of every output of every layout and format, all in
  torch 2.6's default list but for OLMo's trainer state (numpy RNG state,
  pathlib paths);
- hostile data.pkl (deep nesting, many small objects, memo abuse, huge and
  long length claims, an oversized record): the exact error, and a peak RSS
  of `ckpt unshard` (/usr/bin/time -f %M) of at most 64 MiB (not checked
  on an AddressSanitizer build).
"""
import os
import shutil
import struct
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
sys.path.insert(0, os.path.join(HERE, "lib"))
import dcpmod as M  # noqa: E402
from harness import CKPT, check, compare, finish, generate, run  # noqa: E402
from pickle_globals import TORCH26, file_globals  # noqa: E402

HINT = "(use --allow-unsafe-pickle to pass it through)"


def glob_op(mod, name):
    return b"c" + mod.encode() + b"\n" + name.encode() + b"\n"


def text(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


# Each a call of the global with harmless arguments; ckpt never calls it
# and this test never loads it. (first global reported, all globals)
EVIL = [
    (b"\x80\x02" + glob_op("builtins", "getattr") +
     glob_op("numpy.testing._private.utils", "os") + text("curdir") +
     b"\x86R.", ["numpy.testing._private.utils.os", "builtins.getattr"]),
    (b"\x80\x02" + glob_op("torch.distributed.elastic.multiprocessing.api",
                           "SubprocessHandler") + text("/bin/true") +
     b"\x85R.",
     ["torch.distributed.elastic.multiprocessing.api.SubprocessHandler"]),
    (b"\x80\x02" + glob_op("doctest", "debug_script") + text("") + b"\x85R.",
     ["doctest.debug_script"]),
    (b"\x80\x02" + glob_op("_posixsubprocess", "fork_exec") + b")R.",
     ["_posixsubprocess.fork_exec"]),
    (b"\x80\x02" + glob_op("numpy.f2py.crackfortran", "myeval") + text("1") +
     b"\x85R.", ["numpy.f2py.crackfortran.myeval"]),
    (b"\x80\x02" + glob_op("uuid", "_get_command_stdout") + text("true") +
     b"\x85R.", ["uuid._get_command_stdout"]),
    (b"\x80\x02" + glob_op("imp", "load_source") + text("x") +
     text("/dev/null") + b"\x86R.", ["imp.load_source"]),
]
# Byte items of the objects case whose values name no global themselves.
PLAIN_KEYS = ["str", "int", "float", "list", "tuple", "nested", "int_keys"]


def fresh(tmp, case, name):
    d = os.path.join(tmp, name)
    shutil.copytree(os.path.join(tmp, case, "ckpt"), d)
    return d


def replace_pickle(d, m, key, pkl, n):
    """Byte item `key` of checkpoint d (metadata m) now holds pkl."""
    _, info = M.find(m, key)
    recs = M.zip_records(M.item_bytes(d, info))
    pre = next(iter(recs)).split("/")[0]
    recs[pre + "/data.pkl"] = pkl
    M.put_item(d, info, M.make_zip(recs), "__crafted%d.distcp" % n)


def unshard(d, out, *args, timed=False):
    cmd = [CKPT, "unshard", "--no-progress", *args, d, out]
    if timed:
        cmd = ["/usr/bin/time", "-f", "%M"] + cmd
    return run(*cmd, ok=False)


def error_line(p):
    """The message of the error row (a failure is its row, not a message
    on stderr too), or "" when there is none or stderr repeats it."""
    lines = [ln for ln in p.stdout.strip().splitlines()
             if ln.startswith("error\t")]
    if not lines or "ckpt: error: " in p.stderr:
        return ""
    return lines[-1].split("\t", 3)[-1]


def expect_error(tmp, name, d, want, timed=False):
    out = os.path.join(tmp, "out-" + name)
    p = unshard(d, out, timed=timed)
    check(name + ": exit 1", p.returncode == 1, p.stderr)
    got = error_line(p)
    check(name + ": message", got == want, "got %r, want %r" % (got, want))
    left = [f for f in os.listdir(tmp) if f.startswith("out-" + name) or
            f.startswith(".ckpt-tmp-out-" + name)]
    check(name + ": nothing left at DEST", not left, str(left))
    return p


# --- issue 11: globals that run code on a plain torch.load ---------------

def refused(tmp):
    for i, (pkl, names) in enumerate(EVIL):
        d = fresh(tmp, "objects", "evil%d" % i)
        m = M.load_meta(d)
        replace_pickle(d, m, "str", pkl, 0)
        M.save_meta(d, m)
        expect_error(tmp, "evil%d" % i, d, "checkpoint.pt['str']: pickle "
                     "global '%s' is not allowed %s" % (names[0], HINT))


def passed_unsafe(tmp):
    d = fresh(tmp, "objects", "unsafe")
    m = M.load_meta(d)
    for n, (key, (pkl, _)) in enumerate(zip(PLAIN_KEYS, EVIL)):
        replace_pickle(d, m, key, pkl, n)
    M.save_meta(d, m)
    out = os.path.join(tmp, "out-unsafe")
    p = unshard(d, out, "--allow-unsafe-pickle")
    check("unsafe: exit 0", p.returncode == 0, p.stderr)
    warned = sorted(ln.split("warning: ", 1)[1]
                    for ln in p.stderr.splitlines() if "warning: " in ln)
    want = sorted("checkpoint.pt['%s']: passing pickle global '%s' through "
                  "(--allow-unsafe-pickle): a plain torch.load of the output "
                  "calls it" % (key, g)
                  for key, (_, names) in zip(PLAIN_KEYS, EVIL) for g in names)
    check("unsafe: one warning per global", warned == want,
          "\n".join(warned))
    if p.returncode == 0:
        got = file_globals(os.path.join(out, "checkpoint.pt"))
        evil = {g for _, names in EVIL for g in names}
        check("unsafe: globals passed through", got == BENIGN | evil,
              "got %s" % sorted(got))


# --- benign values, and train.pt copies -----------------------------------

BENIGN = {"torch._utils._rebuild_tensor_v2", "torch.FloatStorage",
          "torch.IntStorage", "torch.DoubleStorage",
          "collections.OrderedDict", "_codecs.encode", "torch.Size",
          "torch.bfloat16", "builtins.set", "builtins.bytearray"}


def benign(tmp):
    d = os.path.join(tmp, "objects")
    out = os.path.join(tmp, "out-objects")
    p = unshard(os.path.join(d, "ckpt"), out)
    check("benign: exit 0, no warning", p.returncode == 0 and
          "warning" not in p.stderr, p.stderr)
    if p.returncode == 0:
        compare("benign: values equal", os.path.join(out, "checkpoint.pt"),
                os.path.join(d, "expected.pt"))
        got = file_globals(os.path.join(out, "checkpoint.pt"))
        check("benign: globals", got == BENIGN, "got %s" % sorted(got))
        check("benign: within torch 2.6", got <= TORCH26)


def olmo_groups(tmp):
    """An OLMo step's optim.param_groups byte item naming a global: named
    as its place in optim.pt, or in extra.json for safetensors."""
    d = fresh(tmp, "olmo", "evil-groups")
    dcp = os.path.join(d, "model_and_optim")
    m = M.load_meta(dcp)
    replace_pickle(dcp, m, "optim.param_groups", EVIL[2][0], 0)
    M.save_meta(dcp, m)
    want = "['param_groups']: pickle global 'doctest.debug_script' is not " \
        "allowed " + HINT
    for fmt, f in (("torch", "optim.pt"), ("safetensors", "extra.json")):
        out = os.path.join(tmp, "out-evil-groups")
        p = unshard(d, out, "--format", fmt)
        check("evil-groups %s: exit 1" % fmt, p.returncode == 1, p.stderr)
        check("evil-groups %s: message" % fmt, error_line(p) == f + want,
              error_line(p))
        check("evil-groups %s: nothing at DEST" % fmt,
              not os.path.exists(out))


def train_copy(tmp):
    d = fresh(tmp, "olmo", "evil-train")
    pkl = (b"\x80\x02}X\x03\x00\x00\x00rng" + EVIL[5][0][2:-1] + b"s.")
    with open(os.path.join(d, "train", "rank0.pt"), "wb") as f:
        f.write(M.make_zip({"rank0/data.pkl": pkl, "rank0/version": b"3\n"}))
    expect_error(tmp, "evil-train", d, "train.pt['rng']: pickle global "
                 "'uuid._get_command_stdout' is not allowed %s" % HINT)


# --- every output of every layout: its exact globals ------------------------

TENSORS = {"torch._utils._rebuild_tensor_v2", "torch.FloatStorage",
           "collections.OrderedDict"}
OLMO_TRAIN = {"numpy.core.multiarray._reconstruct", "numpy.ndarray",
              "numpy.dtype", "pathlib.PosixPath", "_codecs.encode",
              "torch._utils._rebuild_tensor_v2", "torch.ByteStorage",
              "collections.OrderedDict"}
OUTPUTS = [
    # (fixture step dir, ckpt options, {output file: exact globals})
    ("olmo/ckpt", ["--layout", "single"], {
        "checkpoint.pt": TENSORS}),
    ("olmo/ckpt", [], {
        "model.pt": TENSORS, "optim.pt": TENSORS, "train.pt": OLMO_TRAIN}),
    ("olmo/ckpt", ["--format", "safetensors"], {"train.pt": OLMO_TRAIN}),
    ("legacy/ckpt", [], {
        "model.pt": TENSORS, "optim.pt": TENSORS,
        "train.pt": {"pathlib.PosixPath"}}),
    ("local/w2-21/ckpt", [], {
        "model.pt": TENSORS | {"torch.BFloat16Storage"},
        "optim.pt": TENSORS | {"torch.BFloat16Storage"},
        "train.pt": OLMO_TRAIN}),
    ("core/ckpt", [], {
        "model.pt": TENSORS, "optim.pt": TENSORS, "train.pt": OLMO_TRAIN}),
]


def outputs(tmp):
    for n, (src, opts, files) in enumerate(OUTPUTS):
        out = os.path.join(tmp, "out-layout%d" % n)
        p = unshard(os.path.join(tmp, src), out, *opts)
        name = "%s %s" % (src, " ".join(opts))
        check(name + ": exit 0", p.returncode == 0, p.stderr)
        if p.returncode != 0:
            continue
        pts = sorted(f for f in os.listdir(out) if f.endswith(".pt"))
        check(name + ": files", pts == sorted(files), str(pts))
        for f, want in files.items():
            if f not in pts:
                continue
            got = file_globals(os.path.join(out, f))
            check("%s: %s globals" % (name, f), got == want,
                  "got %s" % sorted(got))
            # Only OLMo's trainer state goes beyond torch's list.
            beyond = {g for g in got - TORCH26
                      if not g.startswith(("numpy.", "pathlib."))}
            check("%s: %s within torch 2.6" % (name, f), not beyond,
                  str(sorted(beyond)))


# --- hostile pickles: the exact error, in at most 64 MiB --------------------

def all_caps():
    """Every cap nearly reached at once: an 8 MiB data.pkl (PROTO
    padding), 6.9 MiB of strings, then empty strings, each memoized, until
    the value cap: the most memory a failing byte item can take."""
    big = b"X" + struct.pack("<I", 32 << 10) + b"s" * (32 << 10) + b"\x94"
    body = b"](" + big * 220 + b"X\x00\x00\x00\x00\x94" * 131000 + b"e."
    pad = b"\x80\x02" * ((8 * 1024 * 1024 - len(body) - 16) // 2)
    # Value 131073 is empty string number 131073 - 1 - 220 - 1.
    at = len(pad) + 2 + 220 * len(big) + (131073 - 222) * 6
    return pad + body, "pickle too large: more than 131072 values at " \
        "offset %d" % at


def hostile_cases():
    big = 5 << 20
    return [("all-caps",) + all_caps(),
        ("deep", b"\x80\x02" + b"(" * 2000000 + b"l" * 2000000 + b".",
         "value nested deeper than 512 levels at offset 514"),
        ("nested-lists", b"\x80\x02" + b"]" * 2000000 + b"a" * 1999999 + b".",
         "pickle too large: more than 131072 values at offset 131074"),
        ("small-objects", b"\x80\x02](" + b"N" * 5000000 + b"e.",
         "pickle too large: more than 131072 values at offset 131075"),
        ("memo-fanout", b"\x80\x02]q\x00(" + b"h\x00" * 3000000 + b"e.",
         "pickle too large: more than 131072 values at offset 262148"),
        ("memo-far", b"\x80\x02Nr\x00\x00\x00\x01.",
         "memo index out of range at offset 3"),
        ("huge-claim", b"\x80\x02\x8d" + b"\xff" * 7 + b"\x7fabc",
         "truncated pickle at offset 2"),
        # Protocol 0 text may decode to 4 bytes a byte: charged so.
        ("long-text", b"\x80\x02](" + b"V" + b"x" * (3 << 20) + b"\ne.",
         "pickle too large: more than 8388608 bytes of strings at offset 4"),
        ("long-strings", b"\x80\x02](" + b"X" + struct.pack("<I", 0xffffff00)
         + b"x" * big + b"e.", "truncated pickle at offset 4"),
    ]


def sanitized():
    """An AddressSanitizer build (scripts/test.sh runs every test on one)
    maps shadow memory and keeps freed blocks: its RSS says nothing."""
    with open(CKPT, "rb") as f:
        return b"__asan_init" in f.read()


def check_rss(name, p):
    kib = rss_kib(p)
    print("     %s: peak RSS %s KiB" % (name, kib))
    if not sanitized():
        check(name + ": peak RSS <= 64 MiB",
              kib is not None and kib <= 64 * 1024, "%s KiB" % kib)


def rss_kib(p):
    """Peak RSS in KiB: the last stderr line, from /usr/bin/time."""
    try:
        return int(p.stderr.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return None


def hostile(tmp):
    for name, pkl, msg in hostile_cases():
        d = fresh(tmp, "objects", "hostile-" + name)
        m = M.load_meta(d)
        replace_pickle(d, m, "str", pkl, 0)
        M.save_meta(d, m)
        p = expect_error(tmp, "hostile-" + name, d,
                         "object 'str': data.pkl: " + msg, timed=True)
        check_rss("hostile-" + name, p)
    # A data.pkl over 8 MiB is not read at all.
    d = fresh(tmp, "objects", "hostile-oversized")
    m = M.load_meta(d)
    replace_pickle(d, m, "str", b"\x80\x02N" + b"0N" * (9 << 20) + b".", 0)
    M.save_meta(d, m)
    p = expect_error(tmp, "hostile-oversized", d,
                     "object 'str': %s/__crafted0.distcp: record "
                     "'data.pkl' too large (18874372 bytes)" % d, timed=True)
    check_rss("hostile-oversized", p)


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-pickle-")
    try:
        generate(["make_dcp.py", os.path.join(tmp, "objects"), "--case",
                  "objects"],
                 ["make_dcp.py", os.path.join(tmp, "olmo"), "--case", "olmo",
                  "--no-verify", "--no-expected"],
                 ["make_olmo_legacy.py", os.path.join(tmp, "legacy"),
                  "--ranks", "2", "--no-verify"],
                 ["make_olmo_local.py", os.path.join(tmp, "local"),
                  "--no-verify"],
                 ["make_olmo_core.py", os.path.join(tmp, "core"), "--case",
                  "f32-2", "--no-verify"])
        benign(tmp)
        refused(tmp)
        passed_unsafe(tmp)
        train_copy(tmp)
        olmo_groups(tmp)
        outputs(tmp)
        hostile(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
