"""Interop cases for corruption in torch-written DCP checkpoints, registered by run_interop.py.

torch stores no CRC-32C of its own, but every record of every item's zip archive carries a zip CRC-32.
(g) Bit flips in the payload records (data.pkl, data/N) of torch 1.13's checkpoints, in both layouts,
    located through torch's own .metadata: every one is refused by `shardckpt verify` and by a load
    (`convert --to safetensors`), naming the zip CRC-32.
(g) Zeroed 512-byte blocks anywhere in a data file: each is refused by both, or (a block in a header
    field nobody reads) the load is bit-identical and verify passes.  No mutation loads other data: a
    byte item whose zip signature is gone is refused, not taken for raw bytes (torch torch.load()s
    every byte item, and nothing else vouches for raw bytes without a CRC-32C).
Mutations are drawn from a fixed seed so a failure reproduces.
"""
import json
import os
import random
import shutil
import subprocess

N_FLIPS = 120    # per layout
N_ZEROED = 40    # per layout
ZERO_BLOCK = 512


# Run in a child under the shim (tests/interop/sitecustomize.py): torch 1.13's DCP modules do not import
# on Debian 12's Python 3.11 without it.  Prints [[data file, offset, length], ...] as JSON.
FIND_PAYLOADS = r'''
import io, json, os, pickle, sys, zipfile
import interop_common as ic
ic.ensure_shim()
import torch.distributed._shard.checkpoint  # noqa: F401  (the .metadata pickle names its classes)
ckdir = sys.argv[1]
with open(os.path.join(ckdir, ".metadata"), "rb") as f:
    md = pickle.load(f)
out = set()
for info in md.storage_data.values():
    with open(os.path.join(ckdir, info.relative_path), "rb") as f:
        f.seek(info.offset)
        blob = f.read(info.length)
    with zipfile.ZipFile(io.BytesIO(blob)) as z:
        for zi in z.infolist():
            base = zi.filename.split("/", 1)[-1]
            if (base != "data.pkl" and not base.startswith("data/")) or zi.file_size == 0:
                continue
            if zi.compress_type != zipfile.ZIP_STORED:
                continue
            lh = blob[zi.header_offset:zi.header_offset + 30]
            start = zi.header_offset + 30 + int.from_bytes(lh[26:28], "little") + int.from_bytes(lh[28:30], "little")
            out.add((info.relative_path, info.offset + start, zi.file_size))
print(json.dumps(sorted(out)))
'''


def item_payloads(ri, ckdir):
    """[(data file, offset, length)] of every data.pkl / data/N record payload in a torch DCP directory,
    found from torch's .metadata (storage_data: where each item's torch.save archive lies) and each
    archive's own zip directory."""
    return [tuple(x) for x in json.loads(ri.run([ri.PY, "-c", FIND_PAYLOADS, ckdir]).strip().splitlines()[-1])]


def add_torch_cases(s, ri):
    def run_mutated(work, ref_out, what):
        """verify + load of the mutated copy: 'refused' if both refuse (with the reason), 'same' if both
        pass and the load is bit-identical; anything else is a failure."""
        v = subprocess.run([ri.CLI, "verify", work], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        out = work + ".safetensors"
        if os.path.exists(out):
            os.unlink(out)
        c = subprocess.run([ri.CLI, "convert", work, out, "--to", "safetensors"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=60)
        vmsg, cmsg = v.stdout.decode(errors="replace"), c.stdout.decode(errors="replace")
        if v.returncode not in (0, 1) or c.returncode not in (0, 1):
            raise ri.Failure(f"{what}: verify exit {v.returncode}, convert exit {c.returncode} (a crash?)\n{vmsg}{cmsg}")
        if v.returncode == 1 and c.returncode == 1:
            return "refused", vmsg + cmsg
        if v.returncode == 0 and c.returncode == 0:
            with open(out, "rb") as a, open(ref_out, "rb") as b:
                if a.read() == b.read():
                    return "same", ""
            raise ri.Failure(f"{what}: verify and load both pass but the data differs: loaded silently wrong")
        raise ri.Failure(f"{what}: verify exit {v.returncode} but load exit {c.returncode}\n{vmsg}{cmsg}")

    def mutate_layout(name, seed):
        src = s.p(name)
        ref_out = s.p(f"crc_{name}_ref.safetensors")
        ri.run([ri.CLI, "convert", src, ref_out, "--to", "safetensors"])
        ri.run([ri.CLI, "verify", src])
        payloads = item_payloads(ri, src)
        if not payloads:
            raise ri.Failure(f"no data.pkl / data/N records found in {name}")
        rng = random.Random(seed)
        work = s.p(f"crc_{name}_work")
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(src, work)
        counts = {"flip refused": 0, "zeroed refused": 0, "zeroed harmless": 0}
        problems = []

        def patch(fname, off, new):
            p = os.path.join(work, fname)
            with open(p, "r+b") as f:
                f.seek(off)
                old = f.read(len(new))
                f.seek(off)
                f.write(new)
            return old

        for i in range(N_FLIPS):
            fname, off, length = payloads[i % len(payloads)] if i < len(payloads) else rng.choice(payloads)
            at = off + rng.randrange(length)
            with open(os.path.join(work, fname), "rb") as f:
                f.seek(at)
                b = f.read(1)[0]
            old = patch(fname, at, bytes([b ^ (1 << rng.randrange(8))]))
            verdict, msg = run_mutated(work, ref_out, f"{name}: bit flip at {fname}+{at}")
            patch(fname, at, old)
            if verdict != "refused":
                problems.append(f"{name}: a payload bit flip at {fname}+{at} was not refused")
            elif "zip CRC-32" not in msg:
                problems.append(f"{name}: flip at {fname}+{at} refused without naming the zip CRC-32:\n{msg}")
            else:
                counts["flip refused"] += 1
        files = sorted(f for f in os.listdir(work) if f.endswith(".distcp"))
        for i in range(N_ZEROED):
            fname = files[i % len(files)]
            size = os.path.getsize(os.path.join(work, fname))
            at = rng.randrange(max(1, size - ZERO_BLOCK))
            n = min(ZERO_BLOCK, size - at)
            with open(os.path.join(work, fname), "rb") as f:
                f.seek(at)
                if f.read(n) == bytes(n):
                    continue  # already zero: not a mutation
            old = patch(fname, at, bytes(n))
            verdict, _ = run_mutated(work, ref_out, f"{name}: {n} zeroed bytes at {fname}+{at}")
            patch(fname, at, old)
            counts["zeroed " + ("refused" if verdict == "refused" else "harmless")] += 1
        ri.run([ri.CLI, "verify", work])  # every mutation undone: it loads again
        s.expect_no_problems(problems)
        summary = f"{name}: {len(payloads)} payload records; " + ", ".join(f"{k} {v}" for k, v in counts.items())
        print("  " + summary)
        return summary

    s.case("(g) torch DCP (single file per rank): payload bit flips and zeroed blocks never load silently "
           "(zip CRC-32 checked by verify and load)", lambda: mutate_layout("ckt", 32))
    s.case("(g) torch DCP (file per item): payload bit flips and zeroed blocks never load silently",
           lambda: mutate_layout("ckt_items", 33))
