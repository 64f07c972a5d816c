"""Interop suite: shardckpt's CLI against Debian's torch 1.13 DCP (`make test-interop`).

usage: /usr/bin/python3 tests/interop/run_interop.py [-v]     (SCK_INTEROP_KEEP=1 keeps the temp dir;
       SCK_INTEROP_ONLY=a,b runs only the cases whose names contain a or b, for work on one area: a case
       that reads an earlier case's output needs that one selected too)

Prints "ok   name" / "FAIL name" (+ details) per case, then "N passed, N failed"; exits 1 on any
failure.  Nothing is skipped: a missing CLI or an unimportable torch is a failure.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import interop_common as ic  # noqa: E402
import npst  # noqa: E402
import full_cases  # noqa: E402  (full checkpoints: safetensors, HF)
import values_cases  # noqa: E402  (Python values outside the decoded subset, torch 1.13 and 2.6)
import t26_cases  # noqa: E402  (torch 2.6: Fabric's FSDP layout, planner_data paths)
import pt_cases  # noqa: E402  (torch.save .pt files: inspect, a hostile pickle)
import py_cases  # noqa: E402  (the Python package, python/, on the host)
import crc_cases  # noqa: E402  (corrupted torch-written checkpoints: zip CRC-32)

REPO = os.path.dirname(os.path.dirname(HERE))
CLI = os.path.join(REPO, os.environ.get("SCK_BUILD", "build"), "bin", "shardckpt")  # run_all.sh passes make's BUILD
PY = sys.executable
VERBOSE = "-v" in sys.argv[1:]
CMD_TIMEOUT_S = 120


class Failure(Exception):
    pass


def run(cmd, what=None):
    """Run a command; raise Failure with its output when it exits non-zero."""
    env = dict(os.environ)
    env["PYTHONPATH"] = HERE + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    shown = " ".join(os.path.relpath(c, REPO) if c.startswith(REPO) else c for c in cmd)
    if cmd[0] == CLI and not os.access(CLI, os.X_OK):
        raise Failure(f"{os.path.relpath(CLI, REPO)} not found or not executable (build it with `make cli`)")
    try:
        p = subprocess.run(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=CMD_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        raise Failure(f"$ {shown}\n  timed out after {CMD_TIMEOUT_S}s\n{(e.output or b'').decode()}")
    out = p.stdout.decode("utf-8", "replace")
    if p.returncode != 0:
        raise Failure(f"$ {shown}\n  exit {p.returncode}{' (' + what + ')' if what else ''}\n{out}")
    if VERBOSE:
        print(f"  $ {shown}\n" + "".join(f"    {line}\n" for line in out.splitlines()), end="")
    return out


def run_fail(cmd):
    """Run a command that must fail (exit 1 or 2, not a crash); return its output."""
    shown = " ".join(os.path.relpath(c, REPO) if c.startswith(REPO) else c for c in cmd)
    try:
        p = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=CMD_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        raise Failure(f"$ {shown}\n  timed out after {CMD_TIMEOUT_S}s\n{(e.output or b'').decode()}")
    out = p.stdout.decode("utf-8", "replace")
    if p.returncode not in (1, 2):
        raise Failure(f"$ {shown}\n  exit {p.returncode}, but it should have failed with 1 or 2\n{out}")
    if VERBOSE:
        print(f"  $ {shown}   (fails, as it should)\n" + "".join(f"    {line}\n" for line in out.splitlines()), end="")
    return out


# ---------------------------------------------------------------------------------------------
# reference data written by python (case a)
# ---------------------------------------------------------------------------------------------

def reference_safetensors():
    import numpy as np
    f32 = (np.arange(45, dtype=np.float32) * np.float32(0.1) - np.float32(2.2)).reshape(9, 5)
    f32[0, 0], f32[0, 1], f32[0, 2] = -0.0, np.inf, np.float32(1e-45)  # sign, inf, denormal
    f32.view(np.uint32)[0, 3] = 0x7FC00001  # a NaN with a payload: copies must keep the bits
    return {
        "model.layers.0.weight": ("F32", f32),
        "model.layers.0.bias64": ("F64", np.array([1 / 3, -1e300, 5e-324, np.pi])),
        "model.ids": ("I64", (np.arange(12, dtype=np.int64) * 10 ** 15 - 3).reshape(3, 2, 2)),
        "model.emb.bf16": ("BF16", (np.arange(18, dtype=np.uint16) * 0x111 + 0x3F80).reshape(6, 3)),
        "model.mask": ("BOOL", np.array([True, False, True, True, False])),
        "model.half": ("F16", np.array([[0.5, -1.25, 65504.0], [6e-8, -0.0, 3.14]], dtype=np.float16)),
        "optim.step": ("F32", np.array(3.5, dtype=np.float32)),  # 0-d
        "small.i8": ("I8", np.array([-128, -1, 0, 127], dtype=np.int8)),
        "small.i16": ("I16", np.array([[-32768, 1], [2, 32767], [-5, 0]], dtype=np.int16)),
        "small.i32": ("I32", np.array([-2 ** 31, -1, 0, 1, 2 ** 31 - 1], dtype=np.int32)),
        "small.u8": ("U8", np.arange(14, dtype=np.uint8).reshape(7, 2) * 18),
        # 2 MiB a rank at 3 ranks: payloads this large start on a 32 KiB boundary (src/save/save_write.c),
        # so torch reads records behind a long padding field
        "model.big": ("F32", (np.arange(1536 * 1024, dtype=np.float32) * np.float32(0.5)).reshape(1536, 1024)),
    }


def compare_safetensors(path, expected, expected_values=None):
    """Problems (strings) between a safetensors file written by the CLI and the expectations."""
    try:
        got, meta = npst.read(path)
    except (OSError, npst.FormatError) as e:
        return [f"{path}: {e}"]
    problems = []
    for name in expected:
        if name not in got:
            problems.append(f"tensor {name} missing")
        elif not npst.same_bits(expected[name], got[name]):
            problems += npst.describe_diff(name, expected[name], got[name])
    problems += [f"unexpected tensor {name}" for name in got if name not in expected]
    for key, want in (expected_values or {}).items():
        if meta is None or key not in meta:
            problems.append(f"__metadata__[{key!r}] missing (have {sorted(meta or {})})")
            continue
        try:
            value = json.loads(meta[key])
        except json.JSONDecodeError as e:
            problems.append(f"__metadata__[{key!r}] = {meta[key]!r} is not JSON: {e}")
            continue
        if not ic.strict_equal(want, value):
            problems.append(f"__metadata__[{key!r}] = {meta[key]!r}, expected JSON of {want!r}")
    return problems


def inspect_chunk_counts(text):
    """{key: CHUNKS column} from `shardckpt inspect`'s table (columns located by the header)."""
    lines = text.splitlines()
    header = next((ln.split() for ln in lines if ln.split()[:1] == ["KEY"] and "CHUNKS" in ln.split()), None)
    if header is None:
        raise Failure(f"no KEY ... CHUNKS header in inspect output:\n{text}")
    col = header.index("CHUNKS")
    counts = {}
    for ln in lines:
        tok = ln.split()
        if len(tok) > col and tok != header and tok[col].isdigit():
            counts[tok[0]] = int(tok[col])
    return counts


