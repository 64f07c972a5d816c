"""torch.distributed.checkpoint storage for shardckpt (torch 2.x).

    import torch.distributed.checkpoint as dcp, shardckpt.torch
    dcp.save(state_dict, storage_writer=shardckpt.torch.FileSystemWriter("ckpt/step-100"))
    dcp.load(state_dict, storage_reader=shardckpt.torch.FileSystemReader("ckpt/step-100"))

FileSystemWriter writes through libshardckpt's save engine (sck_save): one data file per rank, tensors written
straight from their memory at aligned offsets by the library's writer threads, a CRC-32C per item, and an
atomic commit (the directory appears whole or not at all), in the DCP format torch's own reader loads.

FileSystemReader reads any DCP directory (torch's or shardckpt's; also a safetensors file or a Hugging Face
sharded directory) with libshardckpt's metadata reader, which decodes `.metadata` without running its
pickle, and its loader (sck_load), which reads all of a rank's requested pieces of tensors with its reader
threads straight into the destination tensors when they are contiguous CPU tensors of the same dtype,
checking the CRC-32C of every item whose checksum `.metadata` records (shardckpt-written checkpoints) and
the zip CRC-32s of torch-written ones.  A mismatch raises shardckpt.Error SCK_ERR_CHECKSUM naming the file,
key and item offset, and the load fails.
"""
import ctypes
import io
import os
import uuid

import torch
from torch.distributed.checkpoint.metadata import (BytesStorageMetadata, ChunkStorageMetadata, Metadata,
                                                   StorageMeta, TensorProperties, TensorStorageMetadata)
import torch.distributed as dist
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.planner import LoadItemType, WriteItemType
from torch.distributed.checkpoint.storage import StorageReader, StorageWriter, WriteResult
from torch.futures import Future

import shardckpt
from . import _capi
from ._state import State
from ._torch_comm import TorchComm
from ._torch_device import TorchDevice

__all__ = ["FileSystemReader", "FileSystemWriter", "metadata_of"]


def _dcp_entries(ck):
    """The entries torch's DCP knows: all but Fabric's meta.pt values (torch.load reads meta.pt itself)."""
    return [e for e in ck.entries if not (e.chunks and e.chunks[0].file == "meta.pt")]


def metadata_of(ck):
    """torch's Metadata for the open shardckpt.Checkpoint `ck`, with planner_data {key: path}."""
    sdm, paths = {}, {}
    for e in _dcp_entries(ck):
        if e.kind == "bytes":
            sdm[e.name] = BytesStorageMetadata()
        else:
            chunks = [ChunkStorageMetadata(offsets=torch.Size(c.offsets), sizes=torch.Size(c.sizes)) for c in e.chunks]
            sdm[e.name] = TensorStorageMetadata(properties=TensorProperties(dtype=getattr(torch, e.dtype)),
                                                size=torch.Size(e.shape), chunks=chunks)
        paths[e.name] = e.path
    return Metadata(state_dict_metadata=sdm, planner_data=paths, storage_meta=StorageMeta(checkpoint_id=ck.path))


