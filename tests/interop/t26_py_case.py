"""torch 2.6 cases of the Python package (run_interop.py's "(t) python" lines).

- (t) python install: the package's wheel, built on the host by `pip wheel --no-build-isolation` (Debian 12's
  setuptools; the chroot has none) with the build's libshardckpt.so bundled, is pip-installed into a
  --target dir by the chroot's pip; libraries the chroot lacks (libisal.so.2) go beside it, found through
  LD_LIBRARY_PATH.
- (t) python reads torch: torch 2.6's own DTensor saves on 1, 3 and 4 ranks are loaded by dcp.load through
  shardckpt.torch.FileSystemReader on 4, 2 and 3 ranks (placements swapped for two), bit for bit, with
  Python's open() barred from `.metadata`; every dtype torch saves (little and big endian) too; one
  process's load of each equals torch's own reader's (little endian: torch's own reader misreads
  big-endian uint16-64 and complex32), and so does Checkpoint.read_tensor.
- (t) python reads shardckpt: the CLI's CRC-32C-carrying re-saves of those (2 and 3 ranks) load the same
  way; so do every dtype's and a safetensors file's tensors (equal to safetensors' load_file); the same DCP
  with one tensor byte flipped is refused with SCK_ERR_CHECKSUM naming the key.
- (t) python writes: dcp.save through shardckpt.torch.FileSystemWriter (sck_save over a torch.distributed comm):
  DTensor saves on 1, 3, 4 ranks load with torch's own reader on 4, 2, 3 ranks (and with shardckpt's) bit for
  bit, every item CRC-32C-checked by `shardckpt verify`; every dtype; an FSDP Module + Adam get_state_dict
  saved on 2 ranks resumes on 2 and 1 ranks exactly; torch's writer and ours (also under dcp.async_save)
  give the same state and .metadata (t26_pywriter.py like-torch); the device path (accelerator tensors
  streamed through sck_device_ops) with CPU tensors standing in, through 1 MiB staging (t26_pywriter.py device); failing saves raise on every rank, none hanging, and leave the
  checkpoint before them (t26_pywriter.py failures).

usage: add_cases(s, ri, in_root) from t26_cases.add_cases.
"""
import glob
import json
import os
import re
import shutil
import subprocess

import py_cases
import t26_cases


def install(ri, w):
    """Installs the package under w (a host path in the chroot); returns py26's env for scripts using it."""
    src = py_cases.copy_package(ri, os.path.join(w, "pyrepo"))
    wheels = os.path.join(w, "wheels")
    ri.run([ri.PY, "-m", "pip", "wheel", "--no-build-isolation", "--no-index", "--no-deps", "--quiet",
            "--disable-pip-version-check", "-w", wheels, src])
    site = os.path.join(w, "site")
    t26_cases.in_chroot(ri, py_cases.PIP_ARGS + [site, "--no-deps"] + glob.glob(os.path.join(wheels, "*.whl")))
    pkg = os.path.join(site, "shardckpt")
    if not os.path.isfile(os.path.join(pkg, "libshardckpt.so")):
        raise ri.Failure(f"the wheel did not bundle libshardckpt.so: {sorted(os.listdir(pkg))}")
    ldd = subprocess.run(["ldd", os.path.join(pkg, "libshardckpt.so")], stdout=subprocess.PIPE, text=True).stdout
    for line in ldd.splitlines():  # "libisal.so.2 => /lib/x86_64-linux-gnu/libisal.so.2 (0x...)"
        parts = line.split()
        if len(parts) >= 3 and parts[1] == "=>" and not any(
                os.path.exists(os.path.join(t26_cases.TRIXIE_ROOT, d, parts[0])) for d in
                ("lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu")):
            shutil.copyfile(os.path.realpath(parts[2]), os.path.join(pkg, parts[0]))
    return [f"SCK_T26_PYSITE={site}", f"LD_LIBRARY_PATH={pkg}"]


def reads_torch(ri, w):
    env = install(ri, w)
    out = ""
    for n_save, n_load, how in ((1, 4, "swap"), (3, 2, "same"), (4, 3, "swap")):
        t = os.path.join(w, f"torch{n_save}")
        out += t26_cases.py26(ri, "t26_dtensor.py", "save", t, str(n_save))
        out += t26_cases.py26(ri, "t26_dtensor.py", "load", t, str(n_load), how, env=env)
        out += t26_cases.py26(ri, "t26_pyreader.py", "same", t, env=env)
    for variant in ("little", "big"):
        t = os.path.join(w, f"dtypes-{variant}")
        big = ["big"] if variant == "big" else []
        out += t26_cases.py26(ri, "t26_dtypes.py", "save", t, *big)
        out += t26_cases.py26(ri, "t26_dtypes.py", "load", t, *big, env=env)
        if not big:  # torch's own reader gets big-endian uint16-64 and complex32 wrong (t26_dtypes.py)
            out += t26_cases.py26(ri, "t26_pyreader.py", "same", t, env=env)
    return out


