"""planner_data paths under torch 2.6 (run inside the torch 2.6 chroot).

usage: t26_paths.py save DIR        a Module + Adam trained 2 steps, saved with dcp.save of
                                    {"model": ..., "optimizer": ...} from get_state_dict, plus "step"
       t26_paths.py compare A B     dcp_to_torch_save of A and of B must give the same nested dict
                                    (types, keys, list positions, every tensor bit for bit)
"""
import os
import sys


def save(d):
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict
    torch.manual_seed(3)
    m = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))
    opt = torch.optim.Adam(m.parameters(), lr=0.01, betas=(0.8, 0.95))
    for s in range(2):
        torch.manual_seed(10 + s)
        m(torch.randn(3, 4)).square().sum().backward()
        opt.step()
        opt.zero_grad()
    msd, osd = get_state_dict(m, opt)
    dcp.save({"model": msd, "optimizer": osd, "step": 2}, checkpoint_id=d)
    print(f"saved {d}")
    return 0


def same(a, b, where=""):
    import torch
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        ok = isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape \
            and torch.equal(a, b)
        return [] if ok else [f"{where}: tensors differ"]
    if type(a) is not type(b):
        return [f"{where}: {type(a).__name__} vs {type(b).__name__}"]
    if isinstance(a, dict):
        if list(a) != list(b) and set(a) != set(b):
            return [f"{where}: keys {sorted(map(str, a))} vs {sorted(map(str, b))}"]
        return [p for k in a for p in same(a[k], b[k], f"{where}.{k}")]
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return [f"{where}: {len(a)} vs {len(b)} items"]
        return [p for i, (x, y) in enumerate(zip(a, b)) for p in same(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {a!r} vs {b!r}"]


def compare(a, b):
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    dcp_to_torch_save(a, a + ".pt")
    dcp_to_torch_save(b, b + ".pt")
    ta, tb = torch.load(a + ".pt", weights_only=True), torch.load(b + ".pt", weights_only=True)
    if not isinstance(ta.get("optimizer", {}).get("state"), dict) or not isinstance(ta["optimizer"].get("param_groups"), list):
        print(f"torch's own save did not unflatten as expected: {list(ta)}")
        return 1
    problems = same(ta, tb, "state")
    for p in problems:
        print(p)
    print(f"dcp_to_torch_save: {'the same' if not problems else 'different'} nested dicts "
          f"(optimizer state of {len(ta['optimizer']['state'])} parameters, {len(ta['optimizer']['param_groups'])} group)")
    return 1 if problems else 0


def main():
    a = sys.argv[1:]
    if len(a) == 2 and a[0] == "save":
        return save(a[1])
    if len(a) == 3 and a[0] == "compare":
        return compare(a[1], a[2])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
