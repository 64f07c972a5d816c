"""shardckpt: read sharded checkpoints (PyTorch DCP directories, safetensors files, Hugging Face sharded
directories) through libshardckpt's safe reader: no pickle is ever run, CRC-32Cs are checked where the
checkpoint records them, and a box of a tensor is read straight into the caller's memory.

    import shardckpt
    with shardckpt.open("ckpt/step-100") as ck:
        for e in ck.entries: print(e.name, e.kind, e.dtype, e.shape, len(e.chunks))
        ck.verify()
        w = ck.read("model.layer1.weight")                      # numpy array, the whole tensor
        rows = ck.read("model.layer1.weight", box=((0, 0), (2, 8)))
        t = torch.empty(2, 8, dtype=torch.bfloat16); ck.read_into("model.w", t, offsets=(4, 0))

shardckpt.torch holds FileSystemReader for torch.distributed.checkpoint.load (docs/PYTHON.md).
"""
import os as _os
import threading as _threading
import ctypes as _ct

from . import _capi

__all__ = ["Error", "Pickled", "Entry", "Chunk", "Checkpoint", "open", "version", "NUMPY_DTYPES"]

# torch dtype name -> numpy dtype string holding the same bytes.  Dtypes numpy lacks (bfloat16, complex32,
# float8*, bits*) are read as unsigned integers of their element size: their raw bits, as safetensors'
# numpy users do for bfloat16; read_into() a torch tensor gives them their own type.
NUMPY_DTYPES = {
    "float32": "<f4", "float64": "<f8", "float16": "<f2", "int8": "i1", "int16": "<i2", "int32": "<i4",
    "int64": "<i8", "uint8": "u1", "uint16": "<u2", "uint32": "<u4", "uint64": "<u8", "bool": "?",
    "complex64": "<c8", "complex128": "<c16",
}
_RAW = {1: "u1", 2: "<u2", 4: "<u4", 8: "<u8"}


def version():
    """The version of the libshardckpt loaded ("0.1.0")."""
    return _capi.lib.sck_version().decode()


class Error(Exception):
    """A failure reported by libshardckpt.  .status is the C status (negative int), .status_name its name
    ("SCK_ERR_CHECKSUM" ...), .message the library's message, which names the file, key and offset."""

    def __init__(self, status, message):
        self.status = status
        self.status_name = _capi.lib.sck_status_name(status).decode() if isinstance(status, int) else status
        self.message = message
        super().__init__(f"{self.status_name}: {message}")


def _check(rc):
    if rc != 0:
        raise Error(rc, _capi.lib.sck_last_error().decode("utf-8", "replace"))


class Pickled(bytes):
    """A Python object outside the plain-value subset (a set, a numpy array ...), kept as the pickle bytes
    torch.save wrote for it: never unpickled here.  pickle.loads(p) runs it, if you trust it."""

    def __repr__(self):
        return f"shardckpt.Pickled({len(self)} bytes)"


def _to_python(v):
    k = _capi.lib.sck_value_kind_of(v)
    lib = _capi.lib
    if k == _capi.VAL_NULL:
        return None
    if k == _capi.VAL_BOOL:
        return bool(lib.sck_value_get_bool(v))
    if k == _capi.VAL_INT:
        return lib.sck_value_get_int(v)
    if k == _capi.VAL_FLOAT:
        return lib.sck_value_get_float(v)
    if k in (_capi.VAL_STRING, _capi.VAL_BYTES, _capi.VAL_BIGINT, _capi.VAL_PICKLE):
        n = _ct.c_size_t()
        raw = _ct.string_at(lib.sck_value_get_string(v, _ct.byref(n)), n.value)
        return {_capi.VAL_STRING: lambda b: b.decode("utf-8", "surrogateescape"), _capi.VAL_BYTES: bytes,
                _capi.VAL_BIGINT: int, _capi.VAL_PICKLE: Pickled}[k](raw)
    items = [_to_python(lib.sck_value_at(v, i)) for i in range(lib.sck_value_len(v))]
    if k == _capi.VAL_DICT:
        return {lib.sck_value_key_at(v, i).decode("utf-8", "surrogateescape"): x for i, x in enumerate(items)}
    return tuple(items) if k == _capi.VAL_TUPLE else items


class Chunk:
    """One saved chunk of an entry: its box in the global tensor and where its item lies."""
    __slots__ = ("offsets", "sizes", "file", "offset", "length")

    def __init__(self, offsets, sizes, file, offset, length):
        self.offsets, self.sizes, self.file, self.offset, self.length = offsets, sizes, file, offset, length

    def __repr__(self):
        return f"Chunk(offsets={self.offsets}, sizes={self.sizes}, file={self.file!r}, offset={self.offset})"


