"""Shim self-test helper: re-pickle a torch 1.13 checkpoint's .metadata the way torch 2.x names it.

usage: rewrite_metadata_2x.py CKPT_DIR

Class paths become torch.distributed.checkpoint.metadata.* / .filesystem._StorageInfo, the enum
becomes _MEM_FORMAT_ENCODING pickled by value, and the 2.x-only fields planner_data (path per
fqn), storage_meta and version are added.  torch_load_check.py on the result then proves the
sitecustomize aliases, independently of the library under test.
"""
import os
import pickle
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop_common as ic  # noqa: E402


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    path = os.path.join(sys.argv[1], ".metadata")
    ic.ensure_shim()
    from torch.distributed._shard.checkpoint import filesystem as fs
    from torch.distributed._shard.checkpoint import metadata as md
    from torch.distributed._shard.sharded_tensor import metadata as stmd
    import torch.distributed.checkpoint.metadata as md2x  # the alias module

    with open(path, "rb") as f:
        meta = pickle.load(f)
    meta.planner_data = {fqn: (fqn,) for fqn in meta.state_dict_metadata}
    meta.storage_meta = md2x.StorageMeta(checkpoint_id=None, save_id="shim-selftest", load_id=None, modules=[])
    meta.version = "1.0.0"

    renames = [(cls, "torch.distributed.checkpoint.metadata", cls.__qualname__)
               for cls in (md.Metadata, md.TensorStorageMetadata, md.ChunkStorageMetadata,
                           md.BytesStorageMetadata, md.MetadataIndex, stmd.TensorProperties)]
    renames.append((stmd.MEM_FORMAT_ENCODING, "torch.distributed.checkpoint.metadata", "_MEM_FORMAT_ENCODING"))
    renames.append((fs._StorageInfo, "torch.distributed.checkpoint.filesystem", "_StorageInfo"))
    saved = [(cls, cls.__module__, cls.__qualname__) for cls, _, _ in renames]

    class ByValueEnumPickler(pickle.Pickler):
        def reducer_override(self, obj):  # 2.x on most Pythons: _MEM_FORMAT_ENCODING(0)
            if isinstance(obj, stmd.MEM_FORMAT_ENCODING):
                return type(obj), (obj.value,)
            return NotImplemented

    try:
        for cls, mod, name in renames:
            cls.__module__, cls.__qualname__ = mod, name
        with open(path + ".tmp", "wb") as f:
            ByValueEnumPickler(f, protocol=4).dump(meta)
    finally:
        for cls, mod, name in saved:
            cls.__module__, cls.__qualname__ = mod, name
    os.replace(path + ".tmp", path)
    with open(path, "rb") as f:
        raw = f.read()
    if b"_shard" in raw or b"_MEM_FORMAT_ENCODING" not in raw:
        print(f"FAIL: {path} still names 1.13 modules", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
