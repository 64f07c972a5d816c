"""safetensors __metadata__ strings under torch 2.6 and safetensors 0.4.5 (run inside the chroot).

usage: t26_stmeta.py make DIR        DIR/a.safetensors (save_file with FOREIGN metadata), DIR/b.safetensors
                                     (the same, one byte of one string changed), DIR/hf (two shards + index,
                                     FOREIGN in the first, "format": "pt" in both, as transformers writes)
       t26_stmeta.py check PATH      safe_open(...).metadata() of the file (or of each shard of an HF
                                     directory) is FOREIGN + "format": "pt" exactly; tensors bit for bit
       t26_stmeta.py dcp DIR         dcp_to_torch_save of DIR: every FOREIGN string a str, exactly
       t26_stmeta.py save-dcp DIR    torch's dcp.save of a tensor and the values VALUES
       t26_stmeta.py values PATH     a safetensors file converted from save-dcp's DIR: str values as
                                     themselves, others as JSON named in "shardckpt.json_keys"
"""
import json
import os
import sys

FOREIGN = {"lr": '{"lr": 0.1}', "n": "3", "note": "not json {", "t": "true", "e": "",
           "u": "\u00e9 \u540d tab\t nul\x00 q\" bs\\ \U0001F600"}
VALUES = {"step": 3, "name": "3", "cfg": {"lr": 0.1, "tag": "x"}}


def tensors():
    import torch
    return {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3) * 0.5, "b": torch.tensor([1, -2], dtype=torch.int64)}


def make(d):
    import torch
    from safetensors.torch import save_file
    os.makedirs(os.path.join(d, "hf"), exist_ok=True)
    t = tensors()
    save_file(t, os.path.join(d, "a.safetensors"), metadata=FOREIGN)
    changed = dict(FOREIGN, lr='{"lr":0.1}')
    save_file(t, os.path.join(d, "b.safetensors"), metadata=changed)
    shards = {"model-00001-of-00002.safetensors": {"w": t["w"]}, "model-00002-of-00002.safetensors": {"b": t["b"]}}
    for i, (name, part) in enumerate(shards.items()):
        save_file(part, os.path.join(d, "hf", name), metadata=dict(FOREIGN, format="pt") if i == 0 else {"format": "pt"})
    index = {"metadata": {"total_size": sum(x.numel() * x.element_size() for x in t.values())},
             "weight_map": {k: name for name, part in shards.items() for k in part}}
    with open(os.path.join(d, "hf", "model.safetensors.index.json"), "w") as f:
        json.dump(index, f)
    print(f"made {d}: {len(FOREIGN)} foreign strings, torch {torch.__version__}")
    return 0


def check(path):
    import torch
    from safetensors import safe_open
    files = [path] if path.endswith(".safetensors") else \
        sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".safetensors"))
    problems, got = [], {}
    for i, f in enumerate(files):
        with safe_open(f, "pt") as s:
            md = s.metadata()
            want = dict(FOREIGN, format="pt") if i == 0 else {"format": "pt"}
            if md != want:
                problems.append(f"{f}: metadata {md!r}\n  want {want!r}")
            got.update({k: s.get_tensor(k) for k in s.keys()})
    want_t = tensors()
    if set(got) != set(want_t) or not all(torch.equal(got[k], want_t[k]) and got[k].dtype == want_t[k].dtype for k in got):
        problems.append(f"{path}: tensors {got} differ from {want_t}")
    print("\n".join(problems) if problems else f"ok {path}: {len(FOREIGN)} strings exact in {len(files)} file(s)")
    return 1 if problems else 0


def dcp(d):
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    out = d + ".pt"
    dcp_to_torch_save(d, out)
    sd = torch.load(out, weights_only=False)
    problems = [f"{k}: {sd.get(k)!r} ({type(sd.get(k)).__name__}), want the str {v!r}" for k, v in FOREIGN.items()
                if type(sd.get(k)) is not str or sd[k] != v]
    print("\n".join(problems) if problems else f"ok {d}: torch reads every string as the same str")
    return 1 if problems else 0


def save_dcp(d):
    import torch.distributed.checkpoint as dist_cp
    dist_cp.save(dict(tensors(), **VALUES), checkpoint_id=d)
    print(f"saved {d}")
    return 0


def values(path):
    from safetensors import safe_open
    with safe_open(path, "pt") as s:
        md = s.metadata()
    # DCP flattens the dict: cfg.lr and cfg.tag are entries of their own
    want = {"format": "pt", "name": "3", "step": "3", "cfg.lr": "0.1", "cfg.tag": "x",
            "shardckpt.json_keys": '["cfg.lr","step"]'}
    if md != want:
        print(f"{path}: metadata {md!r}\n  want {want!r}")
        return 1
    print(f"ok {path}: str value as itself, others JSON named in shardckpt.json_keys")
    return 0


if __name__ == "__main__":
    cmds = {"make": make, "check": check, "dcp": dcp, "save-dcp": save_dcp, "values": values}
    sys.exit(cmds[sys.argv[1]](sys.argv[2]))
