"""torch 2.6 interop cases (run_interop.py's "(t)" lines): Lightning Fabric's FSDP sharded layout and
planner_data paths against the real torch 2.6 in the trixie chroot (tests/interop/torch26_root.sh).

- (t) Fabric: t26_fabric.py FSDP-trains a model on 2 gloo ranks and saves it as Fabric's
  FSDPStrategy.save_checkpoint does (DCP + meta.pt); shardckpt reshards it in Fabric's layout on 3 ranks
  and on 1; Fabric's load_checkpoint (emulated) restores model, optimizer and meta.pt on 3 and 4 ranks,
  bit for bit; shardckpt's own reading (convert to safetensors) equals the full state.
- (t) dtypes: every dtype torch 2.6's DCP saves (float8 x4, uint16/32/64, complex32/64/128 ...), in
  little- and big-endian items: inspect names each with its byte size, shardckpt reshards it on 3 ranks
  and torch loads that bit for bit; the safetensors subset converts to a file safetensors' own reader
  reads bit for bit, and a dtype safetensors cannot name or shardckpt does not know is refused by name.
- (t) DTensor: t26_dtensor.py saves DTensor rows (Shard(0)), columns (Shard(1)), a replicated tensor, nested
  optimizer state and Python values on 1, 3 and 4 ranks; shardckpt reshards each on 2, 4 and 1 and torch
  loads those on 4, 2 and 3 ranks, rows and columns swapped for two of them; shardckpt's whole view of
  each equals the full tensors.
- (t) resume: a Module + Adam FSDP-trained 3 steps on 2 ranks, saved with get_state_dict; shardckpt
  reshards it on 3 ranks; torch restores it with set_state_dict on 2 ranks (FSDP) and on 1 (plain), trains
  2 more steps, and has the uninterrupted run's parameters and Adam moments bit for bit.
- (t) Adam resume: a C trainer resumes torch 2.6's saved Adam state on 3 and 2 thread ranks and torch
  restores what it saved (t26_adam_case.py).
- (t) __metadata__: files safetensors 0.4.5 wrote with other tools' metadata strings go through every
  conversion (safetensors, HF, DCP and back, both engines) and safe_open(...).metadata() reads every
  string back exactly; torch reads each as the same str from the DCP; diff reports a one-byte change by
  key; torch's DCP values become strings as themselves and JSON named in "shardckpt.json_keys".
- (t) planner_data: torch's dcp_to_torch_save of a shardckpt re-save of a Module + Adam state
  (get_state_dict) gives the same nested dict as of torch's own save.
A missing chroot is a failure, never a skip.
"""
import hashlib
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


def py26(ri, script, *args, env=()):
    """Runs tests/interop/SCRIPT under torch 2.6; paths among args are host paths under the root; env: more
    "NAME=value" strings for its environment."""
    if not os.path.isfile(os.path.join(TRIXIE_ROOT, "usr/bin/python3")):
        raise ri.Failure(f"torch 2.6 chroot not found at {TRIXIE_ROOT} (build it: sh tests/interop/torch26_root.sh)")
    # One script folder per checkout, so that suites run from two checkouts at once do not swap scripts.
    sub = "sck-scripts-" + hashlib.sha1(HERE.encode()).hexdigest()[:12]
    d = os.path.join(TRIXIE_ROOT, "tmp", sub)
    os.makedirs(d, exist_ok=True)
    for name in os.listdir(HERE):  # the script and the t26_* modules it imports
        if name.startswith("t26_") and name.endswith(".py"):
            shutil.copyfile(os.path.join(HERE, name), os.path.join(d, name))
    return in_chroot(ri, [f"/tmp/{sub}/{script}"] + list(args), env)