class Entry:
    """An entry of a checkpoint.  kind is "tensor" or "bytes" (a blob or a Python value); dtype is torch's
    name ("bfloat16") and shape the global shape, for tensors; path is its place in the nested state dict
    (a tuple of str / int, as torch's planner_data records it)."""
    __slots__ = ("index", "name", "kind", "dtype", "shape", "nbytes", "chunks", "path", "itemsize")

    def __repr__(self):
        if self.kind == "bytes":
            return f"Entry({self.name!r}, bytes, {self.nbytes} bytes)"
        return f"Entry({self.name!r}, {self.dtype}{list(self.shape)}, {len(self.chunks)} chunks)"

    @property
    def numpy_dtype(self):
        """The numpy dtype read() returns for this tensor (raw unsigned bits where numpy has no type)."""
        import numpy as np
        return np.dtype(NUMPY_DTYPES.get(self.dtype) or _RAW.get(self.itemsize) or f"V{self.itemsize}")


def _dims(values, ndim, what):
    values = tuple(int(x) for x in values)
    if len(values) != ndim:
        raise ValueError(f"{what} has {len(values)} dimensions, the tensor {ndim}")
    return (_ct.c_int64 * max(ndim, 1))(*values)


class Checkpoint:
    """An open checkpoint (shardckpt.open).  Use it from one thread at a time, or share it: calls into the
    library are serialized by a lock.  close() (or a with block) releases it."""

    def __init__(self, path):
        self.path = _os.fspath(path)
        self._lock = _threading.Lock()
        h = _ct.c_void_p()
        _check(_capi.lib.sck_ckpt_open(_os.fsencode(self.path), _ct.byref(h)))
        self._h = h
        self.entries = [self._entry(i) for i in range(_capi.lib.sck_ckpt_count(h))]
        self._by_name = {e.name: e for e in self.entries}

    def _entry(self, i):
        lib, info = _capi.lib, _capi.EntryInfo()
        _check(lib.sck_ckpt_entry(self._h, i, _ct.byref(info)))
        e = Entry()
        e.index, e.name = i, info.key.decode("utf-8", "surrogateescape")
        e.kind = "tensor" if info.kind == _capi.ENTRY_TENSOR else "bytes"
        tensor = e.kind == "tensor"
        e.dtype = lib.sck_dtype_name(info.dtype).decode() if tensor else None
        e.itemsize = lib.sck_dtype_size(info.dtype) if tensor else 1
        e.shape = tuple(info.shape[:info.ndim]) if tensor else None
        e.nbytes = info.nbytes
        e.chunks = []
        c = _capi.ChunkInfo()
        for j in range(info.nchunks):
            _check(lib.sck_ckpt_chunk(self._h, i, j, _ct.byref(c)))
            nd = info.ndim if tensor else 0
            e.chunks.append(Chunk(tuple(c.offsets[:nd]), tuple(c.sizes[:nd]), c.file.decode("utf-8", "surrogateescape"),
                                  c.offset, c.length))
        v = _ct.c_void_p()
        _check(lib.sck_ckpt_entry_path(self._h, i, _ct.byref(v)))
        try:
            e.path = tuple(_to_python(v.value))
        finally:
            lib.sck_value_free(v)
        return e

    # -- lifetime -------------------------------------------------------------------------------------
    def close(self):
        h, self._h = getattr(self, "_h", None), None
        if h:
            _capi.lib.sck_ckpt_close(h)

    __del__ = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _handle(self):
        if not self._h:
            raise ValueError(f"{self.path}: checkpoint is closed")
        return self._h

    # -- lookup ---------------------------------------------------------------------------------------
    def __contains__(self, name):
        return name in self._by_name

    def __getitem__(self, name):
        """The Entry named `name` (KeyError naming the checkpoint when absent)."""
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"{self.path}: no entry {name!r}") from None

    def keys(self):
        return list(self._by_name)

    def tensor(self, name):
        e = self[name]
        if e.kind != "tensor":
            raise TypeError(f"{self.path}: {name!r} is a bytes entry, not a tensor")
        return e

    # -- checks ---------------------------------------------------------------------------------------
    def verify(self):
        """Reads every chunk whole: archives decode, chunks cover each tensor exactly once, every recorded
        CRC-32C matches.  Returns {"entries", "chunks", "checksummed", "bytes"}; raises Error."""
        st = _capi.VerifyStats()
        with self._lock:
            _check(_capi.lib.sck_ckpt_verify(self._handle(), _ct.byref(st)))
        return {k: getattr(st, k) for k, _ in _capi.VerifyStats._fields_}

    # -- tensors --------------------------------------------------------------------------------------
    def read_box_into(self, name, offsets, sizes, address):
        """Low level: reads the box (offsets, sizes) of tensor `name` into the row-major memory at integer
        `address` (product(sizes) * itemsize bytes, caller-owned)."""
        e = self.tensor(name)
        off, siz = _dims(offsets, len(e.shape), "offsets"), _dims(sizes, len(e.shape), "sizes")
        with self._lock:
            _check(_capi.lib.sck_ckpt_read_box(self._handle(), e.index, off, siz, _ct.c_void_p(address)))

    def read(self, name, box=None, out=None):
        """The box ((offsets), (sizes)) of tensor `name` (default: all of it) as a numpy array, read
        straight into the array's memory.  `out`, a C-contiguous writable array of the box's shape and an
        itemsize equal to the tensor's, is filled instead of a new array (and returned)."""
        import numpy as np
        e = self.tensor(name)
        offsets, sizes = box if box is not None else ((0,) * len(e.shape), e.shape)
        sizes = tuple(int(s) for s in sizes)
        if out is None:
            out = np.empty(sizes, dtype=e.numpy_dtype)
        elif (tuple(out.shape) != sizes or out.dtype.itemsize != e.itemsize or not out.flags.c_contiguous
              or not out.flags.writeable):
            raise ValueError(f"{self.path}: '{name}': out must be a writable C-contiguous array of shape "
                             f"{list(sizes)} with {e.itemsize}-byte elements, not {out.dtype}{list(out.shape)}")
        if out.size:
            self.read_box_into(name, offsets, sizes, out.ctypes.data)
        return out

    def read_into(self, name, tensor, offsets=None):
        """Fills the contiguous CPU torch tensor `tensor` with the box of `name` at `offsets` (default: the
        origin) whose sizes are tensor.shape, through tensor.data_ptr(): no copy.  The dtype must be the
        tensor's.  Returns `tensor`."""
        e = self.tensor(name)
        want = str(tensor.dtype).replace("torch.", "")
        if want != e.dtype:
            raise TypeError(f"{self.path}: '{name}' is {e.dtype}, the destination tensor {want}")
        if tensor.device.type != "cpu" or not tensor.is_contiguous():
            raise ValueError(f"{self.path}: '{name}': the destination must be a contiguous CPU tensor "
                             f"(got {tensor.device}, strides {tensor.stride()})")
        if offsets is None:
            offsets = (0,) * len(e.shape)
        if tensor.numel():
            self.read_box_into(name, offsets, tuple(tensor.shape), tensor.data_ptr())
        return tensor

    def read_tensor(self, name, box=None):
        """A new torch tensor holding the box ((offsets), (sizes)) of `name` (default: all of it)."""
        import torch
        e = self.tensor(name)
        offsets, sizes = box if box is not None else ((0,) * len(e.shape), e.shape)
        return self.read_into(name, torch.empty(tuple(sizes), dtype=getattr(torch, e.dtype)), offsets)

    # -- bytes and values -----------------------------------------------------------------------------
    def _read_item(self, e):
        data, n, v = _ct.c_void_p(), _ct.c_size_t(), _ct.c_void_p()
        with self._lock:
            _check(_capi.lib.sck_ckpt_read_bytes(self._handle(), e.index, _ct.byref(data), _ct.byref(n),
                                                 _ct.byref(v)))
        if v.value:
            try:
                return None, _to_python(v.value)
            finally:
                _capi.lib.sck_value_free(v)
        try:
            return _ct.string_at(data.value, n.value) if n.value else b"", None
        finally:
            _capi.libc_free(data)

    def value(self, name):
        """The Python value of bytes entry `name` (plain values decoded; other objects as Pickled), or the
        raw bytes of a blob that is not a torch.save archive of a value."""
        e = self[name]
        if e.kind != "bytes":
            raise TypeError(f"{self.path}: {name!r} is a tensor, not a bytes entry")
        raw, val = self._read_item(e)
        return val if raw is None else raw

    def values(self):
        """{name: value} of every bytes entry."""
        return {e.name: self.value(e.name) for e in self.entries if e.kind == "bytes"}

    def read_bytes(self, name):
        """The stored bytes of DCP byte item `name` as torch wrote them (a torch.save archive for a value),
        CRC-32C-checked where the checkpoint records one."""
        e = self[name]
        c = e.chunks[0] if e.kind == "bytes" and e.chunks else None
        if c is None or c.file == "meta.pt" or not _os.path.isdir(self.path):
            raise Error("SCK_ERR_UNSUPPORTED", f"{self.path}: '{name}' is not a DCP byte item")
        raw, _ = self._read_item(e)  # reads and checks the item
        if raw is not None:
            return raw
        with _os.fdopen(_os.open(_os.path.join(self.path, c.file), _os.O_RDONLY), "rb") as f:
            f.seek(c.offset)
            data = f.read(c.length)
        if len(data) != c.length:
            raise Error("SCK_ERR_FORMAT", f"{_os.path.join(self.path, c.file)}: '{name}': item at offset "
                        f"{c.offset} ends past the end of the file")
        return data


def open(path):  # noqa: A001  (shardckpt.open, like io.open)
    """Opens a DCP checkpoint directory, a safetensors file or a Hugging Face sharded directory."""
    return Checkpoint(path)
