"""Test-only shim so Debian's torch 1.13 DCP runs on Python 3.11 and reads torch-2.x pickles.

Active when tests/interop is on PYTHONPATH (run_interop.py sets it) or when a script calls
install() itself.  Two independent fixes, both inert until torch's DCP is actually used:

1. torch 1.13's sharded_tensor/metadata.py declares `tensor_properties: TensorProperties =
   field(default=TensorProperties())`; Python 3.11 rejects unhashable dataclass defaults.  We wrap
   dataclasses._get_field so that, for torch classes only, such a default becomes a
   default_factory returning a copy.

2. torch 2.x pickles `.metadata` with classes under torch.distributed.checkpoint.{metadata,
   filesystem}; 1.13 has them under torch.distributed._shard.*.  A meta path finder serves those
   2.x module names as aliases of the 1.13 objects, created only when something imports them
   (e.g. pickle.load resolving a class), so `import torch` is untouched.
"""
import copy
import dataclasses
import functools
import importlib.abc
import importlib.machinery
import os
import sys
import types

SHARDCKPT_SHIM = True

# ---------------------------------------------------------------------------------------------
# 1. dataclass mutable defaults
# ---------------------------------------------------------------------------------------------


def _is_unhashable_instance_default(value):
    if value is dataclasses.MISSING or isinstance(value, (list, dict, set)):
        return False
    return type(value).__hash__ is None


def _patch_dataclass_defaults():
    original = dataclasses._get_field
    if getattr(original, "_shardckpt_patched", False):
        return

    @functools.wraps(original)
    def get_field(cls, a_name, a_type, *args, **kwargs):
        if cls.__module__.startswith("torch."):
            default = cls.__dict__.get(a_name, dataclasses.MISSING)
            if isinstance(default, dataclasses.Field):
                if _is_unhashable_instance_default(default.default):
                    default.default_factory = functools.partial(copy.deepcopy, default.default)
                    default.default = dataclasses.MISSING
            elif _is_unhashable_instance_default(default):
                setattr(cls, a_name,
                        dataclasses.field(default_factory=functools.partial(copy.deepcopy, default)))
        return original(cls, a_name, a_type, *args, **kwargs)

    get_field._shardckpt_patched = True
    dataclasses._get_field = get_field


# ---------------------------------------------------------------------------------------------
# 2. torch 2.x module paths -> torch 1.13 objects
# ---------------------------------------------------------------------------------------------

_PKG = "torch.distributed.checkpoint"


@dataclasses.dataclass
class StorageMeta:
    """2.x StorageMeta does not exist in 1.13; a stand-in so pickles that carry one still load."""
    checkpoint_id: object = None
    save_id: object = None
    load_id: object = None
    modules: list = dataclasses.field(default_factory=list)


StorageMeta.__module__ = _PKG + ".metadata"


def _fill_package(mod):
    import torch.distributed._shard.checkpoint as dcp  # noqa: F401  (1.13 package)
    for name in ("save_state_dict", "load_state_dict", "FileSystemReader", "FileSystemWriter",
                 "Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata"):
        setattr(mod, name, getattr(dcp, name))
    mod.__path__ = []  # a package, so its submodules can be imported through us


def _fill_metadata(mod):
    from torch.distributed._shard.checkpoint import metadata as md
    from torch.distributed._shard.sharded_tensor import metadata as stmd
    for name in ("Metadata", "TensorStorageMetadata", "ChunkStorageMetadata",
                 "BytesStorageMetadata", "MetadataIndex"):
        setattr(mod, name, getattr(md, name))
    mod.TensorProperties = stmd.TensorProperties
    # Must be the very enum class 1.13's TensorProperties.__setstate__ compares against.
    mod._MEM_FORMAT_ENCODING = stmd.MEM_FORMAT_ENCODING
    mod.MEM_FORMAT_ENCODING = stmd.MEM_FORMAT_ENCODING
    mod.StorageMeta = StorageMeta


def _fill_filesystem(mod):
    from torch.distributed._shard.checkpoint import filesystem as fs
    mod._StorageInfo = fs._StorageInfo
    mod.FileSystemReader = fs.FileSystemReader
    mod.FileSystemWriter = fs.FileSystemWriter


_ALIASES = {
    _PKG: _fill_package,
    _PKG + ".metadata": _fill_metadata,
    _PKG + ".filesystem": _fill_filesystem,
}


class _AliasLoader(importlib.abc.Loader):
    def create_module(self, spec):
        return types.ModuleType(spec.name)

    def exec_module(self, module):
        _ALIASES[module.__name__](module)


class _AliasFinder(importlib.abc.MetaPathFinder):
    """Appended last to sys.meta_path, so it is asked only when no real module of that name
    exists: with a torch 2.x install the real modules win and this does nothing."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _ALIASES:
            return None
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(),
                                              is_package=(fullname == _PKG))


def install_aliases():
    if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
        sys.meta_path.append(_AliasFinder())


def install():
    """Idempotent; safe to call before or after `import torch`."""
    _patch_dataclass_defaults()
    install_aliases()


def _chain_next_sitecustomize():
    """Run the sitecustomize we shadow (Debian ships one), so behaviour is otherwise unchanged."""
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if not entry or os.path.abspath(entry) == here:
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate):
            try:
                with open(candidate, "rb") as f:
                    code = compile(f.read(), candidate, "exec")
                exec(code, {"__name__": "_shadowed_sitecustomize", "__file__": candidate})
            except Exception:
                pass
            return


install()
if __name__ == "sitecustomize":
    _chain_next_sitecustomize()
