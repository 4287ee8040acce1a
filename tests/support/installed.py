"""installed.py - ckpt as a user installs it: `cmake --install BUILD
--prefix PREFIX` into a scratch prefix (README "Install"), for the tests
that run the installed deployment recipes (process_slurm.py,
deploy_install.py).

    from installed import install
    prefix = install(tmp)        # tmp/prefix/bin/ckpt, .../share/ckpt/...
"""
import os
import subprocess

from s3test import BUILD


def install(root):
    """Install the build below root/prefix; returns that prefix. Raises
    (the test fails) when cmake --install does."""
    prefix = os.path.join(root, "prefix")
    r = subprocess.run(["cmake", "--install", BUILD, "--prefix", prefix],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise AssertionError("cmake --install: %d\n%s%s" % (
            r.returncode, r.stdout, r.stderr))
    return prefix


def script(prefix, name):
    """An installed deployment script: PREFIX/share/ckpt/NAME."""
    return os.path.join(prefix, "share", "ckpt", name)