class FileSystemReader(StorageReader):
    """A torch.distributed.checkpoint StorageReader over libshardckpt (see the module's doc)."""

    def __init__(self, path, *, _emulate_device=False):
        super().__init__()
        self.path = os.fspath(path)
        self._emulate_device = _emulate_device  # tests: CPU tensors take the device path
        self._ck = None
        self.load_id = str(uuid.uuid4())

    def _open(self):
        if self._ck is None:
            self._ck = shardckpt.open(self.path)
        return self._ck

    def _close(self):
        if self._ck is not None:
            self._ck.close()
            self._ck = None

    def reset(self, checkpoint_id=None):
        self._close()
        if checkpoint_id:
            self.path = os.fspath(checkpoint_id)
        self.load_id = str(uuid.uuid4())

    @property
    def checkpoint_id(self):
        return self.path

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        p = os.fspath(checkpoint_id)
        return (os.path.isfile(os.path.join(p, ".metadata")) or p.endswith(".safetensors") and os.path.isfile(p)
                or os.path.isfile(os.path.join(p, "model.safetensors.index.json")))

    def read_metadata(self):
        self._close()  # a new load: the checkpoint may have been replaced since the last one
        md = metadata_of(self._open())
        md.storage_meta.load_id = self.load_id
        return md

    def set_up_storage_reader(self, metadata, is_coordinator):
        self._open()

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def read_data(self, plan, planner):
        ck = self._open()
        dcp_dir = os.path.isfile(os.path.join(self.path, ".metadata"))
        st, copies, done = State(), [], []
        try:
            for req in plan.items:
                name = req.storage_index.fqn
                if req.type == LoadItemType.BYTE_IO:
                    if dcp_dir:
                        data = ck.read_bytes(name)
                    else:  # a safetensors __metadata__ value: given to torch as torch.save wrote it
                        buf = io.BytesIO()
                        torch.save(ck.value(name), buf)
                        data = buf.getvalue()
                    planner.load_bytes(req, io.BytesIO(data))
                    continue
                offsets = [c + o for c, o in zip(req.storage_index.offset, req.storage_offsets)]
                target = planner.resolve_tensor(req).detach()
                if tuple(target.shape) != tuple(req.lengths):
                    raise shardckpt.Error("SCK_ERR_MISMATCH", f"{self.path}: '{name}': destination of shape "
                                          f"{list(target.shape)} for a box of {list(req.lengths)}")
                e = ck.tensor(name)
                dtype, dest = getattr(torch, e.dtype), target
                if not (target.is_contiguous() and target.dtype == dtype):  # a temporary where it must be
                    dest = torch.empty(tuple(req.lengths), dtype=dtype, device=target.device)
                    copies.append((target, dest))
                dev = _on_device(dest, self._emulate_device)  # through host staging, block by block
                if dev:
                    _use_device(st, self._emulate_device)
                st.add_box(name, dest, e.shape, offsets, device=dev)
                done.append((req, target))
            # Every box at once through the library's loader: its reader threads, straight into the
            # destination tensors, each item's CRC-32C (or a torch item's zip CRC-32) checked.  Ranks load
            # independently (a communicator of their own): torch's plan already gave each its boxes.
            if done:
                comm = _capi.lib.sck_comm_single()
                if not comm:
                    raise MemoryError("shardckpt: out of memory")
                try:
                    st.load(comm, os.fsencode(self.path))
                finally:
                    _capi.lib.sck_comm_free(comm)
            for target, dest in copies:
                target.copy_(dest)
            for req, target in done:
                planner.commit_tensor(req, target)
        finally:
            st.close()
            self._close()
        fut = Future()
        fut.set_result(None)
        return fut


def _on_device(t, emulate):
    return t.device.type != "cpu" or emulate


def _use_device(st, emulate):
    if st._device is None:
        st.use_device(TorchDevice(emulate=emulate))


def _add_item(st, item, data, path, emulate=False):
    """One WriteItem of torch's plan into the sck_state: a byte item's torch.save archive as it is, a
    tensor's chunk from the tensor's memory (made contiguous only where it is not); a tensor on an
    accelerator goes through the library's device path (streamed through its staging, never copied to the
    CPU whole)."""
    key = item.index.fqn
    if item.type == WriteItemType.BYTE_IO:
        st.add_item_bytes(key, data.getbuffer())
    else:
        t = data.detach()
        if not t.is_contiguous():
            t = t.contiguous()
        td = item.tensor_data
        if tuple(t.shape) != tuple(td.chunk.sizes):
            raise ValueError(f"shardckpt: '{key}': the planner's tensor has shape {list(t.shape)}, "
                             f"its chunk {list(td.chunk.sizes)}")
        dev = _on_device(t, emulate)
        if dev:
            _use_device(st, emulate)
        if item.type == WriteItemType.TENSOR:  # a whole tensor: written once whichever ranks hold it
            st.add_replicated(key, t, device=dev)
        else:
            st.add_box(key, t, td.size, td.chunk.offsets, device=dev)
    # torch's flattening path (planner.mappings), recorded as .metadata's planner_data; one that does
    # not spell the key (a custom planner's) is left out, and the key gets its default path.
    if path is not None and ".".join(str(p) for p in path) == key:
        st.set_path(key, path)