def in_chroot(ri, args, env=()):
    """Runs `python3 ARGS` in the chroot, paths among args and env values being host paths under the root."""
    def fix(a):
        return inside(a) if a.startswith(TRIXIE_ROOT + "/") else a
    env = [k + "=" + fix(v) for k, v in (e.split("=", 1) for e in env)]
    cmd = ["chroot", TRIXIE_ROOT, "env", "-i", "PATH=/usr/bin:/bin", "HOME=/root", "USE_LIBUV=0", "PYTHONWARNINGS=ignore",
           *env, "python3"] + [fix(a) for a in args]
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


T26_SIZES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int8": 1, "int16": 2, "int32": 4, "int64": 8,
             "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16, "complex32": 4, "uint16": 2, "uint32": 4,
             "uint64": 8, "float8_e4m3fn": 1, "float8_e4m3fnuz": 1, "float8_e5m2": 1, "float8_e5m2fnuz": 1}


def dtypes(ri, w):
    import json
    out = ""
    for variant in ("little", "big"):
        t, ours = os.path.join(w, f"torch-{variant}"), os.path.join(w, f"ours-{variant}")
        out += py26(ri, "t26_dtypes.py", "save", t, *(["big"] if variant == "big" else []))
        js = json.loads(ri.run([ri.CLI, "inspect", "--json", t]))
        got = {e["key"]: (e.get("dtype"), e["nbytes"]) for e in js["entries"]}
        want = {f"w.{n}": (n, 30 * s) for n, s in T26_SIZES.items()}
        if got != want:
            raise ri.Failure(f"inspect --json of torch 2.6's {variant}-endian dtypes: {got}\n  want {want}")
        ri.run([ri.CLI, "verify", t])
        ri.run([ri.CLI, "convert", t, ours, "--to", "dcp", "--ranks", "3"])
        ri.run([ri.CLI, "diff", t, ours])
        out += py26(ri, "t26_dtypes.py", "load", t, *(["big"] if variant == "big" else []))  # torch reads its own
        out += py26(ri, "t26_dtypes.py", "load", ours)  # and shardckpt's resharded re-save
    t = os.path.join(w, "torch-little")
    msg = ri.run_fail([ri.CLI, "convert", t, os.path.join(w, "all.safetensors")])
    if "complex" not in msg or "safetensors has no dtype for" not in msg:
        raise ri.Failure("convert of complex128 to safetensors did not say why it refused:\n" + msg)
    ts, st = os.path.join(w, "torch-st"), os.path.join(w, "st.safetensors")
    out += py26(ri, "t26_dtypes.py", "save", ts, "st")
    ri.run([ri.CLI, "convert", ts, st])
    out += py26(ri, "t26_dtypes.py", "st", st)
    ri.run([ri.CLI, "diff", ts, st])
    out += py26(ri, "t26_dtypes.py", "retag", t, "w.int8", "qint8")
    msg = ri.run_fail([ri.CLI, "inspect", t])
    if "'w.int8'" not in msg or "torch.qint8" not in msg:
        raise ri.Failure("a tensor of an unknown dtype was not refused at open by key and dtype:\n" + msg)
    return out


def dtensor(ri, w):
    out = ""
    for n_save, n_ours, n_load, how in ((1, 2, 4, "swap"), (3, 4, 2, "same"), (4, 1, 3, "swap")):
        t, ours, flat = (os.path.join(w, f"{x}{n_save}") for x in ("torch", "ours", "flat"))
        out += py26(ri, "t26_dtensor.py", "save", t, str(n_save))
        ri.run([ri.CLI, "verify", t])
        ri.run([ri.CLI, "convert", t, ours, "--to", "dcp", "--ranks", str(n_ours)])
        ri.run([ri.CLI, "diff", t, ours])
        out += py26(ri, "t26_dtensor.py", "load", ours, str(n_load), how)
        ri.run([ri.CLI, "convert", t, flat + ".safetensors"])
        out += py26(ri, "t26_dtensor.py", "flat", flat + ".safetensors")
    return out


def resume(ri, w):
    t, ours = os.path.join(w, "torch"), os.path.join(w, "ours")
    out = py26(ri, "t26_dtensor.py", "train-save", t, "2")
    ri.run([ri.CLI, "convert", t, ours, "--to", "dcp", "--ranks", "3"])
    for n in ("2", "1"):
        out += py26(ri, "t26_dtensor.py", "resume", ours, n, t + ".want.pt")
    return out