def reads_shardckpt(ri, w):
    env = install(ri, w)
    t, ours3, ours2 = (os.path.join(w, x) for x in ("torch", "ours3", "ours2"))
    out = t26_cases.py26(ri, "t26_dtensor.py", "save", t, "4")
    ri.run([ri.CLI, "convert", t, ours3, "--to", "dcp", "--ranks", "3"])
    ri.run([ri.CLI, "convert", t, ours2, "--to", "dcp", "--ranks", "2"])
    out += t26_cases.py26(ri, "t26_dtensor.py", "load", ours3, "2", "swap", env=env)
    out += t26_cases.py26(ri, "t26_dtensor.py", "load", ours2, "3", "same", env=env)
    out += t26_cases.py26(ri, "t26_pyreader.py", "same", ours3, env=env)
    d = os.path.join(w, "dtypes")
    out += t26_cases.py26(ri, "t26_dtypes.py", "save", os.path.join(w, "dtypes-torch"))
    ri.run([ri.CLI, "convert", os.path.join(w, "dtypes-torch"), d, "--to", "dcp", "--ranks", "3"])
    out += t26_cases.py26(ri, "t26_dtypes.py", "load", d, env=env)
    flat = os.path.join(w, "flat.safetensors")
    ri.run([ri.CLI, "convert", ours3, flat])
    out += t26_cases.py26(ri, "t26_pyreader.py", "st", flat, env=env)
    bad = os.path.join(w, "bad")
    shutil.copytree(ours3, bad)
    js = json.loads(ri.run([ri.CLI, "inspect", "--json", bad]))
    e = next(e for e in js["entries"] if e["key"] == "model.rows")
    c = e["chunks"][0]
    py_cases.flip_byte(os.path.join(bad, c["file"]), c["offset"] + c["length"] - 8)  # in the payload's last bytes
    return out + t26_cases.py26(ri, "t26_pyreader.py", "refuse", bad, "model.rows", env=env)


def writes(ri, w):
    env = install(ri, w)
    site = next(e.split("=", 1)[1] for e in env if e.startswith("SCK_T26_PYSITE="))
    wenv = ["SCK_T26_WRITER=shardckpt", f"SCK_T26_WRITE_SITE={site}"] + [e for e in env if e.startswith("LD_LIBRARY_PATH=")]
    out = ""
    for n_save, n_load, how in ((1, 4, "swap"), (3, 2, "same"), (4, 3, "swap")):
        d = os.path.join(w, f"ours{n_save}")
        out += t26_cases.py26(ri, "t26_dtensor.py", "save", d, str(n_save), env=wenv)
        out += t26_cases.py26(ri, "t26_dtensor.py", "load", d, str(n_load), how)  # torch's own reader
        out += t26_cases.py26(ri, "t26_dtensor.py", "load", d, str(n_save), "same", env=env)  # shardckpt's
        v = ri.run([ri.CLI, "verify", d])
        m = re.search(r"(\d+) chunks \((\d+) with checksums\)", v)
        if not m or m.group(1) != m.group(2):
            raise ri.Failure(f"{d}: not every item carries a CRC-32C: {v}")
        out += f"{d}: {v.strip()}\n"
    d = os.path.join(w, "dtypes")
    out += t26_cases.py26(ri, "t26_dtypes.py", "save", d, env=wenv)
    out += t26_cases.py26(ri, "t26_dtypes.py", "load", d)
    t = os.path.join(w, "train")
    out += t26_cases.py26(ri, "t26_dtensor.py", "train-save", t, "2", env=wenv)
    for n in ("2", "1"):
        out += t26_cases.py26(ri, "t26_dtensor.py", "resume", t, n, t + ".want.pt")
    out += t26_cases.py26(ri, "t26_pywriter.py", "like-torch", os.path.join(w, "like"), "3", env=wenv)
    out += t26_cases.py26(ri, "t26_pywriter.py", "device", os.path.join(w, "device"), "3", env=wenv)
    return out + t26_cases.py26(ri, "t26_pywriter.py", "failures", os.path.join(w, "fail"), "3", env=wenv)


def add_cases(s, ri, in_root):
    s.case("(t) python: torch 2.6 DTensor saves (1, 3, 4 ranks) and every dtype (little/big endian) -> dcp.load via "
           "shardckpt.torch.FileSystemReader on 4, 2, 3 ranks, bit-identical, .metadata never opened by Python",
           in_root(reads_torch))
    s.case("(t) python: shardckpt's CRC-32C re-saves (3, 2 ranks) -> dcp.load via FileSystemReader on 2, 3 ranks "
           "bit-identical; a flipped tensor byte is refused with SCK_ERR_CHECKSUM naming the key",
           in_root(reads_shardckpt))
    s.case("(t) python: dcp.save via shardckpt.torch.FileSystemWriter (1, 3, 4 ranks; every dtype; FSDP + Adam) -> "
           "torch's own reader loads it bit-identical on 4, 2, 3 ranks and resumes training exactly; same state and "
           ".metadata as torch's writer; failing saves raise on every rank and keep the checkpoint before",
           in_root(writes))
