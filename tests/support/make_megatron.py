#!/usr/bin/env python3
"""make_megatron.py: Megatron torch_dist checkpoints written by megatron.core's
own code, and Megatron's own loader output as the reference, for the
committed fixtures of tests/integration/unshard_megatron.py.

Runs inside the Debian sid chroot of scripts/fixtures/gen-megatron.sh (torch
2.14.1, megatron.core 0.20.0 at /opt/megatron, the CPU shim at /opt/stubs);
never at test time. 2 processes over gloo (USE_LIBUV=0), started by this
script itself (spawn).

    python3 make_megatron.py OUT [--given DIR]

Cases (each OUT/<case>/ has provenance.json):
  common_pt     the older torch_dist layout: DCP files + common.pt beside
                them + metadata.json, written the way megatron.core < 0.15's
                dist_checkpointing.save did (save_preprocess; the common
                state with torch.save as common.pt, rank 0; the sharded part
                with TorchDistSaveShardedStrategy; save_config last). The
                same tensors as the shared fixture megatron_core_dist_ckpt_
                tensors (split on dim 0, on dim 1, a replicated bf16) plus a
                tensor inside the common state.
  gpt_run       megatron.training.checkpointing.save_checkpoint with
                --ckpt-format torch_dist (a GPT model, tensor parallel 2,
                no optimizer: Megatron's optimizer needs CUDA): a run
                directory checkpoints/iter_0000010/ + latest_checkpointed_
                iteration.txt; the common state (args Namespace, iteration,
                checkpoint_version, ...) inside the DCP as 'common_state'.
  given         (--given DIR) only the reference for an existing torch_dist
                checkpoint DIR (the copied shared fixture).
Reference for each: reference_dcp_to_torch_save.pt (torch's own
consolidation of the DCP part) and reference_megatron_load.pt = torch.save of
megatron.core.dist_checkpointing.load_plain_tensors(ckpt) merged into
load_common_state_dict(ckpt) (dict_utils.merge) -- what Megatron's own
loader returns for the whole checkpoint: the common state with every tensor
under its key, full (unsharded).
"""
import argparse
import json
import os
import shutil
import sys
import traceback

sys.path.insert(0, "/opt/stubs")
import mcore_cpu_shim  # noqa: F401,E402  (triton stubs, CUDA no-ops, argparse fix)
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

WS = 2


def provenance(d, info):
    import megatron.core
    info = dict(info)
    info["versions"] = {"torch": torch.__version__,
                        "megatron.core": megatron.core.__version__,
                        "python": sys.version.split()[0]}
    info["generator"] = "tests/support/make_megatron.py"
    with open(os.path.join(d, "provenance.json"), "w") as f:
        json.dump(info, f, indent=2, default=str)
        f.write("\n")


