#!/usr/bin/python3
# ctest-cost: 90
"""crash_sample.py - the short sample of tests/crash/crash.py that CI runs:
8 SIGKILLs at random moments for each of ckpt clean, unshard
--delete-sharded (local, and a run in S3 behind s3proxy.py), upload
--delete-source (local -> local, local -> s3://), with the small trees
(--quick), each kill followed by the invariant checks and a rerun to
completion. scripts/crash.sh runs the long version (200 per command).

Fails on any violation but the kinds of the open findings listed in
docs/reliability.md ("Open findings"): litter (a killed process's
temporary files are not removed by the rerun) and leftover-sharded (a
sharded step whose deletion was interrupted stays in SRC). Those are
still printed, as KNOWN. leftover-run (clean) is fixed: its deletes
commit by a rename that reruns finish."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CRASH = os.path.join(HERE, "..", "crash", "crash.py")
KNOWN = "leftover-sharded"

sys.exit(subprocess.call([sys.executable, CRASH, "--kills",
                          os.environ.get("CKPT_CRASH_KILLS", "8"), "--quick",
                          "--known", KNOWN]))
