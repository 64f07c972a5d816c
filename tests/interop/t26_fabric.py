"""Lightning Fabric's FSDP sharded checkpoints, emulated in torch 2.6 (run inside the torch 2.6 chroot).

usage: t26_fabric.py save DIR EXPECTED.pt NRANKS      FSDP-train a model 2 steps on NRANKS gloo ranks, then save it
                                                      as FSDPStrategy(state_dict_type="sharded").save_checkpoint
                                                      does; EXPECTED.pt gets the full model and optimizer state
       t26_fabric.py load DIR EXPECTED.pt NRANKS      load DIR as FSDPStrategy.load_checkpoint does, into a fresh
                                                      model on NRANKS ranks; the full state must equal EXPECTED.pt
                                                      bit for bit, and meta.pt's entries the saved ones
       t26_fabric.py flat OUT.safetensors EXPECTED.pt the full state as safetensors keys (model.<fqn>,
                                                      optimizer.state.<fqn>.<name>) must equal OUT.safetensors

Lightning is not packaged by Debian: save and load follow src/lightning/fabric/strategies/fsdp.py step by
step (the sharded branch): the module's and optimizer's sharded state dicts go through DCP, everything else
into meta.pt on rank 0; a directory is a sharded checkpoint only if meta.pt is a file in it; the model is
loaded with dcp.load, the optimizer with load_sharded_optimizer_state_dict (which needs planner_data), and
meta.pt with torch.load (weights_only by default in torch 2.6).
"""
import os
import sys

from t26_ranks import launch, rank_report, tensor_dict_problems

META = {"step": 2, "epoch": 1, "hparams": {"lr": 0.01, "name": "tiny", "layers": [4, 6, 2]}, "rng": b"\x00\x01seed"}


def model():
    import torch
    return torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.ReLU(), torch.nn.Linear(6, 3), torch.nn.Linear(3, 2))


def wrap(m):
    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    return FSDP(m, device_id=torch.device("cpu"), use_orig_params=True)


def sharded_ctx(fm):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import ShardedOptimStateDictConfig, ShardedStateDictConfig, StateDictType
    return FSDP.state_dict_type(fm, StateDictType.SHARDED_STATE_DICT, ShardedStateDictConfig(offload_to_cpu=False),
                                ShardedOptimStateDictConfig(offload_to_cpu=False))


def full_state(fm, opt):
    """{"model": full state dict, "optimizer": full optimizer state dict}, on every rank.  (FSDP's own
    FULL_STATE_DICT of the optimizer on CPU/gloo in torch 2.6 returns exp_avg equal to exp_avg_sq: not used.)"""
    from torch.distributed.fsdp import FullStateDictConfig, StateDictType
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    with FSDP.state_dict_type(fm, StateDictType.FULL_STATE_DICT, FullStateDictConfig(rank0_only=False)):
        msd = fm.state_dict()
    with sharded_ctx(fm):
        osd = FSDP.optim_state_dict(fm, opt)
    return {"model": msd, "optimizer": {"state": {k: {n: gather(v) for n, v in st.items()} for k, st in osd["state"].items()},
                                        "param_groups": osd["param_groups"]}}


def gather(t):
    """A ShardedTensor's global tensor, assembled from every rank's shards; other values as they are."""
    import torch
    import torch.distributed as dist
    from torch.distributed._shard.sharded_tensor import ShardedTensor
    if not isinstance(t, ShardedTensor):
        return t
    full = torch.zeros(t.size(), dtype=t.dtype)
    parts = [None] * dist.get_world_size()
    dist.all_gather_object(parts, [(s.metadata.shard_offsets, s.tensor) for s in t.local_shards()])
    for shards in parts:
        for off, x in shards:
            full[tuple(slice(o, o + n) for o, n in zip(off, x.shape))] = x
    return full


def reference():
    """The same training without FSDP, in one process: every rank of the FSDP run saw the same batches, so
    the averaged gradients and Adam's element-wise steps are these."""
    import torch
    torch.manual_seed(1)
    m = model()
    opt = torch.optim.Adam(m.parameters(), lr=0.01)
    train(m, opt)
    names = [n for n, _ in m.named_parameters()]
    return {"model": m.state_dict(), "optimizer": {"state": {names[i]: st for i, st in opt.state_dict()["state"].items()}}}


def train(m, opt):
    import torch
    for s in range(2):
        torch.manual_seed(100 + s)
        m(torch.randn(5, 4)).square().sum().backward()
        opt.step()
        opt.zero_grad()


def tensors_of(x, prefix=""):
    """Every tensor of a nested dict/list by dotted key, the values apart."""
    import torch
    out, vals = {}, {}
    if isinstance(x, dict):
        items = x.items()
    elif isinstance(x, (list, tuple)):
        items = enumerate(x)
    else:
        (out if isinstance(x, torch.Tensor) else vals)[prefix[:-1]] = x
        return out, vals
    for k, v in items:
        t, w = tensors_of(v, f"{prefix}{k}.")
        out.update(t)
        vals.update(w)
    return out, vals


