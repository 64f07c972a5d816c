"""The Python package (python/) on the host (run_interop.py's "(py)" lines); the torch 2.6 side is in
t26_cases.py ("(t) python").

- (py) install: `pip install --no-build-isolation --no-index --target DIR` of a copy of python/ laid out as
  in the repository (build/libshardckpt.so beside it), which the package bundles and then loads by itself.
- (py) read: py_check.py opens torch 1.13's DCP (one file per rank and one file per item) and shardckpt's
  own 3-rank DCP: entries as `inspect --json`, every tensor and box bit for bit with npst's reading of the
  expected file, into numpy, out= and torch 1.13 tensors; values; verify (CRC-32C of every chunk of ours).
- (py) damaged item: one byte flipped in the middle of a tensor item of shardckpt's DCP: verify() and
  read() raise shardckpt.Error SCK_ERR_CHECKSUM naming the file and the key.
"""
import json
import os
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))


def library(ri):
    path = os.path.join(ri.REPO, os.environ.get("SCK_BUILD", "build"), "libshardckpt.so")
    if not os.path.isfile(path):
        raise ri.Failure(f"{os.path.relpath(path, ri.REPO)} not found (build it with `make lib`)")
    return path


def copy_package(ri, repo_copy):
    """python/ and build/libshardckpt.so copied to repo_copy as the repository lays them out."""
    shutil.copytree(os.path.join(ri.REPO, "python"), os.path.join(repo_copy, "python"),
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    os.makedirs(os.path.join(repo_copy, "build"), exist_ok=True)
    shutil.copyfile(library(ri), os.path.join(repo_copy, "build", "libshardckpt.so"))
    return os.path.join(repo_copy, "python")


PIP_ARGS = ["-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-cache-dir", "--quiet",
            "--disable-pip-version-check", "--target"]


def flip_byte(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x01]))


def add_cases(s, ri):
    site = s.p("pysite")
    check = [ri.PY, os.path.join(HERE, "py_check.py"), site, ri.CLI]

    def install():
        src = copy_package(ri, s.p("pyrepo"))
        out = ri.run([ri.PY] + PIP_ARGS + [site, src])
        where = ri.run([ri.PY, "-c", f"import sys; sys.path.insert(0, {site!r}); import shardckpt, shardckpt._capi as c; "
                        "print(c.LIBRARY_PATH, shardckpt.version())"])
        if not where.startswith(os.path.join(site, "shardckpt", "libshardckpt.so")):
            raise ri.Failure(f"the installed package did not load its bundled library: {where}")
        return out + where

    def read():
        ckt = s.p("ckt")
        exp, vals = os.path.join(ckt, "expected.safetensors"), os.path.join(ckt, "expected_values.json")
        out = ri.run(check + ["read", ckt, exp, vals])
        out += ri.run(check + ["read", s.p("ckt_items"), exp, vals])
        return out + ri.run(check + ["read", s.p("ck"), s.p("ref.safetensors"), "--crc"])

    def damaged():
        bad = s.p("ck_bad")
        shutil.rmtree(bad, ignore_errors=True)
        shutil.copytree(s.p("ck"), bad)
        js = json.loads(ri.run([ri.CLI, "inspect", "--json", bad]))
        e = max((e for e in js["entries"] if e["kind"] == "tensor"), key=lambda e: e["nbytes"])
        c = e["chunks"][0]
        flip_byte(os.path.join(bad, c["file"]), c["offset"] + c["length"] // 2)
        return ri.run(check + ["corrupt", bad, e["key"]])

    if s.case("(py) pip install --no-build-isolation ./python (a copy) into a --target dir; the package loads the "
              "libshardckpt.so it bundled", install):
        s.case("(py) shardckpt.open of torch 1.13's DCP (both layouts) and shardckpt's: entries as inspect --json, "
               "tensors and boxes bit for bit into numpy / out= / torch 1.13, values, verify", read)
        s.case("(py) a flipped byte in a tensor item: verify() and read() raise shardckpt.Error SCK_ERR_CHECKSUM "
               "naming file and key", damaged)
