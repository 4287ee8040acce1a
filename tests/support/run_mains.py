#!/usr/bin/python3
"""run_mains.py: run several tests/support scripts in ONE Python process,
so torch is imported once, not once per script (the import costs seconds;
writing a small fixture costs well under one).

    /usr/bin/python3 tests/support/run_mains.py SCRIPT ARG... [";" SCRIPT ARG...]...

SCRIPT names a script in tests/support that has main(argv) (make_dcp.py,
make_olmo_legacy.py, make_zarr.py, ...). Each one's main is called with its
ARGs, in the order given, exactly as `SCRIPT ARG...` would run it. The first
that fails (returns non-zero, exits non-zero or raises) stops the run with
exit status 1 and a line naming it; later ones do not run.
"""
import importlib
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def jobs(argv):
    """SCRIPT ARG... ; SCRIPT ARG... -> [[SCRIPT, ARG...], ...]"""
    out = [[]]
    for a in argv:
        if a == ";":
            out.append([])
        else:
            out[-1].append(a)
    return [j for j in out if j]


def run_one(job):
    script, args = job[0], job[1:]
    name = os.path.basename(script)
    if not name.endswith(".py"):
        raise SystemExit(f"run_mains: {script}: not a .py script")
    mod = importlib.import_module(name[:-3])
    prog = sys.argv[0]
    sys.argv[0] = name          # argparse's prog, as if run alone
    try:
        rc = mod.main(args)
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            rc = e.code or 0
        else:
            print(e.code, file=sys.stderr)
            rc = 1
    finally:
        sys.argv[0] = prog
    return rc or 0


def main(argv=None):
    todo = jobs(sys.argv[1:] if argv is None else argv)
    if not todo:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    for job in todo:
        try:
            rc = run_one(job)
        except Exception:  # noqa: BLE001
            traceback.print_exc()
            rc = 1
        sys.stdout.flush()
        if rc != 0:
            print("run_mains: failed (exit %s): %s" % (rc, " ".join(job)),
                  file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
