"""DTensor rows and columns, nested optimizer state and Python values under torch 2.6 (run inside the chroot).

usage: t26_dtensor.py save DIR NRANKS         dcp.save of STATE's DTensors (Shard(0) rows, Shard(1) columns,
                                              Replicate) on NRANKS gloo ranks of a CPU mesh
       t26_dtensor.py load DIR NRANKS same|swap
                                              dcp.load into zeroed DTensors on NRANKS ranks (swap: rows as
                                              Shard(1), columns as Shard(0)); every tensor and value must equal
                                              STATE bit for bit
       t26_dtensor.py flat OUT.safetensors    shardckpt's whole view (converted to safetensors) equals STATE
       t26_dtensor.py train-save DIR NRANKS   FSDP-train a Module + Adam 3 steps on NRANKS ranks, dcp.save its
                                              get_state_dict, then train 2 more steps (the uninterrupted run)
                                              and keep the parameters in DIR.want.pt
       t26_dtensor.py resume DIR NRANKS WANT  a fresh model + Adam (FSDP on NRANKS > 1, plain on 1) restored by
                                              dcp.load + set_state_dict, trained the same 2 steps, must have
                                              WANT's parameters and Adam moments bit for bit
"""
import os
import sys

from t26_ranks import launch, load_args, save_args, rank_report, tensor_dict_problems

ROWS, COLS = (7, 5), (4, 9)  # 7 rows over 2-4 ranks: uneven shards


def full_tensors():
    """STATE's tensors, whole, by flattened key."""
    import torch
    return {
        "model.rows": torch.arange(35, dtype=torch.float32).reshape(ROWS) * 0.5 - 3,
        "model.cols": (torch.arange(36, dtype=torch.float32).reshape(COLS) * -0.25).to(torch.bfloat16),
        "model.idx": torch.arange(6, dtype=torch.int64) * 1000003,
        "model.rep": torch.tensor([1.5, -2.0, 3.25], dtype=torch.float64),
        "optim.state.model.rows.exp_avg": torch.arange(35, dtype=torch.float32).reshape(ROWS) / 7,
        "optim.state.model.rows.step": torch.tensor(3.0),
    }


VALUES = {"step": 5, "name": "dtensor", "optim.param_groups.0.lr": 0.1, "optim.param_groups.0.betas": (0.9, 0.99)}


def placements(swap):
    from torch.distributed.tensor import Replicate, Shard
    rows, cols = (Shard(1), Shard(0)) if swap else (Shard(0), Shard(1))
    return {"model.rows": rows, "model.cols": cols, "model.idx": Shard(0), "model.rep": Replicate(),
            "optim.state.model.rows.exp_avg": rows}


def state(mesh, fill, swap=False):
    """The nested state dict: DTensors of the full tensors (or zeros when not fill) and the Python values
    (or placeholders)."""
    import torch
    from torch.distributed.tensor import distribute_tensor
    full, pl = full_tensors(), placements(swap)
    t = {k: distribute_tensor(v if fill else torch.zeros_like(v), mesh, [pl[k]]) for k, v in full.items() if k in pl}
    step = full["optim.state.model.rows.step"] if fill else torch.tensor(0.0)
    return {
        "model": {"rows": t["model.rows"], "cols": t["model.cols"], "idx": t["model.idx"], "rep": t["model.rep"]},
        "optim": {"state": {"model.rows": {"exp_avg": t["optim.state.model.rows.exp_avg"], "step": step}},
                  "param_groups": [{"lr": 0.1 if fill else 0.0, "betas": (0.9, 0.99) if fill else (0.0, 0.0),
                                    "params": ["model.rows"]}]},
        "step": 5 if fill else 0,
        "name": "dtensor" if fill else "",
    }


def problems_of(sd):
    """What differs between a loaded state dict and STATE."""
    import torch
    from torch.distributed.tensor import DTensor
    m, o = sd["model"], sd["optim"]
    got = {"model.rows": m["rows"], "model.cols": m["cols"], "model.idx": m["idx"], "model.rep": m["rep"],
           "optim.state.model.rows.exp_avg": o["state"]["model.rows"]["exp_avg"],
           "optim.state.model.rows.step": o["state"]["model.rows"]["step"]}
    out = []
    for k, want in full_tensors().items():
        g = got[k].full_tensor() if isinstance(got[k], DTensor) else got[k]
        if g.dtype != want.dtype or g.shape != want.shape or not torch.equal(g, want):
            out.append(f"{k}: {g.dtype}{list(g.shape)} {g.flatten()[:6].tolist()} differs from {want.flatten()[:6].tolist()}")
    pg = o["param_groups"][0]
    vals = {"step": sd["step"], "name": sd["name"], "optim.param_groups.0.lr": pg["lr"],
            "optim.param_groups.0.betas": pg["betas"]}
    if vals != VALUES:
        out.append(f"values {vals} differ from {VALUES}")
    return out


