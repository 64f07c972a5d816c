"""shardckpt's Python package under torch 2.6 (run inside the chroot, SCK_T26_PYSITE naming the package).

usage: t26_pyreader.py same DIR           one process: dcp.load of every entry of DIR through
                                          shardckpt.torch.FileSystemReader equals dcp.load through torch's own
                                          reader, bit for bit, and so does Checkpoint.read_tensor of each tensor
       t26_pyreader.py st FILE            dcp.load of every tensor of safetensors FILE through FileSystemReader
                                          equals safetensors' own load_file, bit for bit
       t26_pyreader.py refuse DIR KEY     dcp.load through FileSystemReader fails with SCK_ERR_CHECKSUM naming
                                          KEY (one of KEY's items is damaged)
       t26_pyreader.py bench DIR MIB      dcp.save MIB MiB of float32 tensors with torch's writer, then times
                                          dcp.load of them through torch's reader and through FileSystemReader
"""
import os
import sys
import time

from t26_ranks import load_args, tensor_dict_problems


def empty_state(path):
    """{key: zeros} of every DCP tensor of `path`, from shardckpt's own view of it, and its bytes entries."""
    import torch
    sys.path.insert(0, os.environ["SCK_T26_PYSITE"])
    import shardckpt
    with shardckpt.open(path) as ck:
        sd = {e.name: torch.zeros(e.shape, dtype=getattr(torch, e.dtype)) for e in ck.entries
              if e.kind == "tensor" and e.chunks[0].file != "meta.pt"}
        return sd, [e.name for e in ck.entries if e.kind == "bytes"]


def same(path):
    import torch
    import torch.distributed.checkpoint as dcp
    sd, byte_keys = empty_state(path)
    torch_sd = {k: torch.zeros_like(v) for k, v in sd.items()}
    dcp.load(torch_sd, storage_reader=dcp.FileSystemReader(path))  # before load_args bars opening .metadata
    ours = {k: torch.zeros_like(v) for k, v in sd.items()}
    dcp.load(ours, **load_args(path))
    import shardckpt
    problems = tensor_dict_problems(ours, torch_sd)
    with shardckpt.open(path) as ck:
        problems += tensor_dict_problems({k: ck.read_tensor(k) for k in sd}, torch_sd)
    if problems:
        raise SystemExit("\n".join(problems))
    print(f"{path}: {len(sd)} tensors through shardckpt.torch.FileSystemReader and read_tensor equal torch's "
          f"reader bit for bit ({len(byte_keys)} bytes entries)")


def st(path):
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import load_file
    sd, _ = empty_state(path)
    dcp.load(sd, **load_args(path))
    want = load_file(path)
    problems = tensor_dict_problems(sd, want)
    if problems:
        raise SystemExit("\n".join(problems))
    print(f"{path}: {len(sd)} tensors of a safetensors file through FileSystemReader equal load_file's")


def refuse(path, key):
    import torch.distributed.checkpoint as dcp
    sd, _ = empty_state(path)
    try:
        dcp.load(sd, **load_args(path))
    except BaseException as e:  # dcp wraps a rank's exception in a CheckpointException, a BaseException
        text = str(e)
        if "SCK_ERR_CHECKSUM" not in text or repr(key) not in text:
            raise SystemExit(f"the load of a damaged {key!r} failed, but not naming SCK_ERR_CHECKSUM and the key:\n{text}")
        line = next(ln for ln in text.splitlines() if "SCK_ERR_CHECKSUM" in ln)
        print(f"refused: {line.strip()}")
        return
    raise SystemExit(f"dcp.load of {path} with a damaged item of {key!r} succeeded")


def bench(path, mib):
    import torch
    import torch.distributed.checkpoint as dcp
    n = 8
    per = mib * 2 ** 20 // 4 // n
    sd = {f"w{i}": torch.randn(per // 1024, 1024) for i in range(n)}
    dcp.save(sd, checkpoint_id=path)
    for name, make in (("torch FileSystemReader", lambda: {"storage_reader": dcp.FileSystemReader(path)}),
                       ("shardckpt FileSystemReader", lambda: load_args(path))):
        dst = {k: torch.empty_like(v) for k, v in sd.items()}
        best = None
        for _ in range(3):
            t0 = time.perf_counter()
            dcp.load(dst, **make())
            dt = time.perf_counter() - t0
            best = dt if best is None else min(best, dt)
        assert not tensor_dict_problems(dst, sd)
        print(f"{name}: {mib} MiB in {best * 1000:.0f} ms = {mib / best:.0f} MiB/s (best of 3, page cache warm)")


def main(argv):
    if argv[:1] == ["same"] and len(argv) == 2:
        same(argv[1])
    elif argv[:1] == ["st"] and len(argv) == 2:
        st(argv[1])
    elif argv[:1] == ["refuse"] and len(argv) == 3:
        refuse(argv[1], argv[2])
    elif argv[:1] == ["bench"] and len(argv) == 3:
        bench(argv[1], int(argv[2]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