# ---------------------------------------------------------------------------------------------
# cases
# ---------------------------------------------------------------------------------------------

class Suite:
    def __init__(self, tmp):
        self.tmp = tmp
        self.passed = self.failed = 0
        self.ref = reference_safetensors()

    def p(self, *parts):
        return os.path.join(self.tmp, *parts)

    def case(self, name, fn):
        only = [w for w in os.environ.get("SCK_INTEROP_ONLY", "").split(",") if w]
        if only and not any(w in name for w in only):
            return True
        t0 = time.monotonic()
        try:
            detail = fn()
            ok = True
        except Failure as e:
            ok, detail = False, str(e)
        except Exception as e:  # a bug in the test itself still counts as a failure
            import traceback
            ok, detail = False, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"
        dt = time.monotonic() - t0
        if ok:
            self.passed += 1
            print(f"ok   {name}  ({dt:.1f}s)")
        else:
            self.failed += 1
            print(f"FAIL {name}  ({dt:.1f}s)")
        if detail and not ok:  # (with -v, run() already echoed every command and its output)
            print("".join(f"     {line}\n" for line in detail.rstrip().splitlines()), end="")
        sys.stdout.flush()
        return ok

    def expect_no_problems(self, problems):
        if problems:
            raise Failure("\n".join(problems))

    # -- torch itself --------------------------------------------------------------------------
    def torch_importable(self):
        out = run([PY, "-c", "import interop_common as ic; ic.ensure_shim(); import torch; "
                   "import torch.distributed._shard.checkpoint as d; d.FileSystemReader; print(torch.__version__)"],
                  "torch's DCP must import under the shim")
        return f"torch {out.strip()}"

    def torch_writes_reference(self):
        from concurrent.futures import ThreadPoolExecutor
        script = os.path.join(HERE, "torch_save_ref.py")
        with ThreadPoolExecutor(2) as pool:  # independent runs, each on its own free port
            jobs = [pool.submit(run, [PY, script, self.p("ckt"), "--single-file-per-rank"]),
                    pool.submit(run, [PY, script, self.p("ckt_items")])]
            for job in jobs:
                job.result()
        return "\n".join(sorted(os.listdir(self.p("ckt"))))

    def shim_selftest(self):
        shutil.copytree(self.p("ckt"), self.p("ckt_2x"))
        run([PY, os.path.join(HERE, "rewrite_metadata_2x.py"), self.p("ckt_2x")])
        return run([PY, os.path.join(HERE, "torch_load_check.py"), self.p("ckt_2x"),
                    self.p("ckt", "expected.safetensors"), "--values", self.p("ckt", "expected_values.json")])

    # -- (a) python safetensors -> shardckpt DCP (3 ranks) -> torch loads on 2 ranks ------------
    def a_convert(self):
        npst.write(self.p("ref.safetensors"), self.ref)
        return run([CLI, "convert", self.p("ref.safetensors"), self.p("ck"), "--to", "dcp", "--ranks", "3"])

    def a_torch_loads(self):
        return run([PY, os.path.join(HERE, "torch_load_check.py"), self.p("ck"), self.p("ref.safetensors")])

    def a_roundtrip(self):
        run([CLI, "convert", self.p("ck"), self.p("ck_back.safetensors"), "--to", "safetensors"])
        self.expect_no_problems(compare_safetensors(self.p("ck_back.safetensors"), self.ref))

    # -- (c) the 2.x pickle under torch + shim ---------------------------------------------------
    def c_metadata(self):
        out = run([PY, os.path.join(HERE, "check_metadata.py"), self.p("ck"), self.p("ref.safetensors"),
                   "--ranks", "3"])
        counts = json.loads(out.split("chunk-counts-json: ", 1)[1].splitlines()[0])
        shown = inspect_chunk_counts(run([CLI, "inspect", "--flat", self.p("ck")]))
        diffs = [f"{k}: .metadata has {n} chunks, inspect says {shown.get(k)}"
                 for k, n in counts.items() if shown.get(k) != n]
        if diffs:
            raise Failure("shardckpt inspect disagrees with the pickle torch reads:\n" + "\n".join(diffs))
        return out

    def c_inspect_ck(self):
        return self.inspect_mentions(self.p("ck"), list(self.ref))

    # -- (b) torch writes (2 ranks) -> shardckpt loads on 1 and 3 ranks --------------------------
    def torch_expected(self, ckdir):
        exp, _ = npst.read(os.path.join(ckdir, "expected.safetensors"))
        return exp, ic.load_json(os.path.join(ckdir, "expected_values.json"))

    def b_to_safetensors(self, src="ckt", out="out1.safetensors"):
        exp, vals = self.torch_expected(self.p("ckt"))
        run([CLI, "convert", self.p(src), self.p(out), "--to", "safetensors"])
        self.expect_no_problems(compare_safetensors(self.p(out), exp, vals))

    def b_reshard_3(self):
        exp, vals = self.torch_expected(self.p("ckt"))
        run([CLI, "convert", self.p("ckt"), self.p("ck3"), "--to", "dcp", "--ranks", "3"])
        run([CLI, "convert", self.p("ck3"), self.p("out3.safetensors"), "--to", "safetensors"])
        self.expect_no_problems(compare_safetensors(self.p("out3.safetensors"), exp, vals))

    def b_torch_loads_resave(self):
        return run([PY, os.path.join(HERE, "torch_load_check.py"), self.p("ck3"),
                    self.p("ckt", "expected.safetensors"), "--values", self.p("ckt", "expected_values.json")])

    def b_metadata_resave(self):
        return run([PY, os.path.join(HERE, "check_metadata.py"), self.p("ck3"),
                    self.p("ckt", "expected.safetensors"), "--ranks", "3",
                    "--values", self.p("ckt", "expected_values.json")])

    def b_fabric_layout(self):
        """torch DCP -> shardckpt's Fabric layout on 3 ranks: torch loads the tensors through DCP (and
        finds no values there) and the values through meta.pt; shardckpt reads both back."""
        exp, vals = self.torch_expected(self.p("ckt"))
        run([CLI, "convert", self.p("ckt"), self.p("ckf"), "--to", "fabric", "--ranks", "3"])
        tensors_only = self.p("ckf_tensors.safetensors")
        npst.write(tensors_only, exp)
        out = run([PY, os.path.join(HERE, "torch_load_check.py"), self.p("ckf"), tensors_only])
        out += run([PY, os.path.join(HERE, "fabric_meta_check.py"), self.p("ckf"), self.p("ckt", "expected_values.json")])
        run([CLI, "verify", self.p("ckf")])
        run([CLI, "convert", self.p("ckf"), self.p("outf.safetensors"), "--to", "safetensors"])
        self.expect_no_problems(compare_safetensors(self.p("outf.safetensors"), exp, vals))
        return out

    # -- (d) inspect ------------------------------------------------------------------------------
    def inspect_mentions(self, ckdir, keys):
        out = run([CLI, "inspect", "--flat", ckdir])
        missing = [k for k in keys if k not in out]
        if missing:
            raise Failure(f"inspect output does not mention {missing}:\n{out}")
        return out

    def d_inspect_ckt(self):
        exp, vals = self.torch_expected(self.p("ckt"))
        return self.inspect_mentions(self.p("ckt"), list(exp) + list(vals))


