"""Shared helpers for the torch-side interop scripts: shim loading, rank launching, dtype maps.

Scripts are launched once by the user/driver as a "launcher"; the launcher starts N copies of
itself as ranks (RANK/WORLD_SIZE/MASTER_* set), because torch.distributed.run is broken on Debian's
torch 1.13 + Python 3.11.
"""
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RANK_TIMEOUT_S = 90
MAX_LINES_PER_RANK = 60


def parse_check_args(argv, usage, default_ranks=None):
    """`CKPT EXPECTED [--values FILE] --ranks N` of the check scripts; exits with `usage` if malformed."""
    pos, values, ranks = [], None, default_ranks
    it = iter(argv)
    for a in it:
        if a == "--values":
            values = next(it)
        elif a == "--ranks":
            ranks = int(next(it))
        else:
            pos.append(a)
    if len(pos) != 2 or ranks is None or ranks < 1:
        raise SystemExit(usage)
    return pos[0], pos[1], values, ranks


def ensure_shim():
    """Install tests/interop/sitecustomize.py even when PYTHONPATH did not make it the sitecustomize."""
    mod = sys.modules.get("sitecustomize")
    if mod is not None and getattr(mod, "SHARDCKPT_SHIM", False):
        mod.install()
        return
    spec = importlib.util.spec_from_file_location("shardckpt_interop_shim",
                                                  os.path.join(HERE, "sitecustomize.py"))
    shim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shim)  # runs install()


def is_rank_process():
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child_env(rank, world, port):
    env = dict(os.environ)
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
               WORLD_SIZE=str(world), OMP_NUM_THREADS="1")
    pp = env.get("PYTHONPATH", "")
    if HERE not in pp.split(os.pathsep):
        env["PYTHONPATH"] = HERE + (os.pathsep + pp if pp else "")
    return env


def launch_ranks(script, args, world):
    """Run `script args` as `world` gloo ranks; prints their output prefixed by rank.
    Returns 0 only if every rank exited 0.  Retries once on a port collision."""
    for attempt in range(2):
        port = _free_port()
        procs = []
        for r in range(world):
            procs.append(subprocess.Popen([sys.executable, script] + list(args), env=_child_env(r, world, port),
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          start_new_session=True))
        outs, rcs = [], []
        deadline = time.monotonic() + RANK_TIMEOUT_S
        for r, p in enumerate(procs):
            try:
                out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, 9)
                out, _ = p.communicate()
                out += f"\n[rank {r} killed after {RANK_TIMEOUT_S}s]\n".encode()
            outs.append(out.decode("utf-8", "replace"))
            rcs.append(p.returncode)
        if attempt == 0 and any(rc != 0 for rc in rcs) and any("Address already in use" in o for o in outs):
            continue
        break
    for r, out in enumerate(outs):
        lines = out.splitlines()
        if len(lines) > MAX_LINES_PER_RANK:  # a CheckpointException repeats every rank's traceback
            print(f"[rank {r}] ... {len(lines) - MAX_LINES_PER_RANK} lines omitted")
            lines = lines[-MAX_LINES_PER_RANK:]
        for line in lines:
            print(f"[rank {r}] {line}")
    return 0 if all(rc == 0 for rc in rcs) else 1


def init_dist():
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="env://")
    return dist.get_rank(), dist.get_world_size()


# safetensors dtype name <-> torch dtype; torch is imported lazily by the callers
def st_to_torch_dtype(name):
    import torch
    return {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
            "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
            "U8": torch.uint8, "BOOL": torch.bool}[name]


def torch_to_st_dtype(dt):
    import torch
    return {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
            torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
            torch.uint8: "U8", torch.bool: "BOOL"}[dt]


def tensor_to_np(t):
    """(dtype_name, ndarray) with the tensor's exact bits."""
    import torch
    t = t.detach().cpu().contiguous()
    name = torch_to_st_dtype(t.dtype)
    if t.dtype == torch.bfloat16:
        return name, t.view(torch.int16).numpy().view("<u2").copy()
    return name, t.numpy().copy()


def np_to_tensor(name, arr):
    import numpy as np
    import torch
    if name == "BF16":
        return torch.from_numpy(np.array(arr, order="C").view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.array(arr, order="C"))


# JSON form of non-tensor values: bytes become {"__bytes__": hex}
def to_json_value(v):
    if isinstance(v, (bytes, bytearray)):
        return {"__bytes__": bytes(v).hex()}
    if isinstance(v, dict):
        return {str(k): to_json_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [to_json_value(x) for x in v]
    return v


def from_json_value(v):
    if isinstance(v, dict):
        if set(v) == {"__bytes__"} and isinstance(v["__bytes__"], str):
            return bytes.fromhex(v["__bytes__"])
        return {k: from_json_value(x) for k, x in v.items()}
    if isinstance(v, list):
        return [from_json_value(x) for x in v]
    return v


def strict_equal(a, b):
    """Equality that also requires identical types (5 != 5.0, True != 1); lists and tuples agree."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(strict_equal(x, y) for x, y in zip(a, b))
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(strict_equal(a[k], b[k]) for k in a)
    if isinstance(a, float):
        return a == b or (a != a and b != b)
    return a == b


def load_json(path):
    with open(path) as f:
        return json.load(f)
