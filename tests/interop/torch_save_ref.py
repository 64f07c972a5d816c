"""torch 1.13 DCP writes a reference checkpoint from 2 gloo ranks.

usage: torch_save_ref.py OUTDIR [--single-file-per-rank]

Writes the DCP checkpoint into OUTDIR plus, for the checks:
  OUTDIR/expected.safetensors   every tensor in full (npst), keys = DCP fqns
  OUTDIR/expected_values.json   {fqn: value} for non-tensor entries (bytes as {"__bytes__": hex})

The state dict is FLAT with dotted keys: torch 1.13 does not flatten nested dicts, it would save
{"model": {...}} as a single BYTE_IO pickle (holding only the coordinator's local shards).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop_common as ic  # noqa: E402

WORLD = 2


def reference_tensors():
    import torch
    return {
        # ShardedTensors, chunked along dim 0 over the 2 ranks
        "model.w": torch.arange(60, dtype=torch.float32).reshape(10, 6) * 0.37 - 5.0,
        "model.emb": ((torch.arange(28, dtype=torch.float32) - 10.0) * 0.3).to(torch.bfloat16).reshape(7, 4),
        # plain tensors, replicated on both ranks
        "model.b": torch.arange(6, dtype=torch.float32) / 3.0 - 1.0,
        "optim.step_t": torch.tensor(7.25, dtype=torch.float32),  # 0-d, like optimizer "step"
        # a transposed view: clone() keeps its strides (1, 4), so torch.save stores it column-major
        "model.wt": (torch.arange(12, dtype=torch.float32).reshape(3, 4) * 0.5).t(),
    }


SHARDED = ("model.w", "model.emb")


def reference_values():
    return {
        "step": 5,
        "meta": {"lr": 0.001, "name": "x", "ids": [1, 2, 3]},
        "blob": b"raw\x00bytes",
        "betas": (0.9, 0.999),  # tuple, as in optimizer param_groups
        "big": 2 ** 40,  # pickled as LONG1
    }


def rank_main(outdir, single_file):
    ic.ensure_shim()
    import torch.distributed._shard.checkpoint as dcp
    from torch.distributed._shard import sharded_tensor
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec

    rank, world = ic.init_dist()
    spec = ChunkShardingSpec(dim=0, placements=[f"rank:{r}/cpu" for r in range(world)])
    full = reference_tensors()
    state = {}
    for fqn, t in full.items():
        if fqn in SHARDED:
            st = sharded_tensor.empty(spec, *t.shape, dtype=t.dtype)
            for shard in st.local_shards():
                off, size = shard.metadata.shard_offsets[0], shard.metadata.shard_sizes[0]
                shard.tensor.copy_(t[off:off + size])
                print(f"{fqn}: local shard rows [{off}, {off + size})")
            state[fqn] = st
        else:
            state[fqn] = t.clone()
    state.update(reference_values())
    dcp.save_state_dict(state, dcp.FileSystemWriter(outdir, single_file_per_rank=single_file))

    if rank == 0:
        import json
        import npst
        npst.write(os.path.join(outdir, "expected.safetensors"),
                   {fqn: ic.tensor_to_np(t) for fqn, t in full.items()})
        with open(os.path.join(outdir, "expected_values.json"), "w") as f:
            json.dump({k: ic.to_json_value(v) for k, v in reference_values().items()}, f, indent=1)
    import torch.distributed as dist
    dist.barrier()
    dist.destroy_process_group()
    return 0


def main():
    args = sys.argv[1:]
    single_file = "--single-file-per-rank" in args
    pos = [a for a in args if not a.startswith("--")]
    if len(pos) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    if ic.is_rank_process():
        return rank_main(pos[0], single_file)
    os.makedirs(pos[0], exist_ok=True)
    return ic.launch_ranks(os.path.abspath(__file__), args, WORLD)


if __name__ == "__main__":
    sys.exit(main())
