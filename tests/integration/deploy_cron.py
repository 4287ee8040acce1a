#!/usr/bin/python3
# ctest-cost: 40
"""deploy_cron.py - the cron recipe of docs/deploy.md as a user pastes
it: ckpt installed with `cmake --install` into a scratch prefix, and the
crontab line read from docs/deploy.md (its prefix, runs, map, bucket and
log replaced by the test's) run the way cron runs it,

    env -i HOME=H PATH=/usr/bin:/bin SHELL=/bin/sh LOGNAME=USER \\
        /bin/sh -c 'PREFIX/share/ckpt/process-cron.sh RUNS s3://... \\
                    --wandb-map MAP >>LOG 2>&1'

with the bucket's keys and endpoint in H/.aws/credentials and
H/.aws/config (s3rver behind the signing proxy) and the one addition of
the test shim that ages the runs' ctimes (LD_PRELOAD; in the sanitizer
build also ASAN_OPTIONS/UBSAN_OPTIONS):

1. exit 0; the log holds every run's row and the total row
   process=6 delete=3 skip=1 error=0; every good run is at
   its W&B path byte for byte, every bad one deleted, no lease held;
2. again while the test holds the script's default lock: exit 75 and
   exactly one log line saying so;
3. the installed scripts where no ckpt is beside them or on PATH: the
   cron and GNU parallel wrappers and the Slurm script exit 2 with a
   message naming what is missing."""
import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
sys.path.insert(0, HERE)
from s3test import Checker, S3Env, old_ctime  # noqa: E402
from installed import install, script  # noqa: E402
import process_workers as pw  # noqa: E402

DOC = os.path.join(ROOT, "docs", "deploy.md")
MAPPED = "ckpt-tests/olmo-tiny"


def cron_line():
    """The command of docs/deploy.md's crontab line."""
    with open(DOC) as f:
        m = re.search(r"^\*/30 \* \* \* \* (/usr/local/share/ckpt/"
                      r"process-cron\.sh .*)$", f.read(), re.M)
    if not m:
        raise AssertionError("docs/deploy.md: no crontab line")
    return m.group(1)


def home_with_keys(tmp, s3):
    home = os.path.join(tmp, "home")
    os.makedirs(os.path.join(home, ".aws"))
    with open(os.path.join(home, ".aws", "credentials"), "w") as f:
        f.write("[default]\naws_access_key_id = S3RVER\n"
                "aws_secret_access_key = S3RVER\n")
    with open(os.path.join(home, ".aws", "config"), "w") as f:
        f.write("[default]\nregion = us-east-1\nendpoint_url = %s\n"
                % s3.endpoint)
    return home


def cron_env(home):
    """What cron gives a job (Debian's cron: HOME, LOGNAME, PATH, SHELL),
    plus the ctime shim (s3test.old_ctime)."""
    shim = old_ctime({})
    env = {"HOME": home, "LOGNAME": "root", "PATH": "/usr/bin:/bin",
           "SHELL": "/bin/sh", "LD_PRELOAD": shim["LD_PRELOAD"],
           "CKPT_TEST_OLD_CTIME": shim["CKPT_TEST_OLD_CTIME"]}
    # The sanitizer build's options travel too: ASan must be told the
    # shim comes before its runtime (old_ctime), and the suite's
    # abort/halt settings hold in the cron job as everywhere else.
    if "ASAN_OPTIONS" in os.environ:
        env["ASAN_OPTIONS"] = old_ctime()["ASAN_OPTIONS"]
    for k in ("UBSAN_OPTIONS",):
        if k in os.environ:
            env[k] = os.environ[k]
    return env


def as_cron(line, env):
    return subprocess.run(["env", "-i"] + ["%s=%s" % kv for kv in
                                           sorted(env.items())] +
                          ["/bin/sh", "-c", line], capture_output=True,
                          text=True, timeout=600)


def main():
    os.environ.update(old_ctime())
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="deploy-cron-")
    try:
        prefix = install(tmp)
        runs = os.path.join(tmp, "runs")
        pw.make_runs(runs)
        snaps = {n: pw.snapshot(os.path.join(runs, n)) for n in pw.GOOD}
        mapfile = os.path.join(tmp, "runs.map")
        with open(mapfile, "w") as f:
            for n in sorted(os.listdir(runs)):
                f.write("%s\t%s/%s\tgiven by the test\n"
                        % (pw.rid(n), MAPPED, pw.rid(n)))
        log = os.path.join(tmp, "ckpt-process.log")
        line = (cron_line().replace("/usr/local/", prefix + "/")
                .replace("/scratch/project/runs.map", mapfile)
                .replace("/scratch/project/runs", runs)
                .replace("s3://ckpts/olmo", "s3://%s/cron" % pw.B)
                .replace("/var/log/ckpt-process.log", log))
        print("cron runs: %s" % line)
        with S3Env() as s3:
            env = cron_env(home_with_keys(tmp, s3))
            r = as_cron(line, env)
            with open(log) as f:
                text = f.read()
            c.eq("cron line: exit 0 (%s)" % text[-1500:], r.returncode, 0)
            c.eq("cron line: nothing outside the log", r.stdout + r.stderr,
                 "")
            rows = pw.rows_of("\n".join(
                ln for ln in text.splitlines()
                if re.match(r"^[a-z]+\t", ln)))
            pw.once_each(c, "cron", rows)
            total = [ln for ln in text.splitlines()
                     if ln.startswith("total\t")]
            c.eq("cron line: the total row", [t.split("\t")[1:5]
                                               for t in total],
                 [["process=6", "delete=3", "skip=1", "error=0"]])
            pw.check_final(c, "cron line", s3.env(), runs, "cron/" + MAPPED,
                           snaps, tmp, state="cron")

            lock = "/tmp/ckpt-process-%d.lock" % os.getuid()
            size = len(text)
            with open(lock, "a") as held:
                fcntl.flock(held, fcntl.LOCK_EX)  # a pass still running
                r = as_cron(line, env)
            with open(log) as f:
                added = f.read()[size:]
            c.eq("cron line, previous pass running: exit 75", r.returncode,
                 75)
            c.true("cron line, exit 75: one log line (%r)" % added,
                   re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ "
                                r"process-cron\.sh: the previous pass still "
                                r"holds %s: nothing done \(exit 75\)\n"
                                % re.escape(lock), added))

        bare = os.path.join(tmp, "bare", "share", "ckpt")
        os.makedirs(bare)
        for name in ("process-cron.sh", "process-parallel.sh"):
            shutil.copy(script(prefix, name), bare)
        env = cron_env(os.path.join(tmp, "home"))
        for argv in (["/bin/sh", os.path.join(bare, "process-cron.sh"),
                      runs, "s3://%s/x" % pw.B],
                     ["/bin/sh", os.path.join(bare, "process-parallel.sh"),
                      "2", runs, "s3://%s/x" % pw.B],
                     ["/bin/bash", script(prefix, "process-slurm.sbatch"),
                      runs, "s3://%s/x" % pw.B]):
            r = subprocess.run(["env", "-i"] + ["%s=%s" % kv for kv in
                                                sorted(env.items())] + argv,
                               capture_output=True, text=True, timeout=60)
            name = os.path.basename(argv[1])
            c.eq("%s without ckpt: exit 2" % name, r.returncode, 2)
            c.true("%s without ckpt: says so (%r)" % (name, r.stderr),
                   "'ckpt' not found" in r.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
