"""Python values torch round-trips, through shardckpt's CLI (issue: values outside the decoded subset).

usage: values_check.py save DIR | load DIR      (run by the torch under test: 1.13 on the host, 2.6 in
                                                   the trixie chroot; values_suite.py drives both)

`save` writes a DCP checkpoint (torch's own dcp save, one process) holding plain values and values
outside shardckpt's decoded subset; `load` reads one back with torch's dcp load and checks every value
against the same construction, type included.  Prints "ok" and exits 0, or raises.
"""
import sys

import numpy as np
import torch
import torch.distributed.checkpoint as dcp


def values():
    rs = np.random.RandomState(7)
    return {
        "step": 5,
        "lr": 0.1,
        "name": "run-1",
        "sizes": [1, 2, 3],
        "big": 2 ** 70,
        "neg_big": -(2 ** 80) + 7,
        "a_set": {1, 2, 3},
        "a_tuple": (1, "a", 2.5),
        "nested": {"t": (1, (2, 3)), "big": [2 ** 65], "e": ()},
        "cplx": 1 + 2j,
        "np_scalar": np.float64(0.5),
        "size": torch.Size([3, 4]),
        "np_rng": rs.get_state(),
    }


def state():
    sd = {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4)}
    sd.update(values())
    return sd


def same(a, b):
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


def save(path):
    w = dcp.FileSystemWriter(path)
    if hasattr(dcp, "save"):   # torch 2.x: no process group means one process
        dcp.save(state(), storage_writer=w)
    else:
        dcp.save_state_dict(state(), w, no_dist=True)


def load(path):
    sd = {"w": torch.zeros(3, 4)}
    # the same dict structure (torch 2.x flattens nested dicts into keys), every value a placeholder
    def blank(v):
        return {k: blank(x) for k, x in v.items()} if isinstance(v, dict) else None
    sd.update(blank(values()))
    r = dcp.FileSystemReader(path)
    if hasattr(dcp, "load"):
        dcp.load(sd, storage_reader=r)
    else:
        dcp.load_state_dict(sd, r, no_dist=True)
    assert torch.equal(sd["w"], torch.arange(12, dtype=torch.float32).reshape(3, 4)), sd["w"]
    bad = [k for k, v in values().items() if not same(v, sd[k])]
    assert not bad, "values that changed: " + ", ".join(f"{k}: {sd[k]!r} (want {values()[k]!r})" for k in bad)


if __name__ == "__main__":
    {"save": save, "load": load}[sys.argv[1]](sys.argv[2])
    print("ok")
