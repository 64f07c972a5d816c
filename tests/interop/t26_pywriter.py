"""shardckpt.torch.FileSystemWriter under torch 2.6 (run inside the chroot, with SCK_T26_WRITE_SITE naming where
the package is installed).

usage: t26_pywriter.py like-torch DIR NRANKS  t26_dtensor's STATE saved by torch's FileSystemWriter (DIR/torch)
                                              and by shardckpt's (DIR/ours; DIR/async through dcp.async_save)
                                              on NRANKS gloo ranks: all loaded by
                                              torch's own reader into the same state bit for bit, and their
                                              .metadata (unpickled by torch's reader) agree: every key, kind,
                                              dtype, size, chunk list and planner_data path
       t26_pywriter.py device DIR NRANKS      the writer's and reader's device path (sck_device_ops through torch
                                              copies) with CPU tensors standing in for accelerator ones
       t26_pywriter.py failures DIR NRANKS    a good save, then saves that must fail on every rank, none
                                              hanging: one rank's resolve_data raising, a directory holding a
                                              foreign file, overwrite=False; DIR keeps the good checkpoint
"""
import os
import sys

from t26_dtensor import ROWS, problems_of, state
from t26_ranks import launch, rank_report

HERE = os.path.dirname(os.path.abspath(__file__))


def writer(path, **kw):
    site = os.environ["SCK_T26_WRITE_SITE"]
    if site not in sys.path:
        sys.path.insert(0, site)
    import shardckpt.torch
    return shardckpt.torch.FileSystemWriter(path, **kw)


def recording_writer(path, seen, **kw):
    """A FileSystemWriter that appends the message of whatever its steps raise to `seen`: torch 2.6 on
    Python 3.13 cannot carry a rank's exception to the others (pickling its traceback's frames fails with
    "cannot pickle code objects"), so what each rank's writer raised is checked here."""
    base = type(writer(path))

    class Recording(base):
        def prepare_local_plan(self, plan):
            try:
                return super().prepare_local_plan(plan)
            except BaseException as e:
                seen.append(f"{type(e).__name__}: {e}")
                raise

        def write_data(self, plan, planner):
            try:
                return super().write_data(plan, planner)
            except BaseException as e:
                seen.append(f"{type(e).__name__}: {e}")
                raise
    return Recording(path, **kw)


def metadata_problems(a, b):
    """What differs between two torch Metadata objects in what a loader uses."""
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata
    out = []
    if set(a.state_dict_metadata) != set(b.state_dict_metadata):
        out.append(f"keys differ: {sorted(set(a.state_dict_metadata) ^ set(b.state_dict_metadata))}")
    for k in sorted(set(a.state_dict_metadata) & set(b.state_dict_metadata)):
        x, y = a.state_dict_metadata[k], b.state_dict_metadata[k]
        if isinstance(x, BytesStorageMetadata) or isinstance(y, BytesStorageMetadata):
            if type(x) is not type(y):
                out.append(f"{k}: {type(x).__name__} vs {type(y).__name__}")
            continue
        cx = sorted((tuple(c.offsets), tuple(c.sizes)) for c in x.chunks)
        cy = sorted((tuple(c.offsets), tuple(c.sizes)) for c in y.chunks)
        if x.properties.dtype != y.properties.dtype or x.size != y.size or cx != cy:
            out.append(f"{k}: {x.properties.dtype}{list(x.size)} {cx} vs {y.properties.dtype}{list(y.size)} {cy}")
    pa, pb = a.planner_data or {}, b.planner_data or {}
    for k in sorted(pa):
        if tuple(pa[k]) != tuple(pb.get(k, ())):
            out.append(f"planner_data[{k!r}]: {pa[k]} vs {pb.get(k)}")
    return out


def like_torch_rank(d):
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.device_mesh import init_device_mesh
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (n,))
    theirs, ours, later = (os.path.join(d, x) for x in ("torch", "ours", "async"))
    dcp.save(state(mesh, True), checkpoint_id=theirs)
    md = dcp.save(state(mesh, True), storage_writer=writer(ours))
    # dcp.async_save: torch stages the state on the CPU and runs the same save on a thread of its own.
    dcp.async_save(state(mesh, True), storage_writer=writer(later)).result(timeout=120)
    problems = []
    for path in (theirs, ours, later):
        sd = state(mesh, False, swap=True)
        dcp.load(sd, storage_reader=FileSystemReader(path))  # torch's reader: pickle.load of .metadata, torch.load
        problems += [f"{os.path.basename(path)}: {p}" for p in problems_of(sd)]
    mt, mo = FileSystemReader(theirs).read_metadata(), FileSystemReader(ours).read_metadata()
    problems += metadata_problems(mt, mo)
    # dcp.save's returned Metadata places every item where the checkpoint holds it.
    if set(md.storage_data) != set(mo.storage_data):
        problems.append("dcp.save's Metadata.storage_data names other items than .metadata")
    else:
        problems += [f"storage_data[{k}]: {md.storage_data[k]} vs {mo.storage_data[k]}" for k in md.storage_data
                     if md.storage_data[k] != mo.storage_data[k]]
    files = sorted(os.listdir(ours))
    if files != [".metadata", ".metadata.sck"] + [f"__{r}_0.distcp" for r in range(n)]:
        problems.append(f"files {files}")
    dist.barrier()
    return rank_report(rank, problems, f"of {n}: torch's writer and shardckpt's give the same state and metadata")