def same_state(got, want):
    import torch
    gt, gv = tensors_of(got)
    wt, wv = tensors_of(want)
    problems = [f"keys differ: {sorted(set(gt) ^ set(wt))}"] if gt.keys() != wt.keys() else []
    for k in sorted(set(gt) & set(wt)):
        a, b = gt[k], wt[k]
        if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a.view(-1).view(torch.uint8), b.view(-1).view(torch.uint8)):
            problems.append(f"{k}: {a.dtype}{list(a.shape)} differs from {b.dtype}{list(b.shape)}")
    # param_groups: params are names, hyperparameters plain values
    if gv != wv:
        problems.append(f"values differ: {gv} vs {wv}")
    return problems


def rank_main(mode, path, expected):
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from pathlib import Path
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    path = Path(path)
    if mode == "save":
        torch.manual_seed(1)
        fm = wrap(model())
        opt = torch.optim.Adam(fm.parameters(), lr=0.01)
        train(fm, opt)
        state = {"model": fm, "optimizer": opt, **META}
        converted, metadata = {}, {}
        with sharded_ctx(fm):
            for key, obj in state.items():
                if isinstance(obj, torch.nn.Module):
                    converted[key] = obj.state_dict()
                elif isinstance(obj, torch.optim.Optimizer):
                    converted[key] = FSDP.optim_state_dict(fm, obj)
                else:
                    metadata[key] = obj
        path.mkdir(parents=True, exist_ok=True)
        dcp.save(converted, checkpoint_id=path)
        if rank == 0:
            torch.save(metadata, path / "meta.pt")
        full = full_state(fm, opt)
        if rank == 0:
            torch.save(full, expected)
            ref = reference()  # what was saved is what the training made
            problems = same_state({"model": full["model"], "optimizer": {"state": full["optimizer"]["state"]}}, ref)
            for p in problems:
                print(f"rank 0: against a run without FSDP: {p}")
            if problems:
                return 1
        dist.barrier()
        print(f"rank {rank}: saved {len(converted['model'])} model tensors, meta.pt {sorted(metadata)}")
        return 0
    # load, as load_checkpoint's sharded branch
    if not (path.is_dir() and (path / "meta.pt").is_file()):
        print(f"{path}: not a sharded Fabric checkpoint (no meta.pt)")
        return 1
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.optimizer import load_sharded_optimizer_state_dict
    torch.manual_seed(7)  # another initialization: everything must come from the checkpoint
    fm = wrap(model())
    opt = torch.optim.Adam(fm.parameters(), lr=0.5)
    fm(torch.randn(1, 4)).sum().backward()
    opt.step()  # so that the optimizer has state to overwrite
    opt.zero_grad()
    with sharded_ctx(fm):
        module_state = {"model": fm.state_dict()}
        dcp.load(module_state, checkpoint_id=path)
        fm.load_state_dict(module_state["model"])
        optim_state = load_sharded_optimizer_state_dict(model_state_dict=module_state["model"], optimizer_key="optimizer",
                                                        storage_reader=FileSystemReader(path))
        opt.load_state_dict(FSDP.optim_state_dict_to_load(optim_state_dict=optim_state["optimizer"], model=fm, optim=opt))
    metadata = torch.load(path / "meta.pt")
    problems = [] if metadata == META else [f"meta.pt holds {metadata!r}, expected {META!r}"]
    problems += same_state(full_state(fm, opt), torch.load(expected, weights_only=True))
    dist.barrier()
    return rank_report(rank, problems, "model, optimizer and meta.pt equal what was saved")


def flat_main(st_path, expected):
    """shardckpt's view of a Fabric checkpoint (converted to safetensors) against the full state."""
    import torch
    from safetensors.torch import load_file
    got = load_file(st_path)
    full = torch.load(expected, weights_only=True)
    want = {f"model.{k}": v for k, v in full["model"].items()}
    for fqn, st in full["optimizer"]["state"].items():
        for name, v in st.items():
            want[f"optimizer.state.{fqn}.{name}"] = v
    problems = tensor_dict_problems(got, want)
    for p in problems:
        print(p)
    print(f"{len(want)} tensors compared")
    return 1 if problems else 0


def main():
    a = sys.argv[1:]
    if len(a) == 3 and a[0] == "flat":
        return flat_main(a[1], a[2])
    if len(a) != 4 or a[0] not in ("save", "load"):
        print(__doc__, file=sys.stderr)
        return 2
    if os.environ.get("SCK_T26_RANK"):
        return rank_main(a[0], a[1], a[2])
    return launch(__file__, a, int(a[3]))


if __name__ == "__main__":
    sys.exit(main())
