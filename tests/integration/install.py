#!/usr/bin/python3
# ctest-cost: 10
"""install.py - `cmake --install BUILD --prefix P` (README "Install"):

1. P/bin/ckpt runs (--version); the deployment scripts are in
   P/share/ckpt/, executable; nothing else is installed.
2. Man pages: ckpt(1) and one ckpt-COMMAND(1) per command of `ckpt
   --help`, each rendered by man(1) with NAME (the command's summary from
   --help), SYNOPSIS (the page's synopsis) and the page's sections.
3. The bash completion P/share/bash-completion/completions/ckpt, run in
   bash as bash-completion would: the first word completes to the
   commands of `ckpt --help` (plus help, --help, --version), and for
   every command "--" / "-" complete to exactly the options its --help
   lists (parsed here independently); after an option that takes an
   argument no option is offered (file names are), after one that takes
   none the options are; other words complete file names; `ckpt help `
   completes commands.
4. One set of paths: every /usr/local/... path that docs/deploy.md, the
   README, docs/ckpt.md and the scripts' headers name is one the install
   made (PREFIX for /usr/local), and each example line of a script's
   header is a line of docs/deploy.md, as it is."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import Checker  # noqa: E402
from installed import install  # noqa: E402

SCRIPTS = ["process-cron.sh", "process-parallel.sh", "process-slurm.sbatch"]


def commands(ckpt):
    out = subprocess.run([ckpt, "--help"], capture_output=True, text=True,
                         check=True).stdout
    body = out.split("commands:\n", 1)[1].split("\n\n", 1)[0]
    return [line.split()[0] for line in body.splitlines()]


def help_options(ckpt, cmd):
    """{option: takes an argument} from the option tables of `ckpt CMD
    --help` (lines "    %-28s %s")."""
    out = subprocess.run([ckpt, cmd, "--help"], capture_output=True,
                         text=True, check=True).stdout
    opts = {}
    for line in out.splitlines():
        m = re.match(r"^    ((?:-[A-Za-z], )?--[a-z0-9-]+(?: \S+)?)( +)\S",
                     line)
        if not m or len(m.group(2)) != max(1, 29 - len(m.group(1))):
            continue
        words = m.group(1).replace(",", "").split()
        arg = not words[-1].startswith("-")
        for w in words:
            if w.startswith("-"):
                opts[w] = arg
    return opts


def complete(comp, words, cword):
    """COMPREPLY of the completion for the command line words."""
    script = ('source "$1"; shift; COMP_WORDS=("$@"); '
              'COMP_CWORD=%d; _ckpt; printf "%%s\\n" "${COMPREPLY[@]}"'
              % cword)
    r = subprocess.run(["bash", "-c", script, "bash", comp] + words,
                       capture_output=True, text=True, cwd=HERE)
    return sorted(w for w in r.stdout.splitlines() if w)


def check_tree(c, p):
    ckpt = os.path.join(p, "bin", "ckpt")
    r = subprocess.run([ckpt, "--version"], capture_output=True, text=True)
    c.eq("bin/ckpt runs", (r.returncode, r.stdout.split(" ")[0]),
         (0, "ckpt"))
    for s in SCRIPTS:
        path = os.path.join(p, "share", "ckpt", s)
        c.true("share/ckpt/%s installed, executable" % s,
               os.access(path, os.X_OK))
        with open(path) as f, open(os.path.join(ROOT, "scripts", "deploy",
                                                s)) as g:
            c.eq("share/ckpt/%s is the source's" % s, f.read(), g.read())
    found = sorted(os.path.relpath(os.path.join(d, n), p)
                   for d, _, fs in os.walk(p) for n in fs)
    cmds = commands(ckpt)
    c.eq("installed files", found, sorted(
        ["bin/ckpt", "share/bash-completion/completions/ckpt"] +
        ["share/ckpt/" + s for s in SCRIPTS] +
        ["share/man/man1/ckpt.1"] +
        ["share/man/man1/ckpt-%s.1" % x for x in cmds]))
    return ckpt, cmds


def check_man(c, p, ckpt, cmds):
    out = subprocess.run([ckpt, "--help"], capture_output=True, text=True,
                         check=True).stdout
    summary = {line.split()[0]: line.split(None, 1)[1]
               for line in out.split("commands:\n", 1)[1]
               .split("\n\n", 1)[0].splitlines()}
    env = dict(os.environ, MANWIDTH="2000", MAN_KEEP_FORMATTING="0")
    for cmd in [None] + cmds:
        page = "ckpt" if cmd is None else "ckpt-" + cmd
        src = os.path.join(ROOT, "docs", "ckpt.md" if cmd is None
                           else "commands/%s.md" % cmd)
        r = subprocess.run(["man", "-l", os.path.join(
            p, "share", "man", "man1", page + ".1")], env=env,
            capture_output=True, text=True)
        text = re.sub(r".\x08", "", r.stdout)
        c.eq("%s(1): man renders it" % page, r.returncode, 0)
        head = [line.strip() for line in text.splitlines()[:8]
                if line.strip()]
        want = summary[cmd] if cmd else \
            "keep the checkpoints of large training runs under control"
        c.eq("%s(1): NAME" % page, head[1:3],
             ["NAME", "%s - %s" % (page, want)])
        with open(src) as f:
            md = f.read()
        synopsis = md.split("```\n", 2)[1].splitlines()[0]
        c.true("%s(1): SYNOPSIS %r" % (page, synopsis),
               re.search(r"^SYNOPSIS\n\s+" + re.escape(synopsis), text,
                         re.M))
        for h in re.findall(r"^## (.+)$", md, re.M):
            h = h.replace("`", "").replace("**", "")
            if h == "Synopsis":
                h = "SYNOPSIS"
            c.true("%s(1): section %s" % (page, h),
                   re.search(r"^" + re.escape(h) + "$", text, re.M))


def check_completion(c, p, ckpt, cmds):
    comp = os.path.join(p, "share", "bash-completion", "completions", "ckpt")
    c.eq("completion: commands", complete(comp, ["ckpt", ""], 1),
         sorted(cmds + ["help", "--help", "--version"]))
    c.eq("completion: help COMMAND", complete(comp, ["ckpt", "help", ""], 2),
         sorted(cmds))
    for cmd in cmds:
        opts = help_options(ckpt, cmd)
        c.true("%s --help lists options" % cmd, len(opts) > 10)
        c.eq("completion: ckpt %s -" % cmd,
             complete(comp, ["ckpt", cmd, "-"], 2), sorted(opts))
        c.eq("completion: ckpt %s --" % cmd,
             complete(comp, ["ckpt", cmd, "--"], 2),
             sorted(o for o in opts if o.startswith("--")))
        longs = sorted(o for o in opts if o.startswith("--"))
        for o, arg in sorted(opts.items()):
            got = complete(comp, ["ckpt", cmd, o, "--"], 3)
            c.eq("completion: ckpt %s %s --<TAB>" % (cmd, o), got,
                 [] if arg else longs)
        c.eq("completion: ckpt %s instal<TAB>: files" % cmd,
             complete(comp, ["ckpt", cmd, "instal"], 2), ["install.py"])


def check_paths(c, p):
    texts = {n: open(os.path.join(ROOT, n)).read() for n in
             ("docs/deploy.md", "README.md", "docs/ckpt.md")}
    doc = texts["docs/deploy.md"].splitlines()
    for s in SCRIPTS:
        with open(os.path.join(ROOT, "scripts", "deploy", s)) as f:
            head = []
            for line in f.read().splitlines()[1:]:
                if not line.startswith("#") or line.startswith("#SBATCH"):
                    break
                head.append(line[2:])
        texts[s] = "\n".join(head)
        examples = [h for h in head if "/usr/local/" in h and
                    not h.startswith(" ")]
        c.true("%s: its header shows the example" % s, examples)
        for h in examples:
            c.true("%s: %r is in docs/deploy.md" % (s, h), h in doc)
    for name, text in sorted(texts.items()):
        for path in sorted(set(re.findall(r"/usr/local(/[\w./-]*\w)",
                                          text))):
            c.true("%s names /usr/local%s: installed" % (name, path),
                   os.path.exists(p + path))


def main():
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="install-")
    try:
        p = install(tmp)
        ckpt, cmds = check_tree(c, p)
        check_man(c, p, ckpt, cmds)
        check_completion(c, p, ckpt, cmds)
        check_paths(c, p)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
