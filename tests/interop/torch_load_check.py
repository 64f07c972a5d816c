"""torch 1.13 DCP loads a checkpoint on N gloo ranks and compares it bit-for-bit to a reference.

usage: torch_load_check.py CKPT_DIR EXPECTED.safetensors [--values VALUES.json] [--ranks N]

Every tensor in EXPECTED is loaded: 2-d+ tensors with dim0 >= N as ShardedTensors chunked along
dim 0 over the N ranks, the others as plain tensors on every rank.  VALUES.json ({fqn: value},
bytes as {"__bytes__": hex}) lists non-tensor entries to load and compare (types must match too).
The checkpoint may carry a torch-2.x style .metadata (sitecustomize.py aliases the module names).
Also checks the metadata (kind, dtype, size, chunk tiling, a storage entry per chunk), that every
stored chunk has the declared dtype and shape, and that the checkpoint holds no other keys.
Exit 0 only if everything matches.
"""
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop_common as ic  # noqa: E402
import npst  # noqa: E402


def check_metadata(md, expected, values):
    """Problems with the checkpoint's Metadata relative to the expectations (strings)."""
    import torch
    problems = []
    sdm = md.state_dict_metadata
    storage = md.storage_data or {}
    storage_keys = {(k.fqn, tuple(k.offset) if k.offset is not None else None) for k in storage}
    for fqn, (dt, arr) in expected.items():
        m = sdm.get(fqn)
        if m is None:
            problems.append(f"metadata: tensor {fqn} missing")
            continue
        if type(m).__name__ != "TensorStorageMetadata":
            problems.append(f"metadata: {fqn} is {type(m).__name__}, expected TensorStorageMetadata")
            continue
        if m.properties.dtype != ic.st_to_torch_dtype(dt):
            problems.append(f"metadata: {fqn} dtype {m.properties.dtype}, expected {ic.st_to_torch_dtype(dt)}")
        if tuple(m.size) != arr.shape:
            problems.append(f"metadata: {fqn} size {list(m.size)}, expected {list(arr.shape)}")
            continue
        volume = 0
        for c in m.chunks:
            if len(c.offsets) != arr.ndim or len(c.sizes) != arr.ndim or any(
                    o < 0 or s < 0 or o + s > d for o, s, d in zip(c.offsets, c.sizes, arr.shape)):
                problems.append(f"metadata: {fqn} chunk offsets {list(c.offsets)} sizes {list(c.sizes)} "
                                f"outside {list(arr.shape)}")
            volume += int(torch.Size(c.sizes).numel())
            if (fqn, tuple(c.offsets)) not in storage_keys:
                problems.append(f"metadata: {fqn} chunk at {list(c.offsets)} has no storage_data entry")
        if volume != arr.size:
            problems.append(f"metadata: {fqn} chunks cover {volume} elements, tensor has {arr.size}")
    for fqn in values:
        m = sdm.get(fqn)
        if m is None:
            problems.append(f"metadata: value {fqn} missing")
        elif type(m).__name__ != "BytesStorageMetadata":
            problems.append(f"metadata: {fqn} is {type(m).__name__}, expected BytesStorageMetadata")
        elif (fqn, None) not in storage_keys:
            problems.append(f"metadata: {fqn} has no storage_data entry")
    for fqn in sdm:
        if fqn not in expected and fqn not in values:
            problems.append(f"metadata: unexpected key {fqn} ({type(sdm[fqn]).__name__})")
    return problems


def complement(dt, arr):
    """Bits guaranteed to differ from the expected ones, so a chunk nobody wrote is caught."""
    import numpy as np
    if dt == "BOOL":
        return ~arr
    return (arr.view(np.uint8) ^ 0xFF).view(arr.dtype) if arr.ndim else \
        (arr.reshape(1).view(np.uint8) ^ 0xFF).view(arr.dtype).reshape(())