def main():
    t0 = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="sck-interop-")
    s = Suite(tmp)
    try:
        s.case("torch 1.13 DCP importable (with tests/interop/sitecustomize.py)", s.torch_importable)
        have_torch_ckpt = s.case("torch writes reference checkpoints from 2 ranks (single-file and per-item)",
                                 s.torch_writes_reference)
        if have_torch_ckpt:
            s.case("shim self-test: torch loads its own checkpoint re-pickled with 2.x module paths",
                   s.shim_selftest)
        if s.case("(a) shardckpt convert ref.safetensors -> DCP, 3 ranks", s.a_convert):
            s.case("(a) torch loads shardckpt's DCP on 2 ranks, bit-identical (12 dtypes/shapes, 0-d, NaN, 2 MiB chunks)",
                   s.a_torch_loads)
            s.case("(a) shardckpt DCP -> safetensors round trip is bit-identical", s.a_roundtrip)
            s.case("(c) shardckpt's .metadata unpickles under torch+shim; chunks, storage, planner_data",
                   s.c_metadata)
            s.case("(c) shardckpt inspect of its own DCP names every key", s.c_inspect_ck)
            full_cases.add_cases(s, sys.modules[__name__])
        else:
            for name in ("(a) torch loads", "(a) round trip", "(c) metadata", "(c) inspect"):
                s.case(name + " (not run: convert failed)", lambda: (_ for _ in ()).throw(Failure("skipped")))
        if have_torch_ckpt:
            s.case("(b) shardckpt loads torch's DCP on 1 rank -> safetensors (tensors + step/meta/blob)",
                   s.b_to_safetensors)
            s.case("(b) shardckpt loads torch's per-item-file DCP (1.13 default layout)",
                   lambda: s.b_to_safetensors("ckt_items", "out_items.safetensors"))
            if s.case("(b) torch DCP -> shardckpt DCP on 3 ranks -> safetensors, bit-identical", s.b_reshard_3):
                s.case("(b) torch loads shardckpt's re-save on 2 ranks, incl. non-tensor values",
                       s.b_torch_loads_resave)
                s.case("(b) shardckpt's re-save .metadata + BYTE_IO items checked under torch+shim",
                       s.b_metadata_resave)
            s.case("(b) torch DCP -> shardckpt Fabric layout (meta.pt) on 3 ranks; torch loads DCP + meta.pt, round trip",
                   s.b_fabric_layout)
            s.case("(d) shardckpt inspect of torch's DCP exits 0 and names every key", s.d_inspect_ckt)
            full_cases.add_torch_cases(s, sys.modules[__name__])
            crc_cases.add_torch_cases(s, sys.modules[__name__])
            values_cases.add_cases(s, sys.modules[__name__])
            py_cases.add_cases(s, sys.modules[__name__])
        else:
            s.case("(b)/(d) (not run: torch could not write the reference checkpoint)",
                   lambda: (_ for _ in ()).throw(Failure("skipped")))
        pt_cases.add_cases(s, sys.modules[__name__])
        t26_cases.add_cases(s, sys.modules[__name__])
    finally:
        if os.environ.get("SCK_INTEROP_KEEP"):
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"interop: {time.monotonic() - t0:.1f}s")
    print(f"{s.passed} passed, {s.failed} failed")
    return 1 if s.failed else 0


if __name__ == "__main__":
    sys.exit(main())
