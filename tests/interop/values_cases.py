"""Interop cases (v): Python values torch round-trips (big ints, tuples, sets, complex, numpy scalars and
RNG state, torch.Size) written by torch's DCP, through shardckpt's verify / diff / inspect / convert,
and loaded back by torch with every value equal, type included.

Runs values_check.py under torch 1.13 (this python) and under torch 2.6 in the trixie chroot
(TRIXIE_ROOT, default /var/cache/shardckpt/trixie-root; a missing chroot is a failure, not a skip).
"""
import json
import os
import shutil
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TRIXIE_ROOT = os.environ.get("TRIXIE_ROOT", "/var/cache/shardckpt/trixie-root")
TIMEOUT_S = 300


def torch_py(ri, where, *args):
    """Runs values_check.py with the torch of `where` ("1.13": this python, "2.6": the chroot)."""
    if where == "1.13":
        env = dict(os.environ, PYTHONPATH=HERE)
        cmd = [ri.PY, os.path.join(HERE, "values_check.py")] + list(args)
    else:
        if not os.path.isfile(os.path.join(TRIXIE_ROOT, "usr/bin/python3")):
            raise ri.Failure(f"torch 2.6 chroot not found at {TRIXIE_ROOT} (docs: shared notes torch-2.6-on-debian-13)")
        inside = os.path.join(TRIXIE_ROOT, "tmp", "sck_values_check.py")
        shutil.copyfile(os.path.join(HERE, "values_check.py"), inside)
        args = ["/" + os.path.relpath(a, TRIXIE_ROOT) if a.startswith(TRIXIE_ROOT) else a for a in args]
        env = None
        cmd = ["chroot", TRIXIE_ROOT, "env", "-i", "PATH=/usr/bin:/bin", "HOME=/root", "USE_LIBUV=0",
               "python3", "/tmp/sck_values_check.py"] + args
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=TIMEOUT_S)
    out = p.stdout.decode("utf-8", "replace")
    if p.returncode != 0:
        raise ri.Failure(f"$ {' '.join(cmd)}\n  exit {p.returncode}\n{out}")
    return out


def round_trip(ri, where, work):
    a, b, st, c = (os.path.join(work, x) for x in ("a", "b", "c.safetensors", "c"))
    torch_py(ri, where, "save", a)
    ri.run([ri.CLI, "verify", a])
    ri.run([ri.CLI, "diff", a, a])
    text = ri.run([ri.CLI, "inspect", a])
    want = {"step": "= 5", "lr": "= 0.1", "name": '= "run-1"', "sizes": "= [1,2,3]", "big": "= 1180591620717411303424",
            "a_tuple": '= [1,"a",2.5]', "a_set": "set (raw pickle", "cplx": "complex (raw pickle",
            "size": "torch.Size (raw pickle", "np_rng": "tuple holding numpy.ndarray (raw pickle"}
    lines = {ln.split()[0]: ln for ln in text.splitlines() if ln.strip() and not ln.startswith(" ")}
    bad = [k for k, w in want.items() if k not in lines or w not in lines[k]]
    if bad:
        raise ri.Failure("inspect does not show " + ", ".join(f"{k} as {want[k]!r}" for k in bad) + "\n" + text)
    js = json.loads(ri.run([ri.CLI, "inspect", "--json", a]))
    ent = {e["key"]: e for e in js["entries"]}
    if ent["step"].get("value") != 5 or ent["a_tuple"].get("type") != "tuple" or ent["a_set"].get("type") != "set" \
            or "value" in ent["a_set"] or ent["big"].get("value") != 2 ** 70:
        raise ri.Failure("inspect --json values: " + json.dumps([ent[k] for k in ("step", "a_tuple", "a_set", "big")]))
    ri.run([ri.CLI, "convert", "--to", "dcp", "--ranks", "2", a, b])
    ri.run([ri.CLI, "diff", a, b])
    torch_py(ri, where, "load", b)
    # through safetensors (__metadata__ JSON; pickles as {"__pickle__": hex}) and back: every value comes
    # back but tuples, which JSON has no word for (they return as lists, and diff says so)
    ri.run([ri.CLI, "convert", "--to", "safetensors", b, st])
    ri.run([ri.CLI, "convert", "--to", "dcp", st, c])
    p = subprocess.run([ri.CLI, "diff", a, c], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=TIMEOUT_S)
    changed = sorted(ln.split()[1] for ln in p.stdout.decode().splitlines() if ln.startswith("~ "))
    # torch 2.x flattens the nested dict into nested.t / nested.e / nested.big, torch 1.13 keeps one item
    tuples = ["a_tuple", "nested"] if "nested" in ent else ["a_tuple", "nested.e", "nested.t"]
    if p.returncode != 1 or changed != tuples:
        raise ri.Failure(f"diff DCP vs DCP->safetensors->DCP: exit {p.returncode}, changed {changed}\n{p.stdout.decode()}")


def add_cases(s, ri):
    def case(where):
        if where == "1.13":
            work = tempfile.mkdtemp(prefix="values-", dir=s.tmp)
        else:
            work = tempfile.mkdtemp(prefix="sck-values-", dir=os.path.join(TRIXIE_ROOT, "tmp")) \
                if os.path.isdir(os.path.join(TRIXIE_ROOT, "tmp")) else os.path.join(TRIXIE_ROOT, "tmp", "missing")
        try:
            round_trip(ri, where, work)
        finally:
            if where != "1.13":
                shutil.rmtree(work, ignore_errors=True)
    for where in ("1.13", "2.6"):
        s.case(f"(v) torch {where}: big ints, tuples, sets, complex, numpy, torch.Size through verify/diff/inspect/"
               "convert (DCP and safetensors); torch loads every value back, type included", lambda w=where: case(w))