def rank_main(ckpt, expected_path, values_path, ranks):
    ic.ensure_shim()
    import torch
    import torch.distributed as dist
    import torch.distributed._shard.checkpoint as dcp
    from torch.distributed._shard import sharded_tensor
    from torch.distributed._shard.checkpoint.default_planner import DefaultLoadPlanner
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec

    rank, world = ic.init_dist()
    say = (lambda *a: print(*a, flush=True))
    expected, _ = npst.read(expected_path)
    values = {k: ic.from_json_value(v) for k, v in (ic.load_json(values_path) if values_path else {}).items()}
    problems = []

    reader = dcp.FileSystemReader(ckpt)
    try:
        md = reader.read_metadata()
    except Exception:
        say(f"FAIL: cannot unpickle {ckpt}/.metadata:\n{traceback.format_exc()}")
        return 1
    problems += check_metadata(md, expected, values)

    # torch.load of each stored chunk is recorded so its dtype/shape can be checked before copy_()
    # silently converts it into the destination.
    last_loaded = []
    real_load = torch.load

    def recording_load(*a, **k):
        obj = real_load(*a, **k)
        last_loaded[:] = [obj]
        return obj
    torch.load = recording_load

    class CheckingPlanner(DefaultLoadPlanner):
        def resolve_tensor(self, read_item):
            fqn = read_item.storage_index.fqn
            got = last_loaded[0] if last_loaded else None
            tmd = md.state_dict_metadata[fqn]
            sizes = [c.sizes for c in tmd.chunks if tuple(c.offsets) == tuple(read_item.storage_index.offset)]
            if not isinstance(got, torch.Tensor):
                problems.append(f"{fqn}: stored chunk at {list(read_item.storage_index.offset)} "
                                f"unpickled to {type(got).__name__}, not a tensor")
            else:
                if got.dtype != tmd.properties.dtype:
                    problems.append(f"{fqn}: stored chunk at {list(read_item.storage_index.offset)} has dtype "
                                    f"{got.dtype}, metadata says {tmd.properties.dtype}")
                if sizes and tuple(got.shape) != tuple(sizes[0]):
                    problems.append(f"{fqn}: stored chunk at {list(read_item.storage_index.offset)} has shape "
                                    f"{list(got.shape)}, metadata says {list(sizes[0])}")
            return super().resolve_tensor(read_item)

    spec = ChunkShardingSpec(dim=0, placements=[f"rank:{r}/cpu" for r in range(world)])
    state = {}
    present = md.state_dict_metadata
    for fqn, (dt, arr) in expected.items():
        if fqn not in present or type(present[fqn]).__name__ != "TensorStorageMetadata":
            continue  # already reported; torch 1.13 would only raise a KeyError
        fill = complement(dt, arr)
        if arr.ndim >= 2 and arr.shape[0] >= world:
            st = sharded_tensor.empty(spec, *arr.shape, dtype=ic.st_to_torch_dtype(dt))
            for shard in st.local_shards():
                sl = tuple(slice(o, o + s) for o, s in zip(shard.metadata.shard_offsets, shard.metadata.shard_sizes))
                shard.tensor.copy_(ic.np_to_tensor(dt, fill[sl]))
            state[fqn] = st
        else:
            state[fqn] = ic.np_to_tensor(dt, fill)
    for fqn in values:
        if fqn in present:
            state[fqn] = None

    try:
        dcp.load_state_dict(state, reader, planner=CheckingPlanner())
    except Exception:
        say(f"FAIL: load_state_dict raised:\n{traceback.format_exc()}")
        return 1
    finally:
        torch.load = real_load

    n_elems = 0
    for fqn, obj in state.items():
        if fqn in values:
            continue
        dt, arr = expected[fqn]
        if isinstance(obj, sharded_tensor.ShardedTensor):
            parts = [(tuple(slice(o, o + s) for o, s in zip(sh.metadata.shard_offsets, sh.metadata.shard_sizes)),
                      sh.tensor) for sh in obj.local_shards()]
        else:
            parts = [(tuple(slice(None) for _ in arr.shape), obj)]
        for sl, t in parts:
            want = (dt, arr[sl])
            got = ic.tensor_to_np(t)
            n_elems += want[1].size
            if not npst.same_bits(want, got):
                where = ",".join(f"{s.start}:{s.stop}" if s.start is not None else ":" for s in sl)
                problems += npst.describe_diff(f"{fqn}[{where}]", want, got,
                                               origin=[s.start or 0 for s in sl])
    for fqn, want in values.items():
        if fqn not in present:
            continue
        got = state.get(fqn)
        if not ic.strict_equal(want, got):
            problems.append(f"{fqn}: loaded {got!r} ({type(got).__name__}), expected {want!r}")

    for p in problems:
        if rank == 0 or not p.startswith("metadata:"):  # metadata problems are the same on every rank
            say("FAIL: " + p)
    say(f"rank {rank}/{world}: {len(state) - len(values)} tensors ({n_elems} local elements), "
        f"{len(values)} values checked, {len(problems)} problems")
    dist.barrier()
    dist.destroy_process_group()
    return 1 if problems else 0


def main():
    ckpt, expected_path, values_path, ranks = ic.parse_check_args(sys.argv[1:], __doc__, default_ranks=2)
    if ic.is_rank_process():
        return rank_main(ckpt, expected_path, values_path, ranks)
    return ic.launch_ranks(os.path.abspath(__file__), sys.argv[1:], ranks)


if __name__ == "__main__":
    sys.exit(main())
