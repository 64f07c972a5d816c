"""Unpickle a DCP .metadata under torch 1.13 + the 2.x alias shim and check it in detail.

usage: check_metadata.py CKPT_DIR EXPECTED.safetensors --ranks N [--values VALUES.json]

Checks, printing one "FAIL: ..." line per problem (exit 1 if any):
  - the pickle uses the torch 2.x module paths and loads into torch's own classes;
  - every tensor of EXPECTED is a TensorStorageMetadata with the right dtype and size; its chunks
    split dim 0 contiguously (full extent in the other dims), N non-empty chunks when dim0 >= N;
  - storage_data has a _StorageInfo per chunk / value whose window lies inside a file of the
    checkpoint, and torch.load of that window gives exactly the expected chunk (dtype, shape, bits)
    or value;
  - planner_data (2.x) maps every fqn to a path whose dotted join is the fqn;
  - no keys beyond EXPECTED and VALUES.
"""
import io
import json
import os
import pickle
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop_common as ic  # noqa: E402
import npst  # noqa: E402


class RecordingUnpickler(pickle.Unpickler):
    """Records every (module, name) the pickle imports."""

    def __init__(self, f):
        super().__init__(f)
        self.imports = []

    def find_class(self, module, name):
        self.imports.append((module, name))
        return super().find_class(module, name)


