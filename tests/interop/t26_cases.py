"""torch 2.6 interop cases (run_interop.py's "(t)" lines): Lightning Fabric's FSDP sharded layout and
planner_data paths against the real torch 2.6 in the trixie chroot (tests/interop/torch26_root.sh).

- (t) Fabric: t26_fabric.py FSDP-trains a model on 2 gloo ranks and saves it as Fabric's
  FSDPStrategy.save_checkpoint does (DCP + meta.pt); shardckpt reshards it in Fabric's layout on 3 ranks
  and on 1; Fabric's load_checkpoint (emulated) restores model, optimizer and meta.pt on 3 and 4 ranks,
  bit for bit; shardckpt's own reading (convert to safetensors) equals the full state.
- (t) planner_data: torch's dcp_to_torch_save of a shardckpt re-save of a Module + Adam state
  (get_state_dict) gives the same nested dict as of torch's own save.
A missing chroot is a failure, never a skip.
"""
import os
import shutil
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TRIXIE_ROOT = os.environ.get("TRIXIE_ROOT", "/var/cache/shardckpt/trixie-root")
TIMEOUT_S = 400


def inside(path):
    """A host path under the chroot as the chroot sees it."""
    return "/" + os.path.relpath(path, TRIXIE_ROOT)


def py26(ri, script, *args):
    """Runs tests/interop/SCRIPT under torch 2.6; paths among args are host paths under the root."""
    if not os.path.isfile(os.path.join(TRIXIE_ROOT, "usr/bin/python3")):
        raise ri.Failure(f"torch 2.6 chroot not found at {TRIXIE_ROOT} (build it: sh tests/interop/torch26_root.sh)")
    d = os.path.join(TRIXIE_ROOT, "tmp", "sck-scripts")
    os.makedirs(d, exist_ok=True)
    shutil.copyfile(os.path.join(HERE, script), os.path.join(d, script))
    args = [inside(a) if a.startswith(TRIXIE_ROOT + "/") else a for a in args]
    cmd = ["chroot", TRIXIE_ROOT, "env", "-i", "PATH=/usr/bin:/bin", "HOME=/root", "USE_LIBUV=0", "PYTHONWARNINGS=ignore",
           "python3", f"/tmp/sck-scripts/{script}"] + args
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        raise ri.Failure(f"$ {' '.join(cmd)}\n  timed out after {TIMEOUT_S}s\n{(e.output or b'').decode()}")
    out = p.stdout.decode("utf-8", "replace")
    if p.returncode != 0:
        raise ri.Failure(f"$ {' '.join(cmd)}\n  exit {p.returncode}\n{out}")
    return out


def fabric(ri, w):
    ckf, exp = os.path.join(w, "ckf"), os.path.join(w, "expected.pt")
    out = py26(ri, "t26_fabric.py", "save", ckf, exp, "2")
    text = ri.run([ri.CLI, "inspect", ckf])
    if "meta.pt" not in ri.run([ri.CLI, "inspect", "--flat", ckf]) or "step" not in text:
        raise ri.Failure("inspect of Fabric's checkpoint does not show meta.pt's entries:\n" + text)
    ri.run([ri.CLI, "verify", ckf])
    ck3, ck1, flat = (os.path.join(w, x) for x in ("ck3", "ck1", "flat.safetensors"))
    ri.run([ri.CLI, "convert", ckf, ck3, "--to", "fabric", "--ranks", "3"])
    ri.run([ri.CLI, "diff", ckf, ck3])
    out += py26(ri, "t26_fabric.py", "load", ck3, exp, "3")
    ri.run([ri.CLI, "convert", ckf, ck1, "--to", "fabric"])
    out += py26(ri, "t26_fabric.py", "load", ck1, exp, "4")
    ri.run([ri.CLI, "convert", ckf, flat])
    out += py26(ri, "t26_fabric.py", "flat", flat, exp)
    return out


def planner_data(ri, w):
    t = os.path.join(w, "torch")
    out = py26(ri, "t26_paths.py", "save", t)
    s = os.path.join(w, "ours")
    ri.run([ri.CLI, "convert", t, s, "--to", "dcp", "--ranks", "3"])
    out += py26(ri, "t26_paths.py", "compare", t, s)
    return out


def add_cases(s, ri):
    def in_root(fn):
        def run():
            base = os.path.join(TRIXIE_ROOT, "tmp")
            if not os.path.isdir(base):
                raise ri.Failure(f"torch 2.6 chroot not found at {TRIXIE_ROOT} (build it: sh tests/interop/torch26_root.sh)")
            w = tempfile.mkdtemp(prefix="sck-t26-", dir=base)
            try:
                return fn(ri, w)
            finally:
                if not os.environ.get("SCK_INTEROP_KEEP"):
                    shutil.rmtree(w, ignore_errors=True)
        return run

    s.case("(t) torch 2.6 Fabric FSDP sharded save (2 ranks) -> shardckpt Fabric layout on 3 and 1 -> Fabric load on 3 "
           "and 4, bit-identical; shardckpt reads it whole", in_root(fabric))
    s.case("(t) torch 2.6 dcp_to_torch_save: shardckpt's re-save of Module + Adam state unflattens as torch's own "
           "(planner_data paths)", in_root(planner_data))
