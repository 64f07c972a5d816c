"""Every dtype torch 2.6's DCP can save (run inside the torch 2.6 chroot).

usage: t26_dtypes.py save DIR [big|st] dcp.save of one (6, 5) tensor per dtype, each filled with a byte
                                      pattern (NaN and infinity bit patterns included); `big` writes
                                      every item as a big-endian machine's torch.save does (byteorder
                                      record "big", each component's bytes reversed); `st` saves only
                                      the dtypes safetensors has names for
       t26_dtypes.py retag DIR KEY DTYPE  rewrites DIR/.metadata so that tensor KEY claims torch.DTYPE
       t26_dtypes.py load DIR [big]   dcp.load into zeros of each dtype: every tensor's bytes equal
                                      the pattern (`big`: DIR holds big-endian items, and torch 2.6
                                      byte-swaps only those with a typed storage class; the newer
                                      dtypes it saves as UntypedStorage, and loads those unswapped)
       t26_dtypes.py st FILE          safetensors' own readers load FILE (the dtypes safetensors names)
                                      with every tensor's bytes equal to the pattern
torch's bits* dtypes are left out: torch 2.6's DCP planner cannot size them (torch.iinfo fails).
"""
import os
import sys

from t26_ranks import load_args, save_args

DTYPES = ["float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64", "uint8", "bool",
          "complex64", "complex128", "complex32", "uint16", "uint32", "uint64",
          "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"]
# dtypes safetensors has a name for (C64 too, but Debian's safetensors 0.4.5 predates it)
ST_DTYPES = ["float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64", "uint8", "bool",
             "uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2"]
SHAPE = (6, 5)


def pattern(name, k):
    import torch
    d = getattr(torch, name)
    es = torch.empty(0, dtype=d).element_size()
    b = ((torch.arange(SHAPE[0] * SHAPE[1] * es, dtype=torch.int64) * 37 + k * 11) % 256).to(torch.uint8)
    if name == "bool":
        b &= 1
    return b.view(d).reshape(SHAPE)


def component_size(t):
    import torch
    return t.element_size() // 2 if t.dtype in (torch.complex32, torch.complex64, torch.complex128) else t.element_size()


def save(d, big, st_only=False):
    import torch
    import torch.distributed.checkpoint as dcp
    sd = {f"w.{n}": pattern(n, k) for k, n in enumerate(DTYPES) if n in ST_DTYPES or not st_only}
    if big:
        # What torch.save writes on a big-endian machine: the byteorder record says "big" and storage bytes
        # are in that order.  On this (little-endian) machine: reverse each component, then save with
        # sys.byteorder claiming "big" (torch.serialization reads it when it writes the record).
        for k, t in sd.items():
            u = component_size(t)
            if u > 1:
                sd[k] = t.contiguous().view(torch.uint8).reshape(-1, u).flip(1).reshape(-1).view(t.dtype).reshape(SHAPE)
        real = sys.byteorder
        sys.byteorder = "big"
        try:
            dcp.save(sd, **save_args(d))
        finally:
            sys.byteorder = real
    else:
        dcp.save(sd, **save_args(d))
    print(f"saved {len(sd)} dtypes to {d}{' (big-endian items)' if big else ''}")
    return 0


def same_bytes(a, b):
    import torch
    return a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape) and \
        torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


UNTYPED_MULTIBYTE = ("complex32", "uint16", "uint32", "uint64")


def load(d, big=False):
    import torch
    import torch.distributed.checkpoint as dcp
    names = [n for n in DTYPES if not (big and n in UNTYPED_MULTIBYTE)]
    sd = {f"w.{n}": torch.zeros(SHAPE, dtype=getattr(torch, n)) for n in names}
    dcp.load(sd, **load_args(d))
    bad = [n for k, n in enumerate(DTYPES) if n in names and not same_bytes(sd[f"w.{n}"], pattern(n, k))]
    for n in bad:
        print(f"w.{n}: bytes differ from the saved pattern")
    print(f"loaded {len(names) - len(bad)}/{len(names)} dtypes from {d} bit for bit")
    return 1 if bad else 0


def st(f):
    import numpy as np
    import torch
    from safetensors import safe_open
    # safetensors 0.4.5's torch side maps no U16/U32/U64 and numpy has no float8 or bfloat16: read each
    # through the side that knows it.
    bad = []
    with safe_open(f, framework="pt") as pt, safe_open(f, framework="np") as npf:
        keys = set(pt.keys())
        for k, n in enumerate(DTYPES):
            key = f"w.{n}"
            if n not in ST_DTYPES:
                if key in keys:
                    bad.append(f"{key}: present, but safetensors has no name for {n}")
                continue
            if key not in keys:
                bad.append(f"{key}: missing")
                continue
            want = pattern(n, k).contiguous().view(torch.uint8).numpy().tobytes()
            if n not in ("uint16", "uint32", "uint64"):
                t = pt.get_tensor(key)
                ok = t.dtype == getattr(torch, n) and tuple(t.shape) == SHAPE and t.view(torch.uint8).numpy().tobytes() == want
            else:
                a = npf.get_tensor(key)
                ok = a.shape == SHAPE and a.dtype.itemsize == pattern(n, k).element_size() and \
                    np.ascontiguousarray(a).tobytes() == want
            if not ok:
                bad.append(f"{key}: differs from the pattern")
    for b in bad:
        print(b)
    print(f"safetensors read {len(ST_DTYPES) - len(bad)}/{len(ST_DTYPES)} dtypes from {os.path.basename(f)} bit for bit")
    return 1 if bad else 0


def retag(d, key, dtype):
    import pickle
    import torch
    with open(os.path.join(d, ".metadata"), "rb") as f:
        md = pickle.load(f)
    md.state_dict_metadata[key].properties.dtype = getattr(torch, dtype)
    with open(os.path.join(d, ".metadata"), "wb") as f:
        pickle.dump(md, f)
    print(f"{key} now claims torch.{dtype}")
    return 0


def main(argv):
    if len(argv) >= 2 and argv[0] == "save":
        mode = argv[2] if len(argv) > 2 else ""
        return save(argv[1], mode == "big", mode == "st")
    if len(argv) == 4 and argv[0] == "retag":
        return retag(*argv[1:])
    if len(argv) >= 2 and argv[0] == "load":
        return load(argv[1], len(argv) > 2 and argv[2] == "big")
    if len(argv) == 2 and argv[0] == "st":
        return st(argv[1])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