def device_rank(d):
    """The device path (sck_device_ops over torch copies) with CPU tensors standing in for device ones:
    STATE plus a 6 MiB sharded tensor saved through 1 MiB staging (several blocks a piece), loaded by torch's
    reader and by ours through the same path, bit for bit."""
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    writer(d)  # puts the package on sys.path
    import shardckpt.torch
    import shardckpt._torch_device as tdev
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (n,))
    big = torch.arange(1536 * 1024, dtype=torch.float32).reshape(1536, 1024) * 0.5
    calls = {"to_host": 0, "to_device": 0}
    real_h, real_d = tdev.TorchDevice._to_host, tdev.TorchDevice._to_device

    def to_host(self, *a):
        calls["to_host"] += 1
        return real_h(self, *a)

    def to_device(self, *a):
        calls["to_device"] += 1
        return real_d(self, *a)
    tdev.TorchDevice._to_host, tdev.TorchDevice._to_device = to_host, to_device

    def full(fill):
        sd = state(mesh, fill)
        sd["model"]["big"] = distribute_tensor(big if fill else torch.zeros_like(big), mesh, [Shard(0)])
        return sd
    path = os.path.join(d, "dev")
    dcp.save(full(True), storage_writer=writer(path, staging_mib=1, _emulate_device=True))
    problems = []
    for how, reader in (("torch's reader", FileSystemReader(path)),
                        ("ours, device path", shardckpt.torch.FileSystemReader(path, _emulate_device=True))):
        sd = full(False)
        dcp.load(sd, storage_reader=reader)
        problems += [f"{how}: {p}" for p in problems_of(sd)]
        if not torch.equal(sd["model"]["big"].full_tensor(), big):
            problems.append(f"{how}: model.big differs")
    local_mib = big.numel() * 4 / n / 2**20
    if calls["to_host"] < local_mib or calls["to_device"] < local_mib:  # one call per 1 MiB block at least
        problems.append(f"device copies {calls} for {local_mib:.1f} MiB through 1 MiB staging")
    dist.barrier()
    return rank_report(rank, problems, f"of {n}: device path (emulated) saved and loaded bit for bit, copies {calls}")


def failures_rank(d):
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import DefaultSavePlanner, FileSystemReader
    from torch.distributed.device_mesh import init_device_mesh
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (n,))
    good = os.path.join(d, "good")
    dcp.save(state(mesh, True), storage_writer=writer(good))
    problems = []

    class Failing(DefaultSavePlanner):
        def resolve_data(self, item):
            if rank == n - 1 and item.index.fqn == "model.rows":
                raise ValueError("injected failure resolving model.rows")
            return super().resolve_data(item)

    def must_fail(what, want, path, **kw):
        seen = []
        try:
            dcp.save(state(mesh, True), storage_writer=recording_writer(path, seen, **kw.pop("writer_kw", {})), **kw)
        except Exception:  # noqa: BLE001  (torch's CheckpointException, or its TypeError on Python 3.13)
            if not any(want in m for m in seen):
                problems.append(f"{what}: this rank's writer raised {seen or 'nothing'}, nothing with {want!r}")
            return
        problems.append(f"{what}: saved")

    # Rank n-1 fails inside write_data before sck_save; the others are already in it and must get its error.
    must_fail("a failing rank", "injected failure resolving model.rows", good, planner=Failing())
    if rank == 0:
        os.makedirs(os.path.join(d, "foreign"), exist_ok=True)
        with open(os.path.join(d, "foreign", "notes.txt"), "w") as f:
            f.write("not a checkpoint file")
    dist.barrier()
    must_fail("a directory with a foreign file", "SCK_ERR_INVALID_ARG", os.path.join(d, "foreign"))
    must_fail("overwrite=False", "Checkpoint already exists", good, writer_kw={"overwrite": False})
    sd = state(mesh, False)
    dcp.load(sd, storage_reader=FileSystemReader(good))
    problems += [f"after the failed saves: {p}" for p in problems_of(sd)]
    left = sorted(x for x in os.listdir(d) if x not in ("good", "foreign"))
    if left:
        problems.append(f"failed saves left {left}")
    dist.barrier()
    return rank_report(rank, problems, f"of {n}: failing saves raised on every rank; the good checkpoint "
                       f"({ROWS[0]} rows) loads unchanged")


def main(argv):
    mode, d, n = argv[1], argv[2], int(argv[3])
    fn = {"like-torch": like_torch_rank, "failures": failures_rank, "device": device_rank}[mode]
    if os.environ.get("SCK_T26_RANK"):
        return fn(d)
    os.makedirs(d, exist_ok=True)
    return launch(__file__, argv[1:], n)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
