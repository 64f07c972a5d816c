"""torch.distributed.checkpoint storage for shardckpt (torch 2.x).

    import torch.distributed.checkpoint as dcp, shardckpt.torch
    dcp.load(state_dict, storage_reader=shardckpt.torch.FileSystemReader("ckpt/step-100"))

FileSystemReader reads any DCP directory (torch's or shardckpt's; also a safetensors file or a Hugging Face
sharded directory) with libshardckpt's metadata reader, which decodes `.metadata` without running its
pickle, and its box reader, which reads each requested piece of a tensor straight into the destination
tensor when that is a contiguous CPU tensor of the same dtype, checking the CRC-32C of every item whose
checksum `.metadata` records (shardckpt-written checkpoints).  A mismatch raises shardckpt.Error
SCK_ERR_CHECKSUM naming the file, key and item offset, before torch sees any of the item's bytes.
"""
import io
import os
import uuid

import torch
from torch.distributed.checkpoint.metadata import (BytesStorageMetadata, ChunkStorageMetadata, Metadata,
                                                   StorageMeta, TensorProperties, TensorStorageMetadata)
from torch.distributed.checkpoint.planner import LoadItemType
from torch.distributed.checkpoint.storage import StorageReader
from torch.futures import Future

import shardckpt

__all__ = ["FileSystemReader", "metadata_of"]


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

    def __init__(self, path):
        super().__init__()
        self.path = os.fspath(path)
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
                if target.device.type == "cpu" and target.is_contiguous() and target.dtype == getattr(torch, e.dtype):
                    ck.read_into(name, target, offsets)  # straight into the destination's memory
                else:
                    target.copy_(ck.read_tensor(name, (offsets, tuple(req.lengths))))
                planner.commit_tensor(req, target)
        finally:
            self._close()
        fut = Future()
        fut.set_result(None)
        return fut
