"""What the torch 2.6 interop scripts (t26_*.py, inside the chroot) share: starting their gloo ranks by hand,
comparing dicts of tensors, and a rank's closing report.

launch(script, args, n) runs `python3 script *args` n times with MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE and
SCK_T26_RANK=1 set (the script's main runs its rank code when it sees SCK_T26_RANK), each under a timeout:
a failed rank leaves its gloo peers waiting forever.  A rank's lines starting "rank " are printed, or all
of its output when it failed.  Returns 0 when every rank exited 0.

load_args(path) is what the scripts pass to dcp.load: checkpoint_id=path (torch's own reader), or, when
SCK_T26_PYSITE names where the shardckpt Python package is installed, storage_reader=shardckpt.torch's
FileSystemReader(path), with Python's open() refusing any `.metadata` (the C reader decodes it; nothing of
Python's reads or unpickles it).

save_args(path) is what they pass to dcp.save: checkpoint_id=path (torch's own writer), or, when
SCK_T26_WRITER=shardckpt (and SCK_T26_WRITE_SITE names where the package is installed), storage_writer=
shardckpt.torch's FileSystemWriter(path).  The two variables are apart from load_args' so that a case can
write with one side and read with the other.
"""
import os
import socket
import subprocess
import sys

TIMEOUT_S = 240


def launch(script, args, n, timeout_s=TIMEOUT_S):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(n):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r), WORLD_SIZE=str(n),
                   SCK_T26_RANK="1", PYTHONWARNINGS="ignore")
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(script)] + [str(a) for a in args], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    rc = 0
    for r, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, _ = p.communicate()
            print(f"rank {r}: timed out after {timeout_s}s")
            rc = 1
        text = out.decode("utf-8", "replace")
        lines = [ln for ln in text.splitlines() if ln.startswith("rank ") or "Error" in ln or "error" in ln]
        print("\n".join(lines) if p.returncode == 0 else text)
        rc = rc or p.returncode
    return rc


def load_args(path):
    site = os.environ.get("SCK_T26_PYSITE")
    if not site:
        return {"checkpoint_id": path}
    import builtins
    import io
    if site not in sys.path:
        sys.path.insert(0, site)
    if not getattr(io.open, "sck_guard", False):
        real_open = io.open

        def guarded_open(file, *args, **kwargs):
            if isinstance(file, (str, bytes, os.PathLike)) and os.path.basename(os.fsdecode(file)) == ".metadata":
                raise AssertionError(f"Python opened {os.fsdecode(file)} under shardckpt.torch.FileSystemReader")
            return real_open(file, *args, **kwargs)
        guarded_open.sck_guard = True
        builtins.open = io.open = guarded_open
    import shardckpt.torch
    return {"storage_reader": shardckpt.torch.FileSystemReader(path)}


def save_args(path):
    if os.environ.get("SCK_T26_WRITER") != "shardckpt":
        return {"checkpoint_id": path}
    site = os.environ["SCK_T26_WRITE_SITE"]
    if site not in sys.path:
        sys.path.insert(0, site)
    import shardckpt.torch
    return {"storage_writer": shardckpt.torch.FileSystemWriter(path)}


def tensor_dict_problems(got, want):
    """What differs between two dicts of tensors (keys; dtype, shape or any bit of a value), each problem a
    line; a value that differs says by how much at most."""
    import torch
    out = [f"keys differ: {sorted(set(got) ^ set(want))}"] if got.keys() != want.keys() else []
    for k in sorted(set(got) & set(want)):
        a, b = got[k], want[k]
        if a.dtype != b.dtype or a.shape != b.shape:
            out.append(f"{k}: {a.dtype}{list(a.shape)} differs from {b.dtype}{list(b.shape)}")
        elif not torch.equal(a.view(-1).view(torch.uint8), b.view(-1).view(torch.uint8)):
            by = (a.double() - b.double()).abs().max().item() if a.is_floating_point() else "?"
            out.append(f"{k}: differs by up to {by:.3g}" if isinstance(by, float) else f"{k} differs")
    return out


def rank_report(rank, problems, ok):
    """Prints each problem as "rank R: ...", or the line ok when there is none; the exit status."""
    for p in problems:
        print(f"rank {rank}: {p}")
    if not problems:
        print(f"rank {rank}: {ok}")
    return 1 if problems else 0
