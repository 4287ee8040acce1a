#!/usr/bin/python3
"""slurmenv.py - a real one-node Slurm cluster for tests (Debian's
slurm-wlm 22.05 and munge, from scripts/install-deps.sh --test), started
in a private directory: its own munge key and socket, a generated
slurm.conf (free ports, private state, spool, pid and log files), and
munged, `slurmctld -D` and `slurmd -D` in the foreground as children of
the test. No systemd, nothing under /etc or /var is used or changed;
everything is stopped by its pid at the end (and dies with the test).

    from slurmenv import SlurmEnv, Unavailable
    try:
        with SlurmEnv(tmp) as sl:
            subprocess.run(["sbatch", "--wait", ...], env=sl.env(base))
    except Unavailable as e:       # raised before the block runs
        print("SKIP: %s" % e); sys.exit(77)

The node is declared with enough CPUs and memory for the #SBATCH lines of
scripts/deploy/process-slurm.sbatch (4 CPUs, 8G a task) for three tasks
at once (`SlurmdParameters=config_overrides`: slurmd takes the declared
sizes, whatever the machine has; nothing is enforced with task/none).
Unavailable says why a machine cannot run it (not root: the test is
skipped); StartFailed says why it did not start where it should (the
packages missing, a daemon that exits, the node not idle within 30 s;
their log tails included): the test fails.
"""
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import time

from s3env import _die_with_parent, server_env  # noqa: E402

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "sinfo", "scontrol")


class Unavailable(Exception):
    """The machine cannot run a private Slurm at all (not root)."""


class StartFailed(Exception):
    """Slurm should start here and did not (packages missing, a daemon
    that exits or never gets ready): a failure, never a skip."""


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _which(name):
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")


def _tail(path, n=15):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return "(no log)"


class SlurmEnv:
    def __init__(self, root, cpus=12, mem_mb=3 * 8192 + 1024):
        self.dir = os.path.join(root, "slurm")
        self.cpus, self.mem_mb = cpus, mem_mb
        self.procs = []
        self.host = socket.gethostname().split(".")[0]

    def path(self, *names):
        return os.path.join(self.dir, *names)

    def env(self, base=None):
        """base (default os.environ) with SLURM_CONF pointing here."""
        e = dict(base if base is not None else os.environ)
        e["SLURM_CONF"] = self.path("slurm.conf")
        return e

    def _conf(self):
        p = self.path
        return "\n".join([
            "ClusterName=ckpttest",
            "SlurmctldHost=%s" % self.host,
            "SlurmctldPort=%d" % _free_port(),
            "SlurmdPort=%d" % _free_port(),
            "AuthType=auth/munge",
            "AuthInfo=socket=%s" % p("munge.sock"),
            "CryptoType=crypto/munge",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SlurmUser=root",
            "SlurmdUser=root",
            "StateSaveLocation=%s" % p("state"),
            "SlurmdSpoolDir=%s" % p("spool"),
            "SlurmctldPidFile=%s" % p("slurmctld.pid"),
            "SlurmdPidFile=%s" % p("slurmd.pid"),
            "SlurmctldLogFile=%s" % p("slurmctld.log"),
            "SlurmdLogFile=%s" % p("slurmd.log"),
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "SlurmdParameters=config_overrides",
            "ReturnToService=2",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "MpiDefault=none",
            "NodeName=%s CPUs=%d RealMemory=%d State=UNKNOWN"
            % (self.host, self.cpus, self.mem_mb),
            "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE "
            "State=UP",
            ""])

    def _start(self, argv, log):
        out = open(self.path(log), "ab")
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, env=self.env(server_env()),
                             preexec_fn=_die_with_parent)
        out.close()
        self.procs.append(p)
        return p

    def __enter__(self):
        missing = [d for d in DAEMONS if not _which(d)]
        if missing:
            raise StartFailed("%s not installed (scripts/install-deps.sh "
                              "--test installs slurm-wlm and munge)"
                              % " ".join(missing))
        if os.geteuid() != 0:
            raise Unavailable("a private slurmd runs jobs as their user "
                              "only as root; not root here")
        for d in ("state", "spool", "munge"):
            os.makedirs(self.path(d), mode=0o700, exist_ok=True)
        os.chmod(self.dir, 0o700)
        key = self.path("munge", "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        with open(self.path("slurm.conf"), "w") as f:
            f.write(self._conf())
        try:
            self._up()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _up(self):
        m = self._start([_which("munged"), "--foreground", "--force",
                         "--key-file=" + self.path("munge", "munge.key"),
                         "--socket=" + self.path("munge.sock"),
                         "--pid-file=" + self.path("munge", "munged.pid"),
                         "--log-file=" + self.path("munge", "munged.log"),
                         "--seed-file=" + self.path("munge", "munge.seed")],
                        "munged.out")
        self._wait(lambda: os.path.exists(self.path("munge.sock")), m,
                   "munged", self.path("munged.out"))
        c = self._start([_which("slurmctld"), "-D", "-i"], "slurmctld.out")
        self._wait(lambda: self._sinfo("%a") == "up", c, "slurmctld",
                   self.path("slurmctld.log"))
        d = self._start([_which("slurmd"), "-D"], "slurmd.out")
        self._wait(lambda: self._sinfo("%t") == "idle", d, "slurmd",
                   self.path("slurmd.log"))

    def _sinfo(self, fmt):
        r = subprocess.run(["sinfo", "-h", "-o", fmt], env=self.env(),
                           capture_output=True, text=True, timeout=10)
        return r.stdout.strip() if r.returncode == 0 else None

    def _wait(self, ready, proc, what, log, timeout=30.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if proc.poll() is not None:
                raise StartFailed("%s exited with status %d:\n%s"
                                  % (what, proc.returncode, _tail(log)))
            if ready():
                return
            time.sleep(0.3)
        raise StartFailed("%s not ready in %.0f s:\n%s"
                          % (what, timeout, _tail(log)))

    def __exit__(self, *exc):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []
        return False
