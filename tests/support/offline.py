"""offline.py - tests/support/offline.env applied to an environment: no
credential source of ckpt (or of aws-cli) reaches past the loopback.

    import offline
    offline.apply(os.environ)       # at import: harness.py, s3env.py
    env = offline.apply(dict(...))  # returns the dict it changed
"""
import os

ENV_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "offline.env")


def settings():
    """[(name, value or None to remove)] in the file's order."""
    out = []
    with open(ENV_FILE) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("-"):
                out.append((line[1:], None))
            else:
                name, _, value = line.partition("=")
                out.append((name, value))
    return out


def apply(env):
    for name, value in settings():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env