def planner_data(ri, w):
    t = os.path.join(w, "torch")
    out = py26(ri, "t26_paths.py", "save", t)
    s = os.path.join(w, "ours")
    ri.run([ri.CLI, "convert", t, s, "--to", "dcp", "--ranks", "3"])
    out += py26(ri, "t26_paths.py", "compare", t, s)
    return out


def stmeta(ri, w):
    out = py26(ri, "t26_stmeta.py", "make", w)
    p = lambda *x: os.path.join(w, *x)  # noqa: E731
    a = p("a.safetensors")
    steps = ((a, p("a1.safetensors"), []), (a, p("a2.safetensors"), ["--ranks", "2"]), (a, p("hf1"), ["--to", "hf"]),
             (p("hf"), p("h1.safetensors"), []), (p("hf"), p("hf2"), ["--to", "hf", "--ranks", "2"]),
             (p("hf"), p("dcp"), ["--to", "dcp", "--ranks", "2"]), (p("dcp"), p("d1.safetensors"), ["--ranks", "3"]),
             (p("dcp"), p("dhf"), ["--to", "hf"]))
    for src, dst, opts in steps:
        ri.run([ri.CLI, "convert", src, dst] + opts)
        ri.run([ri.CLI, "diff", a, dst])
        out += py26(ri, "t26_stmeta.py", "dcp" if dst.endswith("dcp") else "check", dst)
    msg = ri.run_fail([ri.CLI, "diff", a, p("b.safetensors")])
    if "~ lr" not in msg or "(text differs from byte 6)" not in msg:
        raise ri.Failure("diff did not report the one-byte change of __metadata__ 'lr':\n" + msg)
    out += py26(ri, "t26_stmeta.py", "save-dcp", p("tv"))
    ri.run([ri.CLI, "convert", p("tv"), p("tv.safetensors")])
    out += py26(ri, "t26_stmeta.py", "values", p("tv.safetensors"))
    ri.run([ri.CLI, "diff", p("tv"), p("tv.safetensors")])
    return out


def add_cases(s, ri):
    import t26_adam_case  # it uses py26 from here
    import t26_py_case
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
    s.case("(t) torch 2.6 every DCP dtype (float8, uint16-64, complex32-128; little and big endian) -> inspect, "
           "reshard on 3, torch loads bit for bit; safetensors subset via safetensors' reader; unknown dtype refused",
           in_root(dtypes))
    s.case("(t) torch 2.6 DTensor Shard(0)/Shard(1)/Replicate + nested optimizer state + values saved on 1, 3, 4 "
           "ranks -> shardckpt reshards on 2, 4, 1 -> torch loads on 4, 2, 3 (placements swapped), bit-identical",
           in_root(dtensor))
    s.case("(t) torch 2.6 get_state_dict of FSDP Module + Adam (2 ranks) -> shardckpt reshard (3) -> set_state_dict on "
           "2 and 1 ranks, 2 more steps equal the uninterrupted run bit for bit", in_root(resume))
    s.case("(t) torch 2.6 get_state_dict of Module + Adam -> a C program (tests/interop/t26_adam.c) resumes it as flat "
           "shards on 3 and 2 ranks, 2 Adam steps, saves; torch set_state_dict restores it = the uninterrupted run",
           in_root(t26_adam_case.adam_resume))
    s.case("(t) safetensors 0.4.5 __metadata__ strings kept exactly through st, HF and DCP (both engines); torch reads "
           "them as str; diff names a one-byte change; DCP values as strings and JSON keys", in_root(stmeta))
    s.case("(t) torch 2.6 dcp_to_torch_save: shardckpt's re-save of Module + Adam state unflattens as torch's own "
           "(planner_data paths)", in_root(planner_data))
    t26_py_case.add_cases(s, ri, in_root)
