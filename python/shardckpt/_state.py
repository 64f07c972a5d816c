"""An sck_state over torch tensors, for shardckpt.torch: the boxes a rank saves or loads point straight into
the tensors' memory, so sck_save writes from them and sck_load reads into them with no copy on the Python
side.  The tensors handed in are kept referenced until close(), which frees the state.
"""
import ctypes

import shardckpt
from . import _capi


_DTYPES = {}


def sck_dtype(dtype, key):
    """libshardckpt's code for torch dtype `dtype` (TypeError naming `key` when it has none)."""
    if dtype in _DTYPES:
        return _DTYPES[dtype]
    code = ctypes.c_int()
    name = str(dtype).replace("torch.", "")
    if _capi.lib.sck_dtype_from_name(name.encode(), ctypes.byref(code)) != 0:
        raise TypeError(f"shardckpt: '{key}': dtype {dtype} has no DCP form shardckpt knows")
    _DTYPES[dtype] = code.value
    return code.value


def _i64s(values):
    values = tuple(int(x) for x in values)
    return (ctypes.c_int64 * max(len(values), 1))(*values)


def _path_value(path):
    """An sck_value list of a torch flattening path (str dict keys, int list positions); caller frees."""
    lib = _capi.lib
    v = lib.sck_value_list()
    for p in path:
        if isinstance(p, int):
            item = lib.sck_value_int(p)
        else:
            b = str(p).encode("utf-8", "surrogateescape")
            item = lib.sck_value_string_n(b, len(b))
        if not v or not item or lib.sck_value_list_append(v, item) != 0:
            lib.sck_value_free(v)
            raise MemoryError("shardckpt: out of memory")
    return v


def _key(key):
    return key.encode("utf-8", "surrogateescape")


class State:
    def __init__(self):
        self.h = _capi.lib.sck_state_new()
        if not self.h:
            raise MemoryError("shardckpt: out of memory")
        self._keep = []
        self._device = None

    def add_box(self, key, tensor, shape, offsets):
        """Box `offsets` of global tensor `key` of `shape`, held by the contiguous CPU tensor `tensor`."""
        self._keep.append(tensor)
        ptr = tensor.data_ptr() if tensor.numel() else None
        shardckpt._check(_capi.lib.sck_state_add_box(self.h, _key(key), sck_dtype(tensor.dtype, key), len(shape),
                                                     _i64s(shape), _i64s(offsets), _i64s(tensor.shape), ptr))

    def add_replicated(self, key, tensor):
        """All of tensor `key`, held whole by the contiguous CPU tensor `tensor` (written once)."""
        self._keep.append(tensor)
        ptr = tensor.data_ptr() if tensor.numel() else None
        shardckpt._check(_capi.lib.sck_state_add_replicated(self.h, _key(key), sck_dtype(tensor.dtype, key),
                                                            tensor.dim(), _i64s(tensor.shape), ptr))

    def use_device(self, device):
        """Device pieces of this state go through `device` (a _torch_device.TorchDevice, kept alive here)."""
        self._device = device
        shardckpt._check(_capi.lib.sck_state_set_device(self.h, ctypes.addressof(device.ops), None))

    def add_device_box(self, key, tensor, shape, offsets):
        """As add_box, for a contiguous tensor the library reaches only through the device's copies."""
        self._keep.append(tensor)
        ptr = self._device.add(tensor) if tensor.numel() else None
        shardckpt._check(_capi.lib.sck_state_add_device_box(self.h, _key(key), sck_dtype(tensor.dtype, key), len(shape),
                                                            _i64s(shape), _i64s(offsets), _i64s(tensor.shape), ptr))

    def add_device_replicated(self, key, tensor):
        self._keep.append(tensor)
        ptr = self._device.add(tensor) if tensor.numel() else None
        shardckpt._check(_capi.lib.sck_state_add_device_replicated(self.h, _key(key), sck_dtype(tensor.dtype, key),
                                                                   tensor.dim(), _i64s(tensor.shape), ptr))

    def add_item_bytes(self, key, data):
        """A byte item stored as exactly the bytes of `data` (a bytes-like object; copied)."""
        b = bytes(data)
        shardckpt._check(_capi.lib.sck_state_add_item_bytes(self.h, _key(key), b, len(b)))

    def set_path(self, key, path):
        v = _path_value(path)
        try:
            shardckpt._check(_capi.lib.sck_state_set_path(self.h, _key(key), v))
        finally:
            _capi.lib.sck_value_free(v)

    def save(self, comm, path, flags=0, staging_mib=0):
        opts = _capi.SaveOpts()
        opts.flags, opts.staging_mib = flags, staging_mib
        shardckpt._check(_capi.lib.sck_save(comm, path, self.h, ctypes.byref(opts)))

    def load(self, comm, path, flags=0):
        opts = _capi.LoadOpts()
        opts.flags = flags
        shardckpt._check(_capi.lib.sck_load(comm, path, self.h, ctypes.byref(opts)))

    def close(self):
        if self.h:
            _capi.lib.sck_state_free(self.h)  # gives the device's pinned staging back first
            self.h = None
        self._keep = []
        self._device = None
