"""Checks a consolidated checkpoint written by shardckpt (a .safetensors file or a Hugging Face
sharded directory) with readers independent of the library: the bytes against the safetensors
spec, the tensors bit-for-bit against a reference (numpy, via npst.py), and torch building every
tensor from the file's bytes (torch.frombuffer) equal to the reference.

usage: full_check.py PATH EXPECTED.safetensors [--values VALUES.json] [--max-shard BYTES]

VALUES.json ({key: value}, bytes as {"__bytes__": hex}) lists non-tensor entries that must be in
__metadata__ as JSON text.  For a directory: model.safetensors.index.json must be exactly
{"metadata": {"total_size": N}, "weight_map": {...}}, name every tensor once with the file that
holds it, and the files must be model-0000K-of-0000N.safetensors, each holding at most BYTES of
tensor data unless it holds a single tensor.  Prints "ok ..." and exits 0 only if all holds.
"""
import json
import os
import re
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop_common as ic  # noqa: E402
import npst  # noqa: E402

SHARD_RE = re.compile(r"^model-(\d{5})-of-(\d{5})\.safetensors$")


def spec_problems(path):
    """Byte-level rules of the safetensors spec and of the reference writer."""
    with open(path, "rb") as f:
        buf = f.read()
    (hlen,) = struct.unpack_from("<Q", buf, 0)
    raw = buf[8:8 + hlen]
    problems = []
    if (8 + hlen) % 8:
        problems.append(f"{path}: data section starts at {8 + hlen}, not 8-byte aligned")
    text = raw.decode("utf-8")
    if not text.startswith("{") or not text.rstrip(" ").endswith("}"):
        problems.append(f"{path}: header must start with '{{' and be padded with spaces only")
    header = json.loads(text)
    md = header.pop("__metadata__", None)
    if not isinstance(md, dict) or md.get("format") != "pt":
        problems.append(f"{path}: __metadata__ lacks \"format\": \"pt\" (transformers checks it): {md!r}")
    spans = sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in header.items())
    at = 0
    for b, e, k in spans:  # contiguous, from 0, covering the whole data section
        if b != at:
            problems.append(f"{path}: {k} begins at {b}, expected {at} (gap or overlap)")
        at = e
    if at != len(buf) - 8 - hlen:
        problems.append(f"{path}: tensors cover {at} bytes, data section has {len(buf) - 8 - hlen}")
    return problems, header, md or {}


def torch_problems(path, header, expected):
    """torch builds each tensor from the file's bytes; compare with the reference as torch sees it."""
    import torch
    with open(path, "rb") as f:
        buf = f.read()
    (hlen,) = struct.unpack_from("<Q", buf, 0)
    data = buf[8 + hlen:]
    problems = []
    for name, info in header.items():
        b, e = info["data_offsets"]
        dt = ic.st_to_torch_dtype(info["dtype"])
        t = (torch.frombuffer(bytearray(data[b:e]), dtype=dt) if e > b else torch.empty(0, dtype=dt))
        t = t.reshape(info["shape"])
        want = ic.np_to_tensor(*expected[name])
        if t.dtype != want.dtype or t.shape != want.shape:
            problems.append(f"torch: {name}: {t.dtype}{list(t.shape)}, expected {want.dtype}{list(want.shape)}")
            continue
        if t.is_floating_point():
            same = torch.equal(torch.isnan(t), torch.isnan(want)) and torch.equal(
                torch.nan_to_num(t, nan=0.0), torch.nan_to_num(want, nan=0.0)) and torch.equal(
                torch.signbit(t), torch.signbit(want))
        else:
            same = torch.equal(t, want)
        if not same:
            problems.append(f"torch: {name}: values differ from the reference")
    return problems


def main(argv):
    pos, values, max_shard = [], None, None
    it = iter(argv)
    for a in it:
        if a == "--values":
            values = ic.load_json(next(it))
        elif a == "--max-shard":
            max_shard = int(next(it))
        else:
            pos.append(a)
    if len(pos) != 2:
        raise SystemExit(__doc__)
    path, expected_path = pos
    expected, _ = npst.read(expected_path)
    problems = []
    if os.path.isdir(path):
        with open(os.path.join(path, "model.safetensors.index.json")) as f:
            index = json.load(f)
        if set(index) != {"metadata", "weight_map"} or set(index["metadata"]) != {"total_size"}:
            problems.append(f"index keys {sorted(index)} / {sorted(index.get('metadata', {}))}")
        wm = index["weight_map"]
        files = sorted(n for n in os.listdir(path) if n.endswith(".safetensors"))
        nums = [SHARD_RE.match(n) for n in files]
        if not files or not all(nums) or [int(m.group(1)) for m in nums] != list(range(1, len(files) + 1)) or any(
                int(m.group(2)) != len(files) for m in nums):
            problems.append(f"shard files are not model-0000K-of-0000N.safetensors 1..N: {files}")
        if sorted(set(wm.values())) != files:
            problems.append(f"weight_map names files {sorted(set(wm.values()))}, directory has {files}")
    else:
        wm, files = None, [os.path.basename(path)]
        path, index = os.path.dirname(path), None
    got, metadata, total = {}, {}, 0
    for fname in files:
        fpath = os.path.join(path, fname)
        try:
            tensors, _ = npst.read(fpath)  # the independent numpy reader
        except (OSError, npst.FormatError) as e:
            problems.append(str(e))
            continue
        p, header, md = spec_problems(fpath)
        problems += p
        for k, v in md.items():
            metadata.setdefault(k, v)
        bytes_here = sum(arr.nbytes for _, arr in tensors.values())
        total += bytes_here
        if max_shard is not None and bytes_here > max_shard and len(tensors) > 1:
            problems.append(f"{fname}: {bytes_here} tensor bytes in {len(tensors)} tensors exceed the {max_shard}-byte cap")
        for name in tensors:
            if wm is not None and wm.get(name) != fname:
                problems.append(f"{name} is in {fname}, weight_map says {wm.get(name)}")
            if name in got:
                problems.append(f"{name} is stored twice")
        got.update(tensors)
        problems += torch_problems(fpath, header, {k: expected[k] for k in header if k in expected})
    if index is not None and index["metadata"]["total_size"] != total:
        problems.append(f"index total_size {index['metadata']['total_size']}, tensors hold {total} bytes")
    if wm is not None and set(wm) != set(got):
        problems.append(f"weight_map keys differ from the stored tensors: {sorted(set(wm) ^ set(got))}")
    for name in expected:
        if name not in got:
            problems.append(f"tensor {name} missing")
        elif not npst.same_bits(expected[name], got[name]):
            problems += npst.describe_diff(name, expected[name], got[name])
    problems += [f"unexpected tensor {n}" for n in got if n not in expected]
    for key, want in (values or {}).items():
        try:
            have = json.loads(metadata[key])
        except (KeyError, json.JSONDecodeError) as e:
            problems.append(f"__metadata__[{key!r}]: {e!r}")
            continue
        if not ic.strict_equal(want, have):
            problems.append(f"__metadata__[{key!r}] = {metadata[key]!r}, expected JSON of {want!r}")
    if problems:
        print("\n".join(problems))
        return 1
    print(f"ok {len(got)} tensors in {len(files)} file(s), {total} bytes, {len(values or {})} values; "
          f"npst and torch agree with the reference")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
