"""sck_device_ops over torch tensors on an accelerator (CUDA), for shardckpt.torch: the library streams each
device tensor through its two staging buffers (pinned host memory from torch), block by block, instead of
the writer copying every tensor to the CPU first.  Host memory stays at 2 x staging_mib per rank, as with
torch's own writer's copy-ahead window.

The library passes device addresses inside the tensors it was given; each is mapped back to its tensor and
byte offset, and the copy is a torch copy_ between a byte view of the tensor and a CPU tensor over the host
memory (non_blocking: with pinned memory it is asynchronous; wait() synchronizes the device).

With emulate=True the tensors may be CPU tensors standing in for device ones (tests run the same callbacks
on machines without an accelerator): copies are then synchronous and staging is the library's own.
"""
import bisect
import ctypes

import torch

from . import _capi

COPY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
WAIT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
HOST_ALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
HOST_FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)


class DeviceOps(ctypes.Structure):
    _fields_ = [("copy_to_host", COPY), ("copy_to_device", COPY), ("wait", WAIT), ("host_alloc", HOST_ALLOC),
                ("host_free", HOST_FREE)]


def _fail(what, e):
    return _capi.set_error(_capi.ERR_IO, f"{what}: {type(e).__name__}: {e}")


def _wrap_host(addr, n):
    return torch.frombuffer((ctypes.c_uint8 * n).from_address(addr), dtype=torch.uint8)


class TorchDevice:
    """The device operations of one sck_state and the tensors whose addresses it was given.  .ops is the
    table for sck_state_set_device; keep this object alive as long as the state."""

    def __init__(self, emulate=False):
        self.emulate = emulate
        self._bases, self._tensors = [], []
        self._pinned_bases, self._pinned = [], []  # host_alloc'ed staging, sorted by address
        self._devices = set()
        pinned = not emulate and torch.cuda.is_available()
        self.ops = DeviceOps(COPY(self._to_host), COPY(self._to_device), WAIT(self._wait),
                             HOST_ALLOC(self._alloc) if pinned else HOST_ALLOC(),
                             HOST_FREE(self._free) if pinned else HOST_FREE())

    def add(self, tensor):
        """Registers a contiguous tensor; returns its address for sck_state_add_device_*."""
        p = tensor.data_ptr()
        k = bisect.bisect_left(self._bases, p)
        self._bases.insert(k, p)
        self._tensors.insert(k, tensor.reshape(-1).view(torch.uint8))
        if tensor.device.type != "cpu":
            self._devices.add(tensor.device)
        return p

    def _bytes(self, addr, n):
        k = bisect.bisect_right(self._bases, addr) - 1
        if k < 0:
            raise ValueError(f"device address {addr:#x} belongs to no tensor given")
        t, off = self._tensors[k], addr - self._bases[k]
        if off + n > t.numel():
            raise ValueError(f"device bytes [{off}, {off + n}) past the end of a {t.numel()}-byte tensor")
        return t[off:off + n]

    def _host_bytes(self, addr, n):
        """Host memory as a tensor: a slice of the pinned staging tensor holding it, so that torch knows it
        is pinned and non_blocking copies are asynchronous; else a view over the library's memory."""
        k = bisect.bisect_right(self._pinned_bases, addr) - 1
        if k >= 0 and addr + n <= self._pinned_bases[k] + self._pinned[k].numel():
            off = addr - self._pinned_bases[k]
            return self._pinned[k][off:off + n]
        return _wrap_host(addr, n)

    def _to_host(self, ctx, host, dev, n):
        try:
            self._host_bytes(host, n).copy_(self._bytes(dev, n), non_blocking=not self.emulate)
            return 0
        except BaseException as e:  # noqa: B036  (nothing may unwind through the C frames)
            return _fail("copy to host", e)

    def _to_device(self, ctx, dev, host, n):
        try:
            self._bytes(dev, n).copy_(self._host_bytes(host, n), non_blocking=not self.emulate)
            return 0
        except BaseException as e:  # noqa: B036
            return _fail("copy to device", e)

    def _wait(self, ctx):
        try:
            for d in self._devices:
                if d.type == "cuda":
                    torch.cuda.synchronize(d)
            return 0
        except BaseException as e:  # noqa: B036
            return _fail("device synchronize", e)

    def _alloc(self, ctx, n):
        try:
            t = torch.empty(n, dtype=torch.uint8, pin_memory=True)
        except BaseException:  # noqa: B036  (no pinned memory left: the library says so)
            return None
        k = bisect.bisect_left(self._pinned_bases, t.data_ptr())
        self._pinned_bases.insert(k, t.data_ptr())
        self._pinned.insert(k, t)
        return t.data_ptr()

    def _free(self, ctx, p, n):
        k = bisect.bisect_left(self._pinned_bases, p)
        if k < len(self._pinned_bases) and self._pinned_bases[k] == p:
            del self._pinned_bases[k], self._pinned[k]
