"""Interop cases for torch.save `.pt` files, registered by run_interop.py.

(f) torch 1.13 torch.save's a nested state dict (several dtypes, a 0-d tensor, a transposed view and
    a row sharing one storage, ints/floats/strings/lists); `shardckpt inspect` names every tensor with
    its dtype and shape and every plain value.  A hostile .pt (a global os.system) is refused with an
    error naming it, and nothing runs.
"""
import os
import re
import zipfile

SAVE = r'''
import collections, sys, torch
base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
sd = {"model": collections.OrderedDict([("w", base), ("wt", base.t()), ("row", base[1]),
      ("h", torch.tensor([1.5, -2.0], dtype=torch.float16)), ("bf", torch.ones(2, 2, dtype=torch.bfloat16)),
      ("ids", torch.arange(5, dtype=torch.int64)), ("mask", torch.tensor([True, False])),
      ("i8", torch.tensor([[-1, 2, 3]], dtype=torch.int8)), ("f64", torch.zeros(2, 1, 3, dtype=torch.float64))]),
      "step": torch.tensor(7), "epoch": 3, "lr": 0.5, "name": "run1", "betas": [0.9, 0.999]}
torch.save(sd, sys.argv[1])
'''

WANT_TENSORS = {
    "model.w": ("float32", "[3, 4]"), "model.wt": ("float32", "[4, 3]"), "model.row": ("float32", "[4]"),
    "model.h": ("float16", "[2]"), "model.bf": ("bfloat16", "[2, 2]"), "model.ids": ("int64", "[5]"),
    "model.mask": ("bool", "[2]"), "model.i8": ("int8", "[1, 3]"), "model.f64": ("float64", "[2, 1, 3]"),
    "step": ("int64", "[]"),
}
WANT_VALUES = {"epoch": "3  (int)", "lr": "0.5  (float)", "name": "'run1'  (str)", "betas.0": "0.9  (float)",
               "betas.1": "0.999  (float)"}


def add_cases(s, ri):
    def inspect_pt():
        pt = s.p("sd.pt")
        ri.run([ri.PY, "-c", SAVE, pt])
        out = ri.run([ri.CLI, "inspect", pt])
        problems = []
        if "torch.save archive" not in out.splitlines()[0]:
            problems.append("the first line does not say it is a torch.save archive")
        got = {}
        for line in out.splitlines()[1:]:
            m = re.match(r"  (\S+)  (\S+) (\[[0-9, ]*\])  ", line)
            if m:
                got[m.group(1)] = (m.group(2), m.group(3))
        if got != WANT_TENSORS:
            problems.append(f"tensors {got}\n  want {WANT_TENSORS}")
        for k, v in WANT_VALUES.items():
            if f"  {k} = {v}" not in out:
                problems.append(f"value {k} = {v} missing")
        if "data/0, offset 4" not in out:
            problems.append("model.row does not show its offset into the storage it shares with model.w")
        s.expect_no_problems(problems)
        return out

    def hostile_pt():
        pt, mark = s.p("evil.pt"), s.p("pwned")
        # a class whose __reduce__ calls os.system, as a malicious checkpoint does
        pkl = (b"\x80\x02cposix\nsystem\nq\x00X" + len(f"touch {mark}").to_bytes(4, "little") +
               f"touch {mark}".encode() + b"q\x01\x85q\x02Rq\x03.")
        with zipfile.ZipFile(pt, "w", zipfile.ZIP_STORED) as z:
            z.writestr("evil/data.pkl", pkl)
            z.writestr("evil/version", "3\n")
        out = ri.run_fail([ri.CLI, "inspect", pt])
        if "posix" not in out or "system" not in out or pt not in out:
            raise ri.Failure(f"the refusal does not name the file and the global:\n{out}")
        if os.path.exists(mark):
            raise ri.Failure("the pickle ran")
        return out

    s.case("(f) inspect of torch 1.13's torch.save .pt: every tensor's dtype and shape, shared storage, values",
           inspect_pt)
    s.case("(f) inspect of a hostile .pt (global posix.system) refuses it by name; nothing runs", hostile_pt)
