"""Times torch DCP (gloo, CPU) on the state bench/bench.c uses: torch 1.13 or torch 2.x, whichever runs it.

usage: torch_dcp.py DIR NTENSORS ROWS COLS RANKS DROP_CACHES(0|1) [REPEAT]

NTENSORS float32 tensors of shape [ROWS, COLS], each split by rows over RANKS gloo processes (the same row
blocks as the C benchmark when RANKS divides ROWS: torch splits as torch.chunk does).
- torch 1.13 (Debian 12's python3-torch): ShardedTensors (ChunkShardingSpec dim 0), saved with
  save_state_dict (FileSystemWriter, fsync on: its default) and loaded with load_state_dict into the same
  layout, through the test shim in tests/interop/sitecustomize.py.
- torch 2.x (Debian 13's torch 2.6 in the trixie chroot, bench/bench.c copies this file there): DTensors
  with placements [Shard(0)] on a CPU DeviceMesh, saved with torch.distributed.checkpoint.save
  (FileSystemWriter, its defaults: fsync on) and loaded with torch.distributed.checkpoint.load
  (FileSystemReader) into the same layout.  With SCK_BENCH_STORAGE=shardckpt (and the package on PYTHONPATH),
  the same calls take shardckpt.torch's FileSystemWriter / FileSystemReader instead.
Each phase is timed from a barrier before to a barrier after, on rank 0; with REPEAT (default 1) the save and
the load run REPEAT times in the same processes and the best time of each is kept, as bench.c keeps its
own (a process's first save runs up to 3x slower here, torch's writer or shardckpt's alike).  Page cache is dropped before
each phase when DROP_CACHES is 1 (needs a writable /proc/sys/vm/drop_caches, in a chroot its /proc
mounted).  Prints one line:  TORCH save_s=<s> load_s=<s> rss_mib=<rank 0 peak>
Exit status 0 on success.  Ranks are started by hand (torch.distributed.run is broken on Debian 12).
"""
import os
import resource
import shutil
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
INTEROP = os.path.join(os.path.dirname(HERE), "tests", "interop")
RANK_TIMEOUT_S = 1800


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def torch_major():
    """torch's major version from its package metadata, without importing it (1.13 must install the shim
    first); 1 when the metadata cannot be read."""
    try:
        from importlib.metadata import version
        return int(version("torch").split(".")[0])
    except Exception:
        return 1


def timer(rank, drop, barrier):
    def timed(fn):
        if drop and rank == 0:
            drop_caches()
        barrier()
        t0 = time.monotonic()
        fn()
        barrier()
        return time.monotonic() - t0
    return timed


def report(rank, save_s, load_s):
    if rank == 0:
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"TORCH save_s={save_s:.4f} load_s={load_s:.4f} rss_mib={rss:.0f}", flush=True)


def rank_main_2x(d, ntensors, rows, cols, drop, repeat):
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    try:
        from torch.distributed.tensor import Shard, empty as dtensor_empty
    except ImportError:  # torch 2.0-2.3
        from torch.distributed._tensor import Shard, empty as dtensor_empty

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    state = {}
    for t in range(ntensors):
        dt = dtensor_empty(rows, cols, dtype=torch.float32, device_mesh=mesh, placements=[Shard(0)])
        dt.to_local().fill_(float(t % 251))
        state[f"model.t{t:05d}"] = dt

    if os.environ.get("SCK_BENCH_STORAGE") == "shardckpt":  # the same torch, through shardckpt's storage
        import shardckpt.torch as storage
    else:
        storage = dcp
    timed = timer(rank, drop, dist.barrier)
    save_s = load_s = float("inf")
    bad = 0
    for _ in range(repeat):
        if rank == 0 and os.path.isdir(d):  # a fresh directory each time, as the C side saves
            shutil.rmtree(d)
        dist.barrier()
        save_s = min(save_s, timed(lambda: dcp.save(state, storage_writer=storage.FileSystemWriter(d))))
        for dt in state.values():
            dt.to_local().zero_()
        load_s = min(load_s, timed(lambda: dcp.load(state, storage_reader=storage.FileSystemReader(d))))
        bad += sum(int(not bool((dt.to_local() == float(i % 251)).all())) for i, dt in enumerate(state.values()))
    report(rank, save_s, load_s)
    dist.barrier()
    dist.destroy_process_group()
    if bad:
        print(f"rank {rank}: {bad} shards loaded wrong values", file=sys.stderr)
        return 1
    return 0


def rank_main(d, ntensors, rows, cols, drop, repeat):
    if torch_major() >= 2:
        return rank_main_2x(d, ntensors, rows, cols, drop, repeat)
    sys.path.insert(0, INTEROP)
    import interop_common as ic
    ic.ensure_shim()
    import torch
    import torch.distributed as dist
    import torch.distributed._shard.checkpoint as dcp
    from torch.distributed._shard import sharded_tensor
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec

    torch.set_num_threads(1)
    rank, world = ic.init_dist()
    spec = ChunkShardingSpec(dim=0, placements=[f"rank:{r}/cpu" for r in range(world)])
    state = {}
    for t in range(ntensors):
        st = sharded_tensor.empty(spec, rows, cols, dtype=torch.float32)
        for shard in st.local_shards():
            shard.tensor.fill_(float(t % 251))
        state[f"model.t{t:05d}"] = st

    timed = timer(rank, drop, dist.barrier)
    save_s = load_s = float("inf")
    bad = 0
    for _ in range(repeat):
        if rank == 0 and os.path.isdir(d):
            shutil.rmtree(d)
        dist.barrier()
        save_s = min(save_s, timed(lambda: dcp.save_state_dict(state, dcp.FileSystemWriter(d))))
        for st in state.values():
            for shard in st.local_shards():
                shard.tensor.zero_()
        load_s = min(load_s, timed(lambda: dcp.load_state_dict(state, dcp.FileSystemReader(d))))
        bad += sum(int(not bool((shard.tensor == float(i % 251)).all()))
                   for i, st in enumerate(state.values()) for shard in st.local_shards())
    report(rank, save_s, load_s)
    dist.barrier()
    dist.destroy_process_group()
    if bad:
        print(f"rank {rank}: {bad} shards loaded wrong values", file=sys.stderr)
        return 1
    return 0


def launch(argv, world):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(world):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                   WORLD_SIZE=str(world), OMP_NUM_THREADS="1")
        if os.path.isdir(INTEROP):  # not in the torch 2.6 chroot, which has only this file
            env["PYTHONPATH"] = INTEROP + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)] + argv, env=env))
    rc = 0
    for p in procs:
        try:
            rc |= p.wait(timeout=RANK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = 1
    return rc


def main():
    if len(sys.argv) not in (7, 8):
        print(__doc__, file=sys.stderr)
        return 2
    d, ntensors, rows, cols, world, drop = sys.argv[1], *map(int, sys.argv[2:7])
    repeat = int(sys.argv[7]) if len(sys.argv) == 8 else 1
    if "RANK" in os.environ:
        return rank_main(d, ntensors, rows, cols, drop, repeat)
    return launch(sys.argv[1:], world)


if __name__ == "__main__":
    sys.exit(main())
