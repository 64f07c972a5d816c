"""A C trainer resuming torch 2.6's Adam state (run inside the torch 2.6 chroot; t26_adam.c is the trainer).

usage: t26_adam.py save DIR          a Linear(4, 3) + Adam trained 3 steps, saved with dcp.save of
                                     {"model", "optimizer"} from get_state_dict plus "data": {"x": the next 2
                                     batches}; the uninterrupted run's 2 more steps go to DIR.want.pt
       t26_adam.py check DIR WANT    DIR (the C trainer's output) loaded with dcp.load + set_state_dict into a
                                     fresh model must hold WANT's parameters and Adam moments within TOL and its
                                     steps exactly; and torch's own resume from WANT's source checkpoint must
                                     equal WANT bit for bit (the reference is right)

One process, no process group: torch 2.6's get_state_dict, set_state_dict and DCP work without one.  Adam runs
_single_tensor_adam (CPU: no foreach, no fused), which t26_adam.c follows operation by operation; the C
trainer sums the gradient in its own order, hence a tolerance rather than bit equality.
"""
import sys

LR, BETAS, EPS = 0.01, (0.8, 0.95), 1e-8
TRAIN_STEPS, NEXT_STEPS = 3, 2
TOL = 1e-6  # max |got - want| <= TOL * max(1, max |want|), per tensor


def setup(seed):
    import torch
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(4, 3))
    return m, torch.optim.Adam(m.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=0)


def batches():
    """Every step's batch, from a generator of its own (the model's seed does not move them)."""
    import torch
    g = torch.Generator().manual_seed(100)
    return [torch.randn(5, 4, generator=g) for _ in range(TRAIN_STEPS + NEXT_STEPS)]


def train(m, opt, xs):
    for x in xs:
        opt.zero_grad()
        (m(x) ** 2).sum().backward()
        opt.step()


def final(m, opt):
    """{"params"|"exp_avg"|"exp_avg_sq"|"step": {fqn: tensor}} of the live model and optimizer."""
    out = {"params": {}, "exp_avg": {}, "exp_avg_sq": {}, "step": {}}
    for name, p in m.named_parameters():
        out["params"][name] = p.detach().clone()
        for k in ("exp_avg", "exp_avg_sq", "step"):
            out[k][name] = opt.state[p][k].clone()
    return out


def save(d):
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict
    m, opt = setup(1)
    xs = batches()
    train(m, opt, xs[:TRAIN_STEPS])
    msd, osd = get_state_dict(m, opt)
    dcp.save({"model": msd, "optimizer": osd, "data": {"x": torch.stack(xs[TRAIN_STEPS:])}}, checkpoint_id=d)
    train(m, opt, xs[TRAIN_STEPS:])
    torch.save(final(m, opt), d + ".want.pt")
    print(f"saved {d} after {TRAIN_STEPS} steps; {d}.want.pt after {NEXT_STEPS} more")
    return 0


def restore(d, data):
    """A fresh model and Adam (another seed) restored from DCP directory d; and d's data.x when data."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    m, opt = setup(7)
    msd, osd = get_state_dict(m, opt)  # initializes Adam's state, so every entry is requested
    sd = {"model": msd, "optimizer": osd}
    if data:
        sd["data"] = {"x": torch.zeros(NEXT_STEPS, 5, 4)}
    dcp.load(sd, checkpoint_id=d)
    set_state_dict(m, opt, model_state_dict=sd["model"], optim_state_dict=sd["optimizer"])
    return m, opt, sd.get("data", {}).get("x")


def nested_ok(d):
    """dcp_to_torch_save of d unflattens into torch's optimizer layout (the planner_data paths are torch's)."""
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    dcp_to_torch_save(d, d + ".pt")
    t = torch.load(d + ".pt", weights_only=True)
    o = t.get("optimizer", {})
    return isinstance(o.get("state"), dict) and sorted(o["state"]) == ["0.bias", "0.weight"] and \
        isinstance(o.get("param_groups"), list) and o["param_groups"][0].get("params") == ["0.weight", "0.bias"] and \
        sorted(t.get("model", {})) == ["0.bias", "0.weight"]


def check(d, want_path):
    import torch
    if not want_path.endswith(".want.pt"):
        print(f"FAIL {want_path} is not the SRC.want.pt that save SRC wrote")
        return 1
    want = torch.load(want_path, weights_only=True)
    bad = []
    m, opt = restore(d, False)[:2]
    got = final(m, opt)
    for k in ("params", "exp_avg", "exp_avg_sq", "step"):
        for name, w in want[k].items():
            g = got[k][name]
            if g.dtype != w.dtype or g.shape != w.shape:
                bad.append(f"{k} {name}: {g.dtype} {tuple(g.shape)} vs {w.dtype} {tuple(w.shape)}")
                continue
            diff = (g - w).abs().max().item()
            if k == "step":
                ok = torch.equal(g, w)
                print(f"{k:10} {name:8} {g.item():g} (want {w.item():g}) {'exact' if ok else 'DIFFERENT'}")
            else:
                lim = TOL * max(1.0, w.abs().max().item())
                ok = diff <= lim
                print(f"{k:10} {name:8} max |c - torch| = {diff:.3e} (limit {lim:.1e})")
            if not ok:
                bad.append(f"{k} {name}: max abs difference {diff:.3e}")
    # torch's own resume from the checkpoint the C trainer started from gives WANT bit for bit.
    src = want_path[:-len(".want.pt")]
    m, opt, xs = restore(src, True)
    train(m, opt, list(xs))
    ref = final(m, opt)
    same = all(torch.equal(ref[k][n], w) for k in want for n, w in want[k].items())
    print(f"torch resume from {src}: {'bit for bit' if same else 'DIFFERENT from'} the uninterrupted run")
    if not same:
        bad.append("torch's own resume differs from the uninterrupted run")
    nested = nested_ok(d)
    print(f"dcp_to_torch_save of {d}: {'torch' if nested else 'NOT torch'}'s nested model/optimizer layout")
    if not nested:
        bad.append("the paths do not unflatten as torch's")
    for b in bad:
        print(f"FAIL {b}")
    return 1 if bad else 0


def main():
    a = sys.argv[1:]
    if len(a) == 2 and a[0] == "save":
        return save(a[1])
    if len(a) == 3 and a[0] == "check":
        return check(a[1], a[2])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
