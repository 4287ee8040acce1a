#!/usr/bin/python3
# ctest-cost: 2
"""delete_gate_scan.py - the one delete gate (issue 27): every unlink,
rmdir, rename and storage delete in src/ goes through src/gate/.

Scans the C sources of src/ (comments, strings and character literals
stripped) and fails on each use, outside src/gate/, of:

- a libc call that removes or replaces a name: unlink, unlinkat, rmdir,
  remove, rename, renameat, renameat2, nftw (the walk that deletes),
  ftruncate(fd, 0);
- a storage backend's delete entry: ->del, ->delete_tree, ->delete_keys
  (the vtable's, called only by src/gate/gate_storage.c);
- the backend halves of the gate's deletes (ckpt_local_delete_below,
  st_delete_if_match, st_local_prune_dirs) anywhere but where src/storage
  defines them;
- the gate's held syscalls (ckpt_gate_held_*) outside src/storage (a
  backend's delete, run by the gate), and the gate's private
  gate_enter/gate_leave;
- the old bypasses: ckpt_storage_delete*, ckpt_storage_prune_*,
  ckpt_rm_tree, ckpt_del_rename.

usage: delete_gate_scan.py [ROOT]   (default: the repository)
"""
import os
import re
import sys

ROOT = (sys.argv[1] if len(sys.argv) > 1
        else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                          ".."))

LIBC = r"(?:unlink|unlinkat|rmdir|remove|rename|renameat|renameat2|nftw)"
# Not a member (a->rename, s.remove), not a longer name (ckpt_unlink).
CALL = re.compile(r"(?<![\w.>])" + LIBC + r"\s*\(")
# A function's address taken: nftw(p, remove, ...), fn = unlink.
ADDR = re.compile(r"(?<![\w.>])" + LIBC + r"\s*[,;)]")
TRUNC0 = re.compile(r"(?<![\w.>])ftruncate\s*\([^,()]*,\s*0\s*\)")
VTABLE = re.compile(r"->\s*(?:del|delete_tree|delete_keys)\s*\(")
BACKEND = re.compile(r"\b(?:ckpt_local_delete_below|st_delete_if_match|"
                     r"st_local_prune_dirs)\b")
HELD = re.compile(r"\bckpt_gate_held_\w+\s*\(")
PRIVATE = re.compile(r"\bgate_(?:enter|leave)\s*\(")
OLD = re.compile(r"\b(?:ckpt_storage_delete\w*|ckpt_storage_prune_\w+|"
                 r"ckpt_rm_tree|ckpt_del_rename)\b")
# A definition or declaration: a return type before the name.
DEFN = re.compile(r"^\s*(?:static\s+)?(?:int|void)\s+\**$")


def strip(src):
    """C source with comments, strings and char literals blanked (newlines
    kept, so line numbers hold)."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + re.sub(r"[^\n]", " ", src[i + 1:j - 1]) + c)
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def scan(root):
    bad = []
    src = os.path.join(root, "src")
    for d, _, files in os.walk(src):
        for f in sorted(files):
            if not f.endswith((".c", ".h")):
                continue
            path = os.path.join(d, f)
            rel = os.path.relpath(path, root)
            in_gate = rel.startswith("src/gate/")
            in_storage = rel.startswith("src/storage/")
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = strip(fh.read())
            for no, line in enumerate(text.split("\n"), 1):
                def hit(what, m):
                    bad.append("%s:%d: %s: %s" % (rel, no, what,
                                                  line.strip()))
                if in_gate:
                    continue
                for rx, what in ((CALL, "deletes outside the gate"),
                                 (ADDR, "takes a delete's address"),
                                 (TRUNC0, "truncates to zero"),
                                 (VTABLE, "calls a backend's delete"),
                                 (PRIVATE, "uses the gate's private "
                                           "state"),
                                 (OLD, "calls a bypass of the gate")):
                    m = rx.search(line)
                    if m:
                        hit(what, m)
                for m in BACKEND.finditer(line):
                    if not (in_storage and DEFN.match(line[:m.start()])):
                        hit("calls a backend's delete", m)
                if not in_storage and HELD.search(line):
                    hit("uses a held syscall outside a backend", None)
    return bad


def main():
    bad = scan(ROOT)
    for b in bad:
        print(b)
    if bad:
        print("FAIL: %d delete(s) outside src/gate/ (docs/reliability.md "
              "\"One delete gate\")" % len(bad))
        return 1
    print("delete gate: no delete outside src/gate/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
