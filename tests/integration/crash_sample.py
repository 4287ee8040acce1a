#!/usr/bin/python3
# ctest-cost: 180
# ctest-labels: slow
"""crash_sample.py - the short sample of tests/crash/crash.py that CI runs:
8 SIGKILLs at random moments for each of ckpt clean, unshard
--delete-sharded (local, and a run in S3 behind s3proxy.py), upload
--delete-source (local -> local, local -> s3://) and process
--drop-sharded --drop-incomplete (local -> local, local -> s3://; killed
the moment a run is "uploaded" and its source then replaced; a run's
files vanishing under it: process_replaced, process_vanish), with
the small trees (--quick), each kill followed by the invariant checks and
a rerun to completion. scripts/crash.sh runs the long version (200 per
command).

Fails on any violation but the KNOWN kinds. Half of the local unshard
kills come the moment a step's delete starts (crash.py's probe), half of
the process kills the moment a drop starts (a bad run renamed aside, or
a dropped step's first file unlinked: kill_preload.c), half of the S3
unshard kills the moment a delete reaches S3 (held there, it lands after
the kill), so the sample covers those windows on every run. KNOWN
(docs/reliability.md, "Open findings"; it loses no data, a rerun that
ends near, not at, the uninterrupted run's state): process's
lapsed-lease (a killed worker's lease of a finished run stays, expired).
litter, leftover-run and leftover-sharded are no longer KNOWN: both
deletes commit by a rename to .NAME.ckpt-del-HOST-PID that reruns
finish; nor are process's drop-remains, stuck-uploaded, state-missing,
reason and counts (findings 4-7, fixed:
tests/integration/process_converge.py)."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CRASH = os.path.join(HERE, "..", "crash", "crash.py")
KNOWN = "lapsed-lease"

sys.exit(subprocess.call([sys.executable, CRASH, "--kills",
                          os.environ.get("CKPT_CRASH_KILLS", "8"), "--quick",
                          "--known", KNOWN]))
