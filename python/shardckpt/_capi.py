"""ctypes declarations of the part of include/shardckpt.h this package uses, and the library lookup.

The library is found, in order: the path in $SHARDCKPT_LIBRARY; libshardckpt.so next to this file (what
`pip install ./python` copies in when the repository's build/libshardckpt.so exists); the system's
(ctypes.util.find_library("shardckpt"), then plain "libshardckpt.so" on the loader's path).
"""
import ctypes
import ctypes.util
import os

MAX_DIMS = 16
ENTRY_TENSOR, ENTRY_BYTES = 0, 1

(VAL_NULL, VAL_BOOL, VAL_INT, VAL_FLOAT, VAL_STRING, VAL_BYTES, VAL_LIST, VAL_DICT, VAL_TUPLE, VAL_BIGINT,
 VAL_PICKLE) = range(11)

I64s = ctypes.c_int64 * MAX_DIMS


class EntryInfo(ctypes.Structure):
    _fields_ = [("key", ctypes.c_char_p), ("kind", ctypes.c_int), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int),
                ("shape", I64s), ("nchunks", ctypes.c_size_t), ("nbytes", ctypes.c_uint64),
                ("file", ctypes.c_char_p)]


class ChunkInfo(ctypes.Structure):
    _fields_ = [("offsets", I64s), ("sizes", I64s), ("file", ctypes.c_char_p), ("offset", ctypes.c_uint64),
                ("length", ctypes.c_uint64)]


class VerifyStats(ctypes.Structure):
    _fields_ = [("entries", ctypes.c_uint64), ("chunks", ctypes.c_uint64), ("checksummed", ctypes.c_uint64),
                ("bytes", ctypes.c_uint64)]


class SaveOpts(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint), ("staging_mib", ctypes.c_uint), ("reserved", ctypes.c_uint * 6)]


class LoadOpts(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint), ("reserved", ctypes.c_uint * 6), ("staging_mib", ctypes.c_uint)]


SAVE_NO_FSYNC, SAVE_DIRECT_IO = 0x1, 0x2
LOAD_NO_VERIFY, LOAD_DIRECT_IO, LOAD_BUFFERED_IO = 0x4, 0x8, 0x10
ERR_INVALID_ARG, ERR_IO, ERR_COMM = -1, -3, -10

# sck_comm_ops: the callbacks of a communication backend (shardckpt.torch builds one over torch.distributed).
ALLGATHERV = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                              ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t))
BCAST = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                         ctypes.POINTER(ctypes.c_size_t), ctypes.c_int)
BARRIER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
DESTROY = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class CommOps(ctypes.Structure):
    _fields_ = [("allgatherv", ALLGATHERV), ("bcast", BCAST), ("barrier", BARRIER), ("destroy", DESTROY)]


def _candidates():
    env = os.environ.get("SHARDCKPT_LIBRARY")
    if env:
        return [env]  # named explicitly: nothing else is tried
    out = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "libshardckpt.so")]
    out = [p for p in out if os.path.exists(p)]
    found = ctypes.util.find_library("shardckpt")
    return out + ([found] if found else []) + ["libshardckpt.so"]


def _load():
    errors = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            errors.append(f"{path}: {e}")
    raise ImportError("shardckpt: cannot load libshardckpt.so (set SHARDCKPT_LIBRARY to its path): "
                      + "; ".join(errors))


lib, LIBRARY_PATH = _load()