class FileSystemWriter(StorageWriter):
    """A torch.distributed.checkpoint StorageWriter over libshardckpt's save engine (see the module's doc).

    path: the checkpoint directory (created; its parent directories too).  Saving over an existing
    checkpoint replaces it whole once the new one is complete; the directory may then hold only
    checkpoint files (.metadata, .metadata.sck, *.distcp, meta.pt), or the save fails with SCK_ERR_INVALID_ARG.
    sync_files: fsync the data files, .metadata and the directories before the save returns (default).
    overwrite: False refuses a directory that holds a checkpoint already (RuntimeError), as torch's does.
    direct_io: write the data files with O_DIRECT (bypassing the page cache; falls back where refused).
    staging_mib: size of each of the writer's two staging buffers (0: the library's 64 MiB).
    process_group: the group dcp.save runs on, when not the default one (dcp.save(process_group=...)).
    single_file_per_rank, thread_count, per_thread_copy_ahead: accepted for torch's signature; every rank
    writes one file (__RANK_0.distcp), with the library's own writer threads.
    """

    def __init__(self, path, single_file_per_rank=True, sync_files=True, thread_count=1,
                 per_thread_copy_ahead=10_000_000, overwrite=True, *, direct_io=False, staging_mib=0,
                 process_group=None, _emulate_device=False):
        super().__init__()
        if not single_file_per_rank:
            raise ValueError("shardckpt.torch.FileSystemWriter writes one file per rank "
                             "(single_file_per_rank=False is not supported)")
        self.path = os.fspath(path)
        self.sync_files, self.overwrite, self.direct_io = sync_files, overwrite, direct_io
        self.staging_mib, self.process_group = staging_mib, process_group
        self._emulate_device = _emulate_device  # tests: CPU tensors take the device path
        self.save_id = str(uuid.uuid4())

    def reset(self, checkpoint_id=None):
        if checkpoint_id:
            self.path = os.fspath(checkpoint_id)
        self.save_id = str(uuid.uuid4())

    @property
    def checkpoint_id(self):
        return self.path

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        p = os.path.abspath(os.fspath(checkpoint_id))
        if "://" in os.fspath(checkpoint_id):
            return False
        parent = os.path.dirname(p)
        while parent and not os.path.exists(parent):
            parent = os.path.dirname(parent)
        return bool(parent) and os.access(parent, os.W_OK)

    def storage_meta(self):
        return StorageMeta(checkpoint_id=self.path, save_id=self.save_id)

    def set_up_storage_writer(self, is_coordinator):
        pass

    def prepare_local_plan(self, plan):
        if os.path.exists(os.path.join(self.path, ".metadata")):
            if not self.overwrite:
                raise RuntimeError(f"Checkpoint already exists and self.overwrite={self.overwrite}.")
        parent = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(parent, exist_ok=True)  # sck_save creates the directory itself, atomically
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def write_data(self, plan, planner):
        paths = getattr(planner, "mappings", None) or {}
        comm = TorchComm(self.process_group) if dist.is_available() and dist.is_initialized() else None
        handle = comm.handle if comm else _capi.lib.sck_comm_single()
        st = State()
        try:
            try:
                for item in plan.items:
                    _add_item(st, item, planner.resolve_data(item), paths.get(item.index.fqn), self._emulate_device)
            except BaseException as e:
                # The other ranks are in sck_save: give them this rank's failure there, then raise it here.
                status = e.status if isinstance(e, shardckpt.Error) and isinstance(e.status, int) else _capi.ERR_INVALID_ARG
                _capi.set_error(status, f"{self.path}: {e}")
                _capi.lib.sck_comm_agree(handle, status)
                raise
            st.save(handle, os.fsencode(self.path),
                    (0 if self.sync_files else _capi.SAVE_NO_FSYNC) | (_capi.SAVE_DIRECT_IO if self.direct_io else 0),
                    self.staging_mib)
        finally:
            st.close()
            if comm:
                comm.close()
            else:
                _capi.lib.sck_comm_free(handle)
        fut = Future()
        fut.set_result(self._results(plan))
        return fut

    def _results(self, plan):
        """torch's WriteResults for this rank's items: where the committed checkpoint holds each (looked up
        through the library by key, without building every entry as shardckpt.open does)."""
        lib, h, info = _capi.lib, ctypes.c_void_p(), _capi.ChunkInfo()
        shardckpt._check(lib.sck_ckpt_open(os.fsencode(self.path), ctypes.byref(h)))
        try:
            out, nchunks = [], _capi.EntryInfo()
            for item in plan.items:
                i = lib.sck_ckpt_find(h, item.index.fqn.encode("utf-8", "surrogateescape"))
                if i < 0:
                    raise shardckpt.Error("SCK_ERR_MISSING_KEY", f"{self.path}: '{item.index.fqn}' missing after the save")
                shardckpt._check(lib.sck_ckpt_entry(h, i, ctypes.byref(nchunks)))
                want = None if item.type == WriteItemType.BYTE_IO else tuple(item.tensor_data.chunk.offsets)
                for j in range(nchunks.nchunks):
                    shardckpt._check(lib.sck_ckpt_chunk(h, i, j, ctypes.byref(info)))
                    if want is None or tuple(info.offsets[:len(want)]) == want:
                        break
                out.append(WriteResult(index=item.index, size_in_bytes=info.length,
                                       storage_data=_StorageInfo(info.file.decode(), info.offset, info.length)))
            return out
        finally:
            lib.sck_ckpt_close(h)

    def finish(self, metadata, results):
        """The checkpoint is committed already (sck_save wrote .metadata with CRC-32Cs and renamed the
        directory into place); this fills in the Metadata dcp.save returns, as torch's writer does."""
        storage_md = {}
        for wr_list in results:
            storage_md.update({wr.index: wr.storage_data for wr in wr_list})
        metadata.storage_data = storage_md
        metadata.storage_meta = self.storage_meta()
