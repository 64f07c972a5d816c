"""Minimal safetensors reader/writer on numpy, independent of the library under test.

Format: 8-byte little-endian u64 header length N, N bytes of JSON
  {name: {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {str: str}}
(offsets relative to the data section), then the data section.  Tensors are (dtype_name, ndarray)
pairs; BF16 has no numpy type and travels as its raw uint16 bits.
"""
import json
import struct

import numpy as np

# safetensors dtype name -> numpy dtype holding the same bytes (little-endian)
DTYPES = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"), "U32": np.dtype("<u4"), "U16": np.dtype("<u2"), "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}

_MAX_HEADER = 100 * 1024 * 1024


class FormatError(ValueError):
    pass


def write(path, tensors, metadata=None):
    """tensors: {name: (dtype_name, ndarray)}; metadata: {str: str} or None."""
    header = {}
    if metadata is not None:
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError(f"__metadata__ must map str to str, got {k!r}: {type(v).__name__}")
        header["__metadata__"] = dict(metadata)
    blobs = []
    pos = 0
    for name, (dt, arr) in tensors.items():
        if dt not in DTYPES:
            raise ValueError(f"{name}: unknown dtype {dt}")
        arr = np.array(arr, dtype=DTYPES[dt], order="C")  # (ascontiguousarray turns 0-d into 1-d)
        raw = arr.tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [pos, pos + len(raw)]}
        blobs.append(raw)
        pos += len(raw)
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * (-len(hjson) % 8)  # the reference writer pads with spaces to 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for raw in blobs:
            f.write(raw)


def read(path):
    """Returns ({name: (dtype_name, ndarray)}, metadata dict or None).  Validates the layout."""
    with open(path, "rb") as f:
        buf = f.read()
    if len(buf) < 8:
        raise FormatError(f"{path}: {len(buf)} bytes, too short for the header length")
    (hlen,) = struct.unpack_from("<Q", buf, 0)
    if hlen > _MAX_HEADER or 8 + hlen > len(buf):
        raise FormatError(f"{path}: header length {hlen} exceeds file size {len(buf)}")
    try:
        header = json.loads(buf[8:8 + hlen].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FormatError(f"{path}: header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise FormatError(f"{path}: header is not a JSON object")
    data = memoryview(buf)[8 + hlen:]
    metadata = header.pop("__metadata__", None)
    if metadata is not None:
        if not isinstance(metadata, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise FormatError(f"{path}: __metadata__ must map str to str")
    tensors = {}
    spans = []
    for name, info in header.items():
        try:
            dt, shape, (b, e) = info["dtype"], info["shape"], info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise FormatError(f"{path}: {name}: malformed entry {info!r}") from None
        if dt not in DTYPES:
            raise FormatError(f"{path}: {name}: unknown dtype {dt!r}")
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise FormatError(f"{path}: {name}: bad shape {shape!r}")
        numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if not (isinstance(b, int) and isinstance(e, int) and 0 <= b <= e <= len(data)):
            raise FormatError(f"{path}: {name}: data_offsets [{b}, {e}] outside data of {len(data)} bytes")
        if e - b != numel * DTYPES[dt].itemsize:
            raise FormatError(f"{path}: {name}: {e - b} bytes for {dt}{shape}")
        arr = np.frombuffer(data[b:e], dtype=DTYPES[dt]).reshape(shape).copy()
        tensors[name] = (dt, arr)
        spans.append((b, e, name))
    spans.sort()
    for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise FormatError(f"{path}: {n0} [{b0},{e0}) overlaps {n1} [{b1},{e1})")
    return tensors, metadata


def same_bits(a, b):
    """Bit-identical comparison (NaN-safe, -0.0 distinct); both are (dtype_name, ndarray)."""
    (da, xa), (db, xb) = a, b
    return da == db and xa.shape == xb.shape and xa.tobytes() == xb.tobytes()


def describe_diff(name, expected, got, limit=5, origin=None):
    """One readable line per difference, for test failure messages.  origin: global index of
    element [0,0,..] when the arrays are a slice of a larger tensor."""
    (de, xe), (dg, xg) = expected, got
    if de != dg:
        return [f"{name}: dtype {dg}, expected {de}"]
    if xe.shape != xg.shape:
        return [f"{name}: shape {list(xg.shape)}, expected {list(xe.shape)}"]
    be = xe.reshape(-1).view(np.uint8).reshape(xe.size, -1) if xe.size else xe
    bg = xg.reshape(-1).view(np.uint8).reshape(xg.size, -1) if xg.size else xg
    bad = [i for i in range(xe.size) if be[i].tobytes() != bg[i].tobytes()]
    lines = [f"{name}: {len(bad)} of {xe.size} elements differ"]
    for i in bad[:limit]:
        idx = np.unravel_index(i, xe.shape) if xe.shape else ()
        if origin:
            idx = tuple(int(a) + int(b) for a, b in zip(idx, origin))
        lines.append(f"  [{','.join(map(str, idx))}] got {xg.reshape(-1)[i]!r} "
                     f"(0x{bg[i].tobytes()[::-1].hex()}), expected {xe.reshape(-1)[i]!r} "
                     f"(0x{be[i].tobytes()[::-1].hex()})")
    return lines
