#!/usr/bin/python3
# ctest-cost: 40
"""lease_s3.py - the per-run lease (include/ckpt/lease.h) on object
storage: s3rver behind the proxy, which enforces the conditional writes
s3rver ignores (If-None-Match: *, If-Match, x-goog-if-generation-match).
Processes race for one lease: exactly one wins each round, whether the
lease is new or an expired one is taken over; renew and release after a
takeover lose; with the proxy's enforcement switched off, two workers
collide (the control that shows the conditions are what keeps them
apart); gs:// sends GCS's generation preconditions."""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
from s3test import BUILD, Checker, S3Env, tool  # noqa: E402

B = "ckpt-test"
LEASE_TOOL = os.path.join(BUILD, "lease_tool")
RACERS = 6
ROUNDS = 10


def lease(env, *args):
    r = subprocess.run([LEASE_TOOL] + list(args), env=env,
                       capture_output=True, timeout=120)
    if r.returncode != 0:
        raise AssertionError("lease_tool %s: rc %d: %s" % (
            " ".join(args), r.returncode, r.stderr.decode()))
    return r.stdout.decode()


def race(env, loc, n):
    """n lease_tool processes acquire loc at the same moment; returns
    [(pid, first output word, the rest)]. Each holds on until all have
    answered: a holder of this host that exited would be taken over at
    once (a dead worker's lease), not reported as the holder."""
    at = "%.3f" % (time.time() + 0.4)
    procs = [subprocess.Popen([LEASE_TOOL, "acquire", loc, "--at", at,
                               "--hold"], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for _ in range(n)]
    firsts = [p.stdout.readline() for p in procs]
    for p in procs:
        p.stdin.close()
    out = []
    for p, first in zip(procs, firsts):
        p.wait(timeout=120)
        o, e = first + p.stdout.read(), p.stderr.read()
        p.stdout.close()
        p.stderr.close()
        word, _, rest = o.decode().strip().partition(" ")
        if p.returncode != 0:
            word, rest = "error", e.decode().strip()
        out.append((p.pid, word, rest))
    return out


def plant_expired(env, loc):
    # Acquired by a clock an hour behind with a 60 s TTL: long expired.
    tool(env, "rm", loc)
    out = lease(env, "acquire", loc, "--shift", "-3600", "--ttl", "60")
    assert out.startswith("acquired "), out


def winners(results, word):
    return [r for r in results if r[1] == word]


def check_round(c, what, results, word):
    """Exactly one `word`; every other racer names the winner's pid."""
    won = winners(results, word)
    c.eq("%s: one winner" % what, len(won), 1)
    if len(won) != 1:
        return
    pid = won[0][0]
    lost = [r for r in results if r is not won[0]]
    c.eq("%s: the others are told who holds it" % what,
         sorted(set(r[1] for r in lost)), ["leased"])
    c.eq("%s: holder is the winner" % what,
         set(r[2].split(" until ")[0].rsplit(":", 1)[1] for r in lost),
         {str(pid)})


def races(c, s3, env):
    loc = "s3://%s/leases/run-1.lease" % B
    s3.reset_stats()
    for i in range(ROUNDS):
        tool(env, "rm", loc)
        check_round(c, "create round %d" % i, race(env, loc, RACERS),
                    "acquired")
    created = s3.stats()["emulated"]["if_none_match"]
    c.eq("every loser's create was refused", created, ROUNDS * (RACERS - 1))
    s3.reset_stats()
    for i in range(ROUNDS):
        plant_expired(env, loc)
        check_round(c, "takeover round %d (%d racers)" % (i, RACERS),
                    race(env, loc, RACERS), "taken-over")
        plant_expired(env, loc)
        check_round(c, "takeover round %d (2 racers)" % i,
                    race(env, loc, 2), "taken-over")
    st = s3.stats()
    c.true("some takeover lost its compare-and-swap (412)",
           st["emulated"]["if_match"] > 0)
    c.true("takeovers were conditional on the ETag",
           st["conditions"].get("PUT if-match=etag", 0) >= 2 * ROUNDS)


def control(c, s3, env):
    """Enforcement off: the service ignores the conditions, as s3rver
    does; the same races now let several workers win. First with nothing
    enforced (several create the lease), then with only the create-only
    condition enforced (several take an expired lease over)."""
    loc = "s3://%s/leases/control.lease" % B
    worst_create = worst_take = 0
    try:
        s3.configure(conditional=False)
        # The read-back after a create catches most collisions, so a
        # round needs an unlucky interleaving: allow more rounds.
        for i in range(3 * ROUNDS):
            tool(env, "rm", loc)
            worst_create = max(worst_create, len(winners(
                race(env, loc, RACERS), "acquired")))
            if worst_create > 1:
                break
        s3.configure(conditional="create")
        for i in range(ROUNDS):
            plant_expired(env, loc)
            worst_take = max(worst_take, len(winners(
                race(env, loc, RACERS), "taken-over")))
            if worst_take > 1:
                break
    finally:
        s3.configure(conditional=True)
    print("control: up to %d of %d racers created the lease, %d took it "
          "over" % (worst_create, RACERS, worst_take))
    c.true("without enforcement two workers create the lease (%d)"
           % worst_create, worst_create >= 2)
    c.true("without If-Match enforced two workers take it over (%d)"
           % worst_take, worst_take >= 2)


def conflicts(c, s3, env):
    """S3 answers 409 ConditionalRequestConflict when conditional writes
    to one key race: the lease treats it as a lost race and re-reads."""
    loc = "s3://%s/leases/conflict.lease" % B
    tool(env, "rm", loc)
    s3.configure(cond_conflict=1)
    first = lease(env, "acquire", loc).split()
    c.eq("409 on create: re-read, then create", first[0], "acquired")
    s3.configure(cond_conflict=1)
    out = lease(env, "acquire", loc, "--host", "other").split()
    c.eq("409 on a create that would have lost: leased", out[0], "leased")
    plant_expired(env, loc)
    s3.configure(cond_conflict=2)
    out = lease(env, "acquire", loc).split()
    c.eq("409 on create and on takeover: re-read, then take over", out[0],
         "taken-over")
    c.eq("every 409 was served", s3.configure()["cond_conflict"], 0)


def takeover_steps(c, s3, env, loc, what):
    tool(env, "rm", loc)
    out = lease(env, "takeover", loc)
    c.eq("%s: takeover, then the old holder's renew and release lose"
         % what, out.splitlines(),
         ["a-acquire acquired", "b-acquire taken-over", "a-renew lost",
          "a-renew-holder hostB:2", "a-release lost", "b-renew renewed",
          "b-release released"])
    rc, _, _ = tool(env, "stat", loc, check=False)
    c.eq("%s: released lease is gone" % what, rc, 1)


def gcs(c, s3, env, tmp):
    creds = os.path.join(tmp, "credentials")
    with open(creds, "w") as f:
        f.write("[gcs]\naws_access_key_id = S3RVER\n"
                "aws_secret_access_key = S3RVER\n")
    gs = dict(env, GCS_PROFILE="gcs", GCS_ENDPOINT_URL=s3.endpoint,
              AWS_SHARED_CREDENTIALS_FILE=creds)
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        gs.pop(k)
    s3.reset_stats()
    takeover_steps(c, s3, gs, "gs://%s/leases/gcs.lease" % B, "gs://")
    conds = s3.stats()["conditions"]
    c.true("gs:// creates with x-goog-if-generation-match: 0",
           conds.get("PUT x-goog-if-generation-match=0", 0) >= 1)
    gens = [k for k in conds if k.startswith("PUT x-goog-if-generation-"
            "match=") and not k.endswith("=0")]
    c.eq("gs:// takeover and renew swap on a generation", len(gens), 2)
    dels = [k for k in conds if k.startswith("DELETE x-goog-if-generation-"
            "match=")]
    c.eq("gs:// release deletes on its generation", len(dels), 1)
    c.eq("gs:// sends no If-Match", [k for k in conds if "if-match=" in k
                                    and "generation" not in k], [])
    # Exactly one winner with generations too.
    loc = "gs://%s/leases/gcs-race.lease" % B
    plant_expired(gs, loc)
    check_round(c, "gs:// takeover race", race(gs, loc, RACERS),
                "taken-over")


def main():
    c = Checker()
    with S3Env(buckets=[B]) as s3, tempfile.TemporaryDirectory() as tmp:
        env = s3.env()
        races(c, s3, env)
        s3.reset_stats()
        takeover_steps(c, s3, env, "s3://%s/leases/steps.lease" % B,
                       "s3://")
        conds = s3.stats()["conditions"]
        c.eq("s3:// renew and release are conditional on the ETag",
             (conds.get("PUT if-match=etag"), conds.get("DELETE if-match="
                                                        "etag")), (3, 1))
        control(c, s3, env)
        conflicts(c, s3, env)
        gcs(c, s3, env, tmp)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
