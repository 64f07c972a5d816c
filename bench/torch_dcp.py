"""Times torch 1.13 DCP (Debian python3-torch, gloo, CPU) on the state bench/bench.c uses.

usage: torch_dcp.py DIR NTENSORS ROWS COLS RANKS DROP_CACHES(0|1)

NTENSORS float32 tensors of shape [ROWS, COLS], each a ShardedTensor split by rows over RANKS gloo
processes (ChunkShardingSpec dim 0: the same row blocks as the C benchmark when RANKS divides
ROWS).  Times save_state_dict (FileSystemWriter, fsync on: its default) and load_state_dict into the
same layout, from a barrier before to a barrier after, on rank 0.  Page cache is dropped before each
phase when DROP_CACHES is 1.  Prints one line:  TORCH save_s=<s> load_s=<s> rss_mib=<rank 0 peak>
Exit status 0 on success.  Ranks are started by hand (torch.distributed.run is broken on Debian 12).
"""
import os
import resource
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


def rank_main(d, ntensors, rows, cols, drop):
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

    def timed(fn):
        if drop and rank == 0:
            drop_caches()
        dist.barrier()
        t0 = time.monotonic()
        fn()
        dist.barrier()
        return time.monotonic() - t0

    save_s = timed(lambda: dcp.save_state_dict(state, dcp.FileSystemWriter(d)))
    for st in state.values():
        for shard in st.local_shards():
            shard.tensor.zero_()
    load_s = timed(lambda: dcp.load_state_dict(state, dcp.FileSystemReader(d)))
    bad = sum(int(not bool((shard.tensor == float(i % 251)).all()))
              for i, st in enumerate(state.values()) for shard in st.local_shards())
    if rank == 0:
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"TORCH save_s={save_s:.4f} load_s={load_s:.4f} rss_mib={rss:.0f}", flush=True)
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
    if len(sys.argv) != 7:
        print(__doc__, file=sys.stderr)
        return 2
    d, ntensors, rows, cols, world, drop = sys.argv[1], *map(int, sys.argv[2:7])
    if "RANK" in os.environ:
        return rank_main(d, ntensors, rows, cols, drop)
    return launch(sys.argv[1:], world)


if __name__ == "__main__":
    sys.exit(main())
