"""The shardckpt Python package (python/) on the host's Python, numpy and torch 1.13 (py_cases.py runs it).

usage: py_check.py SITE CLI read CKPT EXPECTED.safetensors [VALUES.json] [--crc]
       py_check.py SITE CLI corrupt CKPT KEY
(SITE: where the package is installed; CLI: the shardckpt CLI)

`read` opens CKPT with shardckpt.open and checks: the entries (names, dtypes, shapes, chunk counts) are
what `shardckpt inspect --json` shows; every tensor read whole into numpy has the bits
of EXPECTED (read by npst, independent of the library); boxes read into a new array, into out= and into a
torch 1.13 tensor (read_into, bfloat16 included) equal the same slice of EXPECTED; the values equal
VALUES.json; verify() passes, with every chunk CRC-32C-checked when --crc is given.
`corrupt` expects verify() and a whole read of KEY to raise shardckpt.Error SCK_ERR_CHECKSUM naming the
data file and KEY.  Prints "ok ..." and exits 0, or raises.
"""
import json
import subprocess
import sys

import numpy as np

import npst
import interop_common as ic

if __name__ == "__main__":
    sys.path.insert(0, sys.argv[1])
import shardckpt  # noqa: E402

ST_NAMES = {"float32": "F32", "float64": "F64", "float16": "F16", "bfloat16": "BF16", "int8": "I8", "int16": "I16",
            "int32": "I32", "int64": "I64", "uint8": "U8", "uint16": "U16", "uint32": "U32", "uint64": "U64",
            "bool": "BOOL"}


def json_value(v):
    """A value as expected_values.json writes it (bytes as {"__bytes__": hex})."""
    if isinstance(v, bytes):
        return {"__bytes__": v.hex()}
    if isinstance(v, dict):
        return {k: json_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_value(x) for x in v]
    return v


def boxes(shape):
    """A few boxes of a tensor: all of it, an inner block, one row, an empty one."""
    if not shape:
        return [((), ())]
    out = [((0,) * len(shape), tuple(shape))]
    if all(s >= 2 for s in shape):
        out.append((tuple(s // 3 for s in shape), tuple(s - s // 3 - (s > 2) for s in shape)))
    out.append(((shape[0] - 1,) + (0,) * (len(shape) - 1), (1,) + tuple(shape[1:])))
    out.append(((0,) * len(shape), (0,) + tuple(shape[1:])))
    return out


def check_read(cli, ckpt, expected_path, values_path, crc):
    import torch
    expected, _ = npst.read(expected_path)
    want_values = ic.load_json(values_path) if values_path else {}
    cli = json.loads(subprocess.check_output([cli, "inspect", "--json", ckpt]))
    problems = []
    with shardckpt.open(ckpt) as ck:
        got = {e.name: (e.kind, e.dtype, list(e.shape) if e.shape is not None else None, len(e.chunks))
               for e in ck.entries}
        want = {e["key"]: (e["kind"], e.get("dtype"), e.get("shape"), len(e["chunks"])) for e in cli["entries"]}
        if got != want:
            problems.append(f"entries {got}\n  differ from inspect --json's {want}")
        tensors = [e for e in ck.entries if e.kind == "tensor"]
        if sorted(e.name for e in tensors) != sorted(expected):
            problems.append(f"tensors {sorted(e.name for e in tensors)}, expected {sorted(expected)}")
        for e in tensors:
            if e.name not in expected:
                continue
            full = (ST_NAMES[e.dtype], ck.read(e.name))
            if not npst.same_bits(expected[e.name], full):
                problems += npst.describe_diff(e.name, expected[e.name], full)
                continue
            x = expected[e.name][1]
            for off, size in boxes(e.shape):
                sl = x[tuple(slice(o, o + s) for o, s in zip(off, size))]
                a = ck.read(e.name, box=(off, size))
                b = ck.read(e.name, box=(off, size), out=np.full(size, 7, dtype=e.numpy_dtype))
                t = ck.read_into(e.name, torch.empty(size, dtype=getattr(torch, e.dtype)), off)
                tb = t.view(torch.int16).numpy().view(np.uint16) if e.dtype == "bfloat16" else t.numpy()
                for how, arr in (("read", a), ("read(out=)", b), ("read_into torch", tb)):
                    if arr.tobytes() != sl.tobytes() or arr.shape != sl.shape:
                        problems.append(f"{e.name} box {off} {size} by {how}: {arr!r} != {sl!r}")
        vals = {k: json_value(v) for k, v in ck.values().items()}
        if not ic.strict_equal(vals, want_values):
            problems.append(f"values {vals}\n  differ from {want_values}")
        stats = ck.verify()
        chunks = sum(len(e.chunks) for e in ck.entries)
        if stats["chunks"] != chunks or (crc and stats["checksummed"] != chunks):
            problems.append(f"verify checked {stats}, the checkpoint has {chunks} chunks (CRC-32Cs: {crc})")
        try:
            ck.read(tensors[0].name, box=((0,) * len(tensors[0].shape), tuple(s + 1 for s in tensors[0].shape)))
            problems.append("a box past the end of a tensor was read")
        except shardckpt.Error as err:
            if tensors[0].name not in str(err):
                problems.append(f"a box past the end: the error does not name the tensor: {err}")
    if problems:
        raise SystemExit("\n".join(problems))
    return f"ok {ckpt}: {len(tensors)} tensors, {len(vals)} values, verify {stats}"


def check_corrupt(ckpt, key):
    ck = shardckpt.open(ckpt)
    out = []
    for what, call in (("verify()", ck.verify), (f"read({key!r})", lambda: ck.read(key))):
        try:
            call()
        except shardckpt.Error as err:
            if err.status_name != "SCK_ERR_CHECKSUM" or key not in err.message or ".distcp" not in err.message:
                raise SystemExit(f"{what} of a damaged item: {err} (want SCK_ERR_CHECKSUM naming file and {key})")
            out.append(f"{what}: {err}")
            continue
        raise SystemExit(f"{what} of {ckpt} with a damaged item of {key} succeeded")
    return "ok refused:\n" + "\n".join(out)


def main(argv):
    cli, argv = argv[1], argv[2:]
    if argv[:1] == ["read"] and len(argv) >= 3:
        rest = [a for a in argv[3:] if a != "--crc"]
        print(check_read(cli, argv[1], argv[2], rest[0] if rest else None, "--crc" in argv))
    elif argv[:1] == ["corrupt"] and len(argv) == 3:
        print(check_corrupt(argv[1], argv[2]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    if len(sys.argv) < 4:
        raise SystemExit(__doc__)
    main(sys.argv[1:])
