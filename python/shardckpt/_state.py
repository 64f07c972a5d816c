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

    def use_device(self, device):
        """Device pieces of this state go through `device` (a _torch_device.TorchDevice, kept alive here)."""
        self._device = device
        shardckpt._check(_capi.lib.sck_state_set_device(self.h, ctypes.addressof(device.ops), None))

    def _data(self, tensor, device):
        self._keep.append(tensor)
        if not tensor.numel():
            return None
        return self._device.add(tensor) if device else tensor.data_ptr()

    def add_box(self, key, tensor, shape, offsets, device=False):
        """Box `offsets` of global tensor `key` of `shape`, held by the contiguous tensor `tensor`: CPU
        memory, or with device=True memory the library reaches only through use_device's copies."""
        add = _capi.lib.sck_state_add_device_box if device else _capi.lib.sck_state_add_box
        ptr = self._data(tensor, device)
        shardckpt._check(add(self.h, _key(key), sck_dtype(tensor.dtype, key), len(shape), _i64s(shape),
                             _i64s(offsets), _i64s(tensor.shape), ptr))

    def add_replicated(self, key, tensor, device=False):
        """All of tensor `key`, held whole by the contiguous tensor `tensor` (written once); device as add_box."""
        add = _capi.lib.sck_state_add_device_replicated if device else _capi.lib.sck_state_add_replicated
        ptr = self._data(tensor, device)
        shardckpt._check(add(self.h, _key(key), sck_dtype(tensor.dtype, key), tensor.dim(), _i64s(tensor.shape), ptr))

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
