#!/usr/bin/python3
# ctest-cost: 90
"""crash_sample.py - the short sample of tests/crash/crash.py that CI runs:
8 SIGKILLs at random moments for each of ckpt clean, unshard
--delete-sharded (local, and a run in S3 behind s3proxy.py), upload
--delete-source (local -> local, local -> s3://), with the small trees
(--quick), each kill followed by the invariant checks and a rerun to
completion. scripts/crash.sh runs the long version (200 per command).

Fails on any violation. None is KNOWN any more (docs/reliability.md,
"Open findings", all fixed): litter (reruns remove dead processes'
temporaries), leftover-run (clean) and leftover-sharded (unshard
--delete-sharded) — both deletes commit by a rename to
.NAME.ckpt-del-HOST-PID that reruns finish. Half of the unshard kills
come the moment a step's delete starts (crash.py's probe), so the sample
covers that window on every run."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CRASH = os.path.join(HERE, "..", "crash", "crash.py")
KNOWN = ""

sys.exit(subprocess.call([sys.executable, CRASH, "--kills",
                          os.environ.get("CKPT_CRASH_KILLS", "8"), "--quick",
                          "--known", KNOWN]))