def dtensor_rank(mode, path, swap):
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (n,))
    if mode == "save":
        dcp.save(state(mesh, True), **save_args(path))
        dist.barrier()
        print(f"rank {rank}: saved rows {list(state(mesh, True)['model']['rows'].to_local().shape)} of {list(ROWS)}")
        return 0
    sd = state(mesh, False, swap)
    dcp.load(sd, **load_args(path))
    problems = problems_of(sd)
    dist.barrier()
    how = "swapped" if swap else "same"
    return rank_report(rank, problems, f"of {n}: {how} placements, every tensor and value equal")


def flat_main(st_path):
    from safetensors.torch import load_file
    got, want = load_file(st_path), full_tensors()
    problems = tensor_dict_problems(got, want)
    for p in problems:
        print(p)
    print(f"shardckpt's whole view: {len(got)} tensors, {'equal' if not problems else 'DIFFERENT'}")
    return 1 if problems else 0


# ----------------------------------------------------------------------- training resume (get/set_state_dict)

def model():
    import torch
    return torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.ReLU(), torch.nn.Linear(6, 3))


def train(m, opt, steps):
    """Every rank sees the same batches, so FSDP's averaged gradients equal one process's (2 ranks: x+x is
    exact, then halved exactly)."""
    import torch
    for s in steps:
        torch.manual_seed(100 + s)
        m(torch.randn(5, 4)).square().sum().backward()
        opt.step()
        opt.zero_grad()


def full_params_and_moments(m, opt):
    """{fqn: param, fqn.exp_avg: ..., fqn.exp_avg_sq: ..., fqn.step: ...}, whole, on every rank."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
    msd, osd = get_state_dict(m, opt, options=StateDictOptions(full_state_dict=True))
    out = {k: v.clone() for k, v in msd.items()}
    for fqn, st in osd["state"].items():
        out.update({f"{fqn}.{n}": v.clone() for n, v in st.items()})
    return out


def resume_rank(mode, path, want_path):
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    wrap = (lambda x: FSDP(x, device_id=torch.device("cpu"), use_orig_params=True)) if n > 1 else (lambda x: x)
    if mode == "train-save":
        torch.manual_seed(1)
        m = wrap(model())
        opt = torch.optim.Adam(m.parameters(), lr=0.01, betas=(0.8, 0.95))
        train(m, opt, range(3))
        msd, osd = get_state_dict(m, opt)
        dcp.save({"model": msd, "optimizer": osd, "step": 3}, **save_args(path))
        train(m, opt, range(3, 5))  # the uninterrupted run
        want = full_params_and_moments(m, opt)
        if rank == 0:
            torch.save(want, path + ".want.pt")
        dist.barrier()
        print(f"rank {rank}: saved after 3 steps; uninterrupted run kept after 5 ({len(want)} tensors)")
        return 0
    torch.manual_seed(7)  # another initialization and other hyperparameters: all must come from the checkpoint
    m = wrap(model())
    opt = torch.optim.Adam(m.parameters(), lr=0.5, betas=(0.5, 0.5))
    train(m, opt, [99])  # so that the optimizer has state to overwrite
    msd, osd = get_state_dict(m, opt)
    sd = {"model": msd, "optimizer": osd, "step": 0}
    dcp.load(sd, **load_args(path))
    set_state_dict(m, opt, model_state_dict=sd["model"], optim_state_dict=sd["optimizer"])
    train(m, opt, range(sd["step"], sd["step"] + 2))
    got, want = full_params_and_moments(m, opt), torch.load(want_path, weights_only=True)
    problems = tensor_dict_problems(got, want)
    if sd["step"] != 3:
        problems.append(f"step {sd['step']}, saved 3")
    dist.barrier()
    return rank_report(rank, problems,
                       f"of {n}: resumed at step 3, after 2 more steps {len(got)} tensors equal the uninterrupted run")


def main():
    a = sys.argv[1:]
    if len(a) == 2 and a[0] == "flat":
        return flat_main(a[1])
    shapes = {"save": 3, "load": 4, "train-save": 3, "resume": 4}
    if not a or shapes.get(a[0]) != len(a) or (a[0] == "load" and a[3] not in ("same", "swap")):
        print(__doc__, file=sys.stderr)
        return 2
    if os.environ.get("SCK_T26_RANK"):
        if a[0] in ("save", "load"):
            return dtensor_rank(a[0], a[1], a[0] == "load" and a[3] == "swap")
        return resume_rank(a[0], a[1], a[3] if a[0] == "resume" else None)
    return launch(__file__, a, int(a[2]))


if __name__ == "__main__":
    sys.exit(main())