def reference(ck, out):
    """Megatron's own full load of checkpoint ck, torch.save'd to out; and
    torch's dcp_to_torch_save of it beside (reference_dcp_to_torch_save.pt:
    the other ShardedObjects, which Megatron loads only when asked)."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    dcp_to_torch_save(ck, os.path.join(os.path.dirname(out),
                                       "reference_dcp_to_torch_save.pt"))
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing.dict_utils import merge
    tensors = dist_checkpointing.load_plain_tensors(ck)
    common = dist_checkpointing.load_common_state_dict(ck)
    # load_plain_tensors of megatron.core 0.20 already merges the common
    # state (its load() starts from it); older versions did not.
    if all(k in tensors for k in common):
        full = tensors
    else:
        full = merge(common, tensors)
    torch.save(full, out)
    return full


def case_common_pt(out):
    from megatron.core.dist_checkpointing import ShardedTensor
    from megatron.core.dist_checkpointing.core import (CheckpointingConfig,
                                                       save_config)
    from megatron.core.dist_checkpointing.state_dict_utils import \
        save_preprocess
    from megatron.core.dist_checkpointing.strategies.common import \
        save_common
    from megatron.core.dist_checkpointing.strategies.torch import \
        TorchDistSaveShardedStrategy
    rank = dist.get_rank()
    ck = os.path.join(out, "ckpt")
    if rank == 0:
        os.makedirs(ck)
    dist.barrier()
    full_a = torch.arange(8 * 6, dtype=torch.float32).reshape(8, 6)
    full_b = torch.arange(4 * 10, dtype=torch.float32).reshape(4, 10) + 1000
    full_c = torch.linspace(0, 1, 5, dtype=torch.bfloat16)
    sd = {
        "layer.weight_dim0": ShardedTensor.from_rank_offsets(
            "layer.weight_dim0", full_a.chunk(WS, 0)[rank].clone(),
            (0, rank, WS)),
        "layer.weight_dim1": ShardedTensor.from_rank_offsets(
            "layer.weight_dim1", full_b.chunk(WS, 1)[rank].clone(),
            (1, rank, WS)),
        "layer.norm_replicated": ShardedTensor.from_rank_offsets(
            "layer.norm_replicated", full_c.clone(), replica_id=rank),
        "iteration": 10,
        "args": {"lr": 1e-3, "note": "common state"},
        "common_tensor": torch.arange(3, dtype=torch.int64),
        "layer": {"note": "a dict merged with nothing"},
    }
    # megatron.core <= 0.14 dist_checkpointing.save, step by step:
    sharded, common = save_preprocess(sd, True)
    save_common(common, ck)                       # rank 0: common.pt
    strategy = TorchDistSaveShardedStrategy()
    strategy.save(sharded, ck)
    if rank == 0:
        save_config(CheckpointingConfig(strategy.backend, strategy.version),
                    ck)
    dist.barrier()
    if rank == 0:
        reference(ck, os.path.join(out, "reference_megatron_load.pt"))
        provenance(out, {
            "case": "common_pt", "world_size": WS, "backend": "gloo",
            "api": [
                "sd: ShardedTensor.from_rank_offsets of arange(48).reshape(8,6) "
                "split on dim 0, arange(40).reshape(4,10)+1000 split on dim 1, "
                "linspace(0,1,5).bfloat16() replicated; common values "
                "iteration=10, args={...}, common_tensor=arange(3), "
                "layer={'note': ...}",
                "save_preprocess(sd) -> sharded, common",
                "strategies.common.save_common(common, ckpt)  # common.pt",
                "TorchDistSaveShardedStrategy().save(sharded, ckpt)",
                "save_config(CheckpointingConfig('torch_dist', 1), ckpt)",
                "reference_megatron_load.pt: merge(load_common_state_dict, "
                "load_plain_tensors)"]})


def case_gpt_run(out):
    import megatron.training.arguments as margs
    rank = dist.get_rank()
    save = os.path.join(out, "checkpoints")
    sys.argv = [
        "pretrain_gpt.py", "--num-layers", "2", "--hidden-size", "16",
        "--num-attention-heads", "2", "--ffn-hidden-size", "32",
        "--seq-length", "16", "--max-position-embeddings", "16",
        "--micro-batch-size", "1", "--global-batch-size", "1",
        "--tensor-model-parallel-size", "2", "--save", save,
        "--ckpt-format", "torch_dist", "--use-cpu-initialization",
        "--no-gradient-accumulation-fusion", "--no-masked-softmax-fusion",
        "--no-bias-gelu-fusion", "--no-bias-dropout-fusion",
        "--no-rope-fusion", "--no-persist-layer-norm",
        "--transformer-impl", "local", "--vocab-size", "64",
        "--tokenizer-type", "NullTokenizer", "--lr", "1e-3",
        "--make-vocab-size-divisible-by", "16",
        "--train-iters", "10", "--save-interval", "10",
        "--position-embedding-type", "rope",
        "--untie-embeddings-and-output-weights", "--no-save-optim"]
    argv = list(sys.argv)
    if rank == 0:
        os.makedirs(save)
    dist.barrier()
    # validate_args asks for the CUDA architecture (TP > 1 check): skip.
    margs.get_device_arch_version = lambda: 10
    from megatron.core import parallel_state
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import \
        get_gpt_layer_local_spec
    from megatron.training.arguments import (core_transformer_config_from_args,
                                             parse_args, validate_args)
    from megatron.training.checkpointing import save_checkpoint
    from megatron.training.global_vars import _build_tokenizer, set_args
    args = parse_args()
    validate_args(args)
    set_args(args)
    _build_tokenizer(args)   # save_checkpoint writes its assets (torch_dist)
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=2)
    torch.manual_seed(0)
    model = GPTModel(config=core_transformer_config_from_args(args),
                     transformer_layer_spec=get_gpt_layer_local_spec(),
                     vocab_size=64, max_sequence_length=16,
                     position_embedding_type="rope",
                     share_embeddings_and_output_weights=False)
    # get_rng_state() asks CUDA: the CPU generator's state instead.
    torch.cuda.get_rng_state = lambda *a, **k: torch.get_rng_state()
    save_checkpoint(10, [model], None, None, 0)
    dist.barrier()
    if rank == 0:
        it = os.path.join(save, "iter_0000010")
        reference(it, os.path.join(out, "reference_megatron_load.pt"))
        provenance(out, {
            "case": "gpt_run", "world_size": WS, "backend": "gloo",
            "tensor_model_parallel_size": 2, "argv": argv,
            "api": [
                "args = parse_args(); validate_args(args); set_args(args); "
                "global_vars._build_tokenizer(args)",
                "parallel_state.initialize_model_parallel(2)",
                "GPTModel(core_transformer_config_from_args(args), "
                "get_gpt_layer_local_spec(), vocab_size=64, "
                "max_sequence_length=16, position_embedding_type='rope', "
                "share_embeddings_and_output_weights=False)",
                "megatron.training.checkpointing.save_checkpoint(10, "
                "[model], None, None, 0)  # --no-save-optim",
                "reference_megatron_load.pt: merge(load_common_state_dict, "
                "load_plain_tensors) of iter_0000010"],
            "shim": "mcore_cpu_shim (triton stubs, CUDA no-ops); "
                    "get_device_arch_version = lambda: 10; "
                    "torch.cuda.get_rng_state = torch.get_rng_state"})


def worker(rank, port, case, out, q):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(WS), LOCAL_RANK=str(rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      USE_LIBUV="0", OMP_NUM_THREADS="1")
    try:
        dist.init_process_group("gloo", rank=rank, world_size=WS)
        {"common_pt": case_common_pt, "gpt_run": case_gpt_run}[case](out)
        dist.barrier()
        dist.destroy_process_group()
        q.put((rank, None))
    except BaseException:
        q.put((rank, traceback.format_exc()))
        raise


def run_case(case, out, port):
    d = os.path.join(out, case)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=worker, args=(r, port, case, d, q))
          for r in range(WS)]
    for p in ps:
        p.start()
    for p in ps:
        p.join(600)
    errs = [q.get() for _ in ps]
    bad = [e for _, e in errs if e]
    if bad:
        sys.exit(f"{case} failed:\n" + "\n".join(bad))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--given")
    ap.add_argument("--case", action="append")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.given:
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT="29655", USE_LIBUV="0")
        dist.init_process_group("gloo", rank=0, world_size=1)
        d = os.path.join(a.out, "given")
        os.makedirs(d, exist_ok=True)
        reference(a.given, os.path.join(d, "reference_megatron_load.pt"))
        provenance(d, {"case": "given", "checkpoint": a.given,
                       "api": ["reference_megatron_load.pt: merge("
                               "load_common_state_dict, load_plain_tensors)"]})
        dist.destroy_process_group()
        return
    for i, case in enumerate(a.case or ["common_pt", "gpt_run"]):
        run_case(case, a.out, 29660 + i)


if __name__ == "__main__":
    main()
