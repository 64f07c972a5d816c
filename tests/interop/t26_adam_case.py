"""torch 2.6 interop case: a C program resumes torch-saved Adam state (run_interop.py's "(t)" lines).

- (t) Adam resume: t26_adam.py trains a Linear + Adam 3 steps in torch 2.6 and saves it with get_state_dict
  and dcp.save, with the next 2 batches; the C trainer tests/interop/t26_adam.c loads it as flat ranges on 3
  thread ranks and on 2, runs those 2 Adam steps and saves under torch's keys and paths, sharded the same
  way; shardckpt verifies each output, and torch's dcp.load + set_state_dict restores it: the parameters and
  Adam moments equal the uninterrupted torch run within float rounding (the C program sums in another
  order), the step counters exactly.  make builds the C program as BUILD/tests/t26_adam (SCK_BUILD names
  BUILD, as for the CLI).

usage: adam_resume(ri, w), w a scratch directory under the chroot's /tmp (a host path); returns the output.
"""
import json
import os

import t26_cases


def trainer(ri):
    """The C trainer's path, as make builds it for the CLI's build directory."""
    path = os.path.join(ri.REPO, os.environ.get("SCK_BUILD", "build"), "tests", "t26_adam")
    if not os.access(path, os.X_OK):
        raise ri.Failure(f"{os.path.relpath(path, ri.REPO)} not found or not executable "
                         f"(build it with `make {os.path.relpath(path, ri.REPO)}`)")
    return path


def check_sharded(ri, d, n):
    """Each parameter and moment of d lies in n ranks' files (flat ranges), each step counter in one."""
    js = json.loads(ri.run([ri.CLI, "inspect", "--json", d]))
    tensors = {e["key"]: {c["file"] for c in e["chunks"]} for e in js["entries"] if e["kind"] == "tensor"}
    bad = {k: sorted(f) for k, f in tensors.items() if len(f) != (1 if k.endswith(".step") else n)}
    if len(tensors) != 8 or bad:
        raise ri.Failure(f"{d}: {len(tensors)} tensors (want 8), not sharded over {n} ranks as flat ranges: {bad}")


def adam_resume(ri, w):
    src = os.path.join(w, "torch")
    want = src + ".want.pt"
    out = t26_cases.py26(ri, "t26_adam.py", "save", src)
    c = trainer(ri)
    for n in ("3", "2"):
        d = os.path.join(w, "c" + n)
        out += ri.run([c, src, d, n])
        ri.run([ri.CLI, "verify", d])
        check_sharded(ri, d, int(n))
        out += t26_cases.py26(ri, "t26_adam.py", "check", d, want)
    return out
