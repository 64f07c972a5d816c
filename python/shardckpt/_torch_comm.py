"""An sck_comm over torch.distributed: the library's three collectives (allgatherv, bcast, barrier) as ctypes
callbacks into a process group, so that sck_save runs across the ranks a torch program already has.

The library calls them from the thread that called sck_save (never from its writer threads), with the GIL
released by ctypes; each callback takes the GIL back for its collective.  Their payloads are the save's
plans, offsets and checksums (kilobytes to a few megabytes), never tensor data, so the object collectives'
pickling of bytes objects costs nothing worth a tensor path.
"""
import ctypes

import torch.distributed as dist

from . import _capi


def _fail(e):
    return _capi.set_error(_capi.ERR_COMM, f"torch.distributed: {type(e).__name__}: {e}")


def _malloced(data):
    """A malloc'ed copy of `data` (the library frees it with free())."""
    p = _capi.libc_malloc(max(len(data), 1))
    if not p:
        raise MemoryError("out of memory")
    ctypes.memmove(p, data, len(data))
    return p


class TorchComm:
    """Owns an sck_comm whose collectives run on `group` (None: the default group).  .handle is the
    sck_comm pointer; close() frees it.  Keep the object alive while the library may call it."""

    def __init__(self, group=None):
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self._ops = _capi.CommOps(_capi.ALLGATHERV(self._allgatherv), _capi.BCAST(self._bcast),
                                  _capi.BARRIER(self._barrier), _capi.DESTROY())
        self.handle = _capi.lib.sck_comm_create(ctypes.byref(self._ops), None, self.rank, self.size)
        if not self.handle:
            raise MemoryError("shardckpt: out of memory creating a communicator")

    def _global(self, rank):
        return rank if self.group is None else dist.get_global_rank(self.group, rank)

    def _allgatherv(self, ctx, send, n, recv, counts):
        try:
            mine = ctypes.string_at(send, n) if n else b""
            parts = [None] * self.size
            dist.all_gather_object(parts, mine, group=self.group)
            for r, part in enumerate(parts):
                counts[r] = len(part)
            recv[0] = _malloced(b"".join(parts))
            return 0
        except BaseException as e:  # noqa: B036  (nothing may unwind through the C frames)
            return _fail(e)

    def _bcast(self, ctx, buf, n, root):
        try:
            obj = [(ctypes.string_at(buf[0], n[0]) if n[0] else b"") if self.rank == root else None]
            dist.broadcast_object_list(obj, src=self._global(root), group=self.group)
            if self.rank != root:
                buf[0] = _malloced(obj[0])
                n[0] = len(obj[0])
            return 0
        except BaseException as e:  # noqa: B036
            return _fail(e)

    def _barrier(self, ctx):
        try:
            dist.barrier(group=self.group)
            return 0
        except BaseException as e:  # noqa: B036
            return _fail(e)

    def close(self):
        if self.handle:
            _capi.lib.sck_comm_free(self.handle)
            self.handle = None