def torch_chunk_rows(d0, n):
    """Rows per non-empty chunk as torch.chunk / ChunkShardingSpec split them (ceil-sized, last short)."""
    step = -(-d0 // n)
    return [min(step, d0 - i) for i in range(0, d0, step)] if d0 else []


def even_split_rows(d0, n):
    """Rows per non-empty chunk of an even split (numpy.array_split)."""
    return [r for r in (d0 // n + (1 if i < d0 % n else 0) for i in range(n)) if r]


def read_window(ckpt, info, what, problems):
    name = info.relative_path
    if not isinstance(name, str) or "/" in name or name in ("", ".", ".."):
        problems.append(f"{what}: relative_path {name!r} is not a bare file name")
        return None
    path = os.path.join(ckpt, name)
    if not os.path.isfile(path):
        problems.append(f"{what}: file {name} does not exist")
        return None
    size = os.path.getsize(path)
    if not (isinstance(info.offset, int) and isinstance(info.length, int)
            and info.offset >= 0 and info.length > 0 and info.offset + info.length <= size):
        problems.append(f"{what}: window offset {info.offset} length {info.length} outside {name} ({size} bytes)")
        return None
    with open(path, "rb") as f:
        f.seek(info.offset)
        return f.read(info.length)


def main():
    ckpt, expected_path, values_path, ranks = ic.parse_check_args(sys.argv[1:], __doc__)
    ic.ensure_shim()
    import torch
    from torch.distributed._shard.checkpoint import filesystem as fs
    from torch.distributed._shard.checkpoint import metadata as md13

    expected, _ = npst.read(expected_path)
    values = ic.load_json(values_path) if values_path else {}
    problems, notes = [], []

    with open(os.path.join(ckpt, ".metadata"), "rb") as f:
        raw = f.read()
    unpickler = RecordingUnpickler(io.BytesIO(raw))
    try:
        meta = unpickler.load()
    except Exception:
        print("FAIL: .metadata does not unpickle under torch 1.13 + shim:\n" + traceback.format_exc())
        return 1
    globs = sorted(set(unpickler.imports))
    mods = sorted({m for m, _ in globs if m.startswith("torch.distributed")})
    proto = raw[1] if raw[:1] == b"\x80" else "?"
    notes.append(f"pickle protocol {proto}, imports {globs}")
    if "torch.distributed.checkpoint.metadata" not in mods:
        problems.append(f"pickle does not use torch 2.x module paths (uses {mods})")
    if any("._shard." in m for m in mods):
        problems.append(f"pickle uses torch 1.x module paths: {mods}")
    if type(meta) is not md13.Metadata:
        problems.append(f"unpickled {type(meta)}, expected torch's Metadata class")
        print("\n".join("FAIL: " + p for p in problems))
        return 1
    sdm, storage = meta.state_dict_metadata, meta.storage_data or {}
    if not isinstance(sdm, dict) or not isinstance(storage, dict):
        print(f"FAIL: state_dict_metadata/storage_data are {type(sdm)}/{type(storage)}, not dicts")
        return 1
    by_key = {}
    for k, v in storage.items():
        if type(k) is not md13.MetadataIndex:
            problems.append(f"storage_data key {k!r} is not a MetadataIndex")
            continue
        if type(v) is not fs._StorageInfo:
            problems.append(f"storage_data[{k}] is {type(v)}, not _StorageInfo")
            continue
        by_key[(k.fqn, tuple(k.offset) if k.offset is not None else None)] = (k, v)

    for fqn, (dt, arr) in expected.items():
        m = sdm.get(fqn)
        if m is None:
            problems.append(f"{fqn}: missing from state_dict_metadata")
            continue
        if type(m) is not md13.TensorStorageMetadata:
            problems.append(f"{fqn}: is {type(m).__name__}, expected TensorStorageMetadata")
            continue
        want_dtype = ic.st_to_torch_dtype(dt)
        if m.properties.dtype != want_dtype:
            problems.append(f"{fqn}: dtype {m.properties.dtype}, expected {want_dtype}")
        if m.properties.memory_format != torch.contiguous_format or m.properties.layout != torch.strided:
            problems.append(f"{fqn}: properties {m.properties}")
        if not isinstance(m.size, torch.Size) or tuple(m.size) != arr.shape:
            problems.append(f"{fqn}: size {m.size!r}, expected torch.Size({list(arr.shape)})")
            continue
        chunks = sorted(m.chunks, key=lambda c: tuple(c.offsets))
        if arr.ndim == 0:
            if [(tuple(c.offsets), tuple(c.sizes)) for c in chunks] != [((), ())]:
                problems.append(f"{fqn}: 0-d tensor chunks {m.chunks}, expected one with offsets=sizes=[]")
        else:
            row = 0
            for c in chunks:
                off, sz = tuple(c.offsets), tuple(c.sizes)
                if (len(off) != arr.ndim or len(sz) != arr.ndim or off[0] != row or sz[0] <= 0
                        or any(o != 0 for o in off[1:]) or sz[1:] != arr.shape[1:]):
                    problems.append(f"{fqn}: chunk offsets {list(off)} sizes {list(sz)} is not the next "
                                    f"dim-0 slab at row {row} of {list(arr.shape)}")
                    break
                row += sz[0]
            else:
                if row != arr.shape[0]:
                    problems.append(f"{fqn}: chunks cover rows [0, {row}) of {arr.shape[0]}")
            rows = [tuple(c.sizes)[0] for c in chunks]
            if rows not in (torch_chunk_rows(arr.shape[0], ranks), even_split_rows(arr.shape[0], ranks)):
                problems.append(f"{fqn}: dim-0 chunk rows {rows} for dim0={arr.shape[0]} over {ranks} ranks, "
                                f"expected torch.chunk's {torch_chunk_rows(arr.shape[0], ranks)} or an even "
                                f"split {even_split_rows(arr.shape[0], ranks)}")
        for pos, c in enumerate(m.chunks):
            key = (fqn, tuple(c.offsets))
            if key not in by_key:
                problems.append(f"{fqn}: no storage_data entry for chunk at {list(c.offsets)}")
                continue
            idx, info = by_key[key]
            if idx.index != pos:
                notes.append(f"{fqn}: storage_data index hint {idx.index} for chunk #{pos}")
            blob = read_window(ckpt, info, f"{fqn} chunk {list(c.offsets)}", problems)
            if blob is None:
                continue
            try:
                t = torch.load(io.BytesIO(blob), map_location="cpu")
            except Exception as e:
                problems.append(f"{fqn} chunk {list(c.offsets)}: torch.load of {info} failed: {e}")
                continue
            if not isinstance(t, torch.Tensor) or t.dtype != want_dtype or tuple(t.shape) != tuple(c.sizes):
                problems.append(f"{fqn} chunk {list(c.offsets)}: stored {type(t).__name__} "
                                f"{getattr(t, 'dtype', '')} {list(getattr(t, 'shape', []))}, "
                                f"expected {want_dtype} {list(c.sizes)}")
                continue
            sl = tuple(slice(o, o + s) for o, s in zip(c.offsets, c.sizes))
            got = ic.tensor_to_np(t)
            if not npst.same_bits((dt, arr[sl]), got):
                problems += npst.describe_diff(f"{fqn} chunk {list(c.offsets)}", (dt, arr[sl]), got,
                                               origin=list(c.offsets))

    for fqn, want in values.items():
        m = sdm.get(fqn)
        if type(m) is not md13.BytesStorageMetadata:
            problems.append(f"{fqn}: is {type(m).__name__}, expected BytesStorageMetadata")
            continue
        if (fqn, None) not in by_key:
            problems.append(f"{fqn}: no storage_data entry")
            continue
        blob = read_window(ckpt, by_key[(fqn, None)][1], fqn, problems)
        if blob is None:
            continue
        try:
            got = torch.load(io.BytesIO(blob))
        except Exception as e:
            problems.append(f"{fqn}: torch.load failed: {e}")
            continue
        if not ic.strict_equal(ic.from_json_value(want), got):
            problems.append(f"{fqn}: torch.load gives {got!r}, expected {ic.from_json_value(want)!r}")

    for fqn in sdm:
        if fqn not in expected and fqn not in values:
            problems.append(f"unexpected key {fqn} ({type(sdm[fqn]).__name__})")
    used = {(f, o) for f, o in by_key}
    wanted = {(f, tuple(c.offsets)) for f, m in sdm.items() if type(m) is md13.TensorStorageMetadata
              for c in m.chunks} | {(f, None) for f, m in sdm.items() if type(m) is md13.BytesStorageMetadata}
    for extra in sorted(used - wanted, key=str):
        problems.append(f"storage_data entry {extra} matches no chunk")

    pdata = getattr(meta, "planner_data", None)
    if not isinstance(pdata, dict):
        problems.append(f"planner_data is {type(pdata).__name__}, expected a dict (fqn -> path tuple)")
    else:
        for fqn in sdm:
            path = pdata.get(fqn)
            if not isinstance(path, tuple) or ".".join(map(str, path)) != fqn:
                problems.append(f"planner_data[{fqn!r}] = {path!r}")
    notes.append(f"storage_meta={getattr(meta, 'storage_meta', '<absent>')!r} "
                 f"version={getattr(meta, 'version', '<absent>')!r}")

    counts = {fqn: len(m.chunks) for fqn, m in sdm.items() if type(m) is md13.TensorStorageMetadata}
    print("chunk-counts-json: " + json.dumps(counts, sort_keys=True))
    for n in notes:
        print("note: " + n)
    for p in problems:
        print("FAIL: " + p)
    print(f"{len(expected)} tensors, {len(values)} values, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