_P, _I, _SZ, _CP = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_char_p
_SIGS = {
    "sck_version": (_CP, []),
    "sck_last_error": (_CP, []),
    "sck_status_name": (_CP, [_I]),
    "sck_dtype_size": (_SZ, [_I]),
    "sck_dtype_name": (_CP, [_I]),
    "sck_ckpt_open": (_I, [_CP, ctypes.POINTER(_P)]),
    "sck_ckpt_close": (None, [_P]),
    "sck_ckpt_count": (_SZ, [_P]),
    "sck_ckpt_entry": (_I, [_P, _SZ, ctypes.POINTER(EntryInfo)]),
    "sck_ckpt_chunk": (_I, [_P, _SZ, _SZ, ctypes.POINTER(ChunkInfo)]),
    "sck_ckpt_find": (ctypes.c_long, [_P, _CP]),
    "sck_ckpt_entry_path": (_I, [_P, _SZ, ctypes.POINTER(_P)]),
    "sck_ckpt_read_box": (_I, [_P, _SZ, ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int64), _P]),
    "sck_ckpt_verify": (_I, [_P, ctypes.POINTER(VerifyStats)]),
    "sck_ckpt_read_bytes": (_I, [_P, _SZ, ctypes.POINTER(_P), ctypes.POINTER(_SZ), ctypes.POINTER(_P)]),
    "sck_value_free": (None, [_P]),
    "sck_value_kind_of": (_I, [_P]),
    "sck_value_get_bool": (_I, [_P]),
    "sck_value_get_int": (ctypes.c_int64, [_P]),
    "sck_value_get_float": (ctypes.c_double, [_P]),
    "sck_value_get_string": (_P, [_P, ctypes.POINTER(_SZ)]),
    "sck_value_len": (_SZ, [_P]),
    "sck_value_at": (_P, [_P, _SZ]),
    "sck_value_key_at": (_CP, [_P, _SZ]),
    "sck_dtype_from_name": (_I, [_CP, ctypes.POINTER(_I)]),
    "sck_comm_create": (_P, [ctypes.POINTER(CommOps), _P, _I, _I]),
    "sck_comm_single": (_P, []),
    "sck_comm_free": (None, [_P]),
    "sck_comm_agree": (_I, [_P, _I]),
    "sck_state_new": (_P, []),
    "sck_state_free": (None, [_P]),
    "sck_state_add_box": (_I, [_P, _CP, _I, _I, ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int64),
                               ctypes.POINTER(ctypes.c_int64), _P]),
    "sck_state_add_replicated": (_I, [_P, _CP, _I, _I, ctypes.POINTER(ctypes.c_int64), _P]),
    "sck_state_add_item_bytes": (_I, [_P, _CP, _P, _SZ]),
    "sck_state_set_device": (_I, [_P, _P, _P]),
    "sck_state_add_device_box": (_I, [_P, _CP, _I, _I, ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int64),
                                      ctypes.POINTER(ctypes.c_int64), _P]),
    "sck_state_add_device_replicated": (_I, [_P, _CP, _I, _I, ctypes.POINTER(ctypes.c_int64), _P]),
    "sck_state_set_path": (_I, [_P, _CP, _P]),
    "sck_save": (_I, [_P, _CP, _P, ctypes.POINTER(SaveOpts)]),
    "sck_load": (_I, [_P, _CP, _P, ctypes.POINTER(LoadOpts)]),
    "sck_value_list": (_P, []),
    "sck_value_int": (_P, [ctypes.c_int64]),
    "sck_value_string_n": (_P, [_CP, _SZ]),
    "sck_value_list_append": (_I, [_P, _P]),
}
for _name, (_res, _args) in _SIGS.items():
    _f = getattr(lib, _name)
    _f.restype, _f.argtypes = _res, _args

# sck_err is variadic: called with no argtypes, through set_error.
lib.sck_err.restype = _I


def set_error(status, message):
    """Records `message` as the thread's last error (sck_err) and returns `status`, for callbacks the library
    calls (a communicator's, a device's) and for a rank's own failure handed to sck_comm_agree."""
    return lib.sck_err(status, b"%s", message.encode("utf-8", "replace"))

_libc = ctypes.CDLL(None)
libc_free = _libc.free
libc_free.restype, libc_free.argtypes = None, [_P]
libc_malloc = _libc.malloc  # buffers the library frees (a backend's allgatherv/bcast results)
libc_malloc.restype, libc_malloc.argtypes = _P, [_SZ]
