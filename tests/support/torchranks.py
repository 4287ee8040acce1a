"""torchranks.py: run a function on N torch ranks joined in a gloo group.

The fixture generators (make_dcp.py, make_olmo_legacy.py, make_dcp_v2.py)
all start their ranks the same way; this is that one way. Works with
torch 1.13 (Debian bookworm, Python 3.11) and torch 2.x.

    import torchranks            # imports torchshim, then torch

    def worker(rank, world, *args):   # module-level (spawn pickles it)
        ...                           # the group is up; dist.* works
    torchranks.run(worker, world, args=(...), timeout=120)

run(worker, world, args=(), timeout=120, start_method="fork", what="ranks")
    Starts `world` processes (torch.multiprocessing; "fork", or "spawn"
    where the parent has run threaded torch code already). Each one:
    torch.set_num_threads(1); on a hang, dumps its stack shortly before
    `timeout`; joins the gloo group on 127.0.0.1 (a free port, loopback
    interface, USE_LIBUV=0 unless set, 60 s collective timeout); calls
    worker(rank, world, *args); meets the others at a barrier (no rank
    tears the group down while another still saves); destroys the group.
    Returns when all ranks exit 0; raises when one fails, and
    TimeoutError("<what> did not finish within <timeout>s") after
    `timeout` seconds, killing every rank left either way.
free_port()
    A TCP port on 127.0.0.1 that was free a moment ago.
"""
import datetime
import faulthandler
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torchshim  # noqa: E402,F401  (must precede torch)
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _rank_main(rank, worker, world, port, timeout, args):
    torch.set_num_threads(1)
    # on a hang, print every rank's stack shortly before the parent gives up
    faulthandler.dump_traceback_later(max(1.0, timeout - 3), exit=True)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    try:
        worker(rank, world, *args)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run(worker, world, args=(), timeout=120, start_method="fork",
        what="ranks"):
    # Debian's torch 2.x gloo has no libuv; 1.13 ignores the variable.
    os.environ.setdefault("USE_LIBUV", "0")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    ctx = mp.start_processes(
        _rank_main, args=(worker, world, free_port(), timeout, tuple(args)),
        nprocs=world, join=False, start_method=start_method)
    deadline = time.monotonic() + timeout
    try:
        while not ctx.join(timeout=max(0.1, min(1.0, deadline -
                                                time.monotonic()))):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} did not finish within {timeout}s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.terminate()
        for p in ctx.processes:
            p.join(5)
            if p.is_alive():
                p.kill()
