"""Layout checks (docs/DESIGN.md, "Layout"), run by `make test`: the library's layers call only downward.

usage: python3 tests/check_layout.py BUILD       (BUILD: the build directory holding obj/lib/)

- every file under src/ starts with a comment "/* <its name> - <its one job>";
- no source file over 800 lines in src/ and tools/ (900 in tests/, fuzz/, bench/, examples/);
- #include "layer/x.h" in src/<layer>/ only names its own layer or one below it (LAYERS);
- tools/ (the CLI) includes only the public headers (include/*.h, the advanced tier among them), its own
  tools/*.h and system headers: it is built from the API any program gets, never from src/ (checked
  against a bad example first, so that a rule that stopped matching fails);
- between the library's object files, no call cycle and no call from a layer to one above it
  (read from `nm`: which file defines each symbol another file uses).
Prints "ok   name" / "FAIL name" per check and "N passed, N failed".
"""
import collections
import glob
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# layer -> the layers it may use (itself included)
LAYERS = {
    "base": {"base"},
    "io": {"base", "io"},
    "comm": {"base", "comm"},
    "format": {"base", "io", "format"},
    "core": {"base", "io", "format", "core"},
    "save": {"base", "io", "comm", "format", "core", "save"},
    "load": {"base", "io", "comm", "format", "core", "load"},
}


def rel(p):
    return os.path.relpath(p, REPO)


def check_top_comments():
    bad = []
    for f in sorted(glob.glob(os.path.join(REPO, "src", "*", "*.[ch]"))):
        with open(f) as fh:
            first = fh.readline()
        if not first.startswith(f"/* {os.path.basename(f)} - "):
            bad.append(rel(f))
    return bad


def check_sizes():
    bad = []
    for pat, cap in (("src/*/*.[ch]", 800), ("tools/*.[ch]", 800), ("tests/*.[ch]", 900), ("tests/*/*.[ch]", 900),
                     ("fuzz/*.c", 900), ("bench/*.c", 900), ("examples/*.c", 900)):
        for f in glob.glob(os.path.join(REPO, pat)):
            with open(f) as fh:
                n = sum(1 for _ in fh)
            if n > cap:
                bad.append(f"{rel(f)}: {n} lines (at most {cap})")
    return bad


def check_includes():
    bad = []
    layers = set()
    for f in sorted(glob.glob(os.path.join(REPO, "src", "*", "*.[ch]"))):
        layer = os.path.basename(os.path.dirname(f))
        layers.add(layer)
        if layer not in LAYERS:
            bad.append(f"{rel(f)}: layer {layer!r} is not in check_layout.py's LAYERS")
            continue
        with open(f) as fh:
            for n, line in enumerate(fh, 1):
                m = re.match(r'#include "([a-z_]+)/', line)
                if m and m.group(1) not in LAYERS[layer]:
                    bad.append(f"{rel(f)}:{n}: {layer}/ includes {m.group(1)}/")
    return bad


def tools_include_problems(files):
    """files: (name, text) pairs of tools/ sources; returns one line per quoted include that is not a
    public header (include/*.h) or a tools/*.h of its own."""
    public = {os.path.basename(h) for h in glob.glob(os.path.join(REPO, "include", "*.h"))}
    own = {os.path.basename(h) for h in glob.glob(os.path.join(REPO, "tools", "*.h"))}
    bad = []
    for name, text in files:
        for n, line in enumerate(text.splitlines(), 1):
            m = re.match(r'\s*#\s*include\s*"([^"]+)"', line)
            if m and m.group(1) not in public | own:
                bad.append(f"{name}:{n}: includes \"{m.group(1)}\" (tools/ may include only include/*.h, tools/*.h "
                           "and system headers)")
    return bad


def check_tools_includes():
    example = [("example.c", '#include <stdio.h>\n#include "shardckpt.h"\n#include "base/util.h"\n'
                             '#include "cli.h"\n#  include "format/st_out.h"\n')]
    caught = tools_include_problems(example)
    if [b.split(":")[1] for b in caught] != ["3", "5"]:
        return [f"self-check: the bad example's includes of src/ headers were not both caught ({caught})"]
    files = []
    for f in sorted(glob.glob(os.path.join(REPO, "tools", "*.[ch]"))):
        with open(f) as fh:
            files.append((rel(f), fh.read()))
    return tools_include_problems(files)


def call_graph(build):
    objs = glob.glob(os.path.join(build, "obj", "lib", "*", "*.o"))
    srcs = {os.path.splitext(os.path.relpath(f, os.path.join(REPO, "src")))[0]
            for f in glob.glob(os.path.join(REPO, "src", "*", "*.c"))} - {"comm/comm_mpi"}  # its own library
    defs, uses = {}, collections.defaultdict(set)
    for o in objs:
        name = os.path.splitext(os.path.relpath(o, os.path.join(build, "obj", "lib")))[0]
        if name not in srcs:
            continue  # a stale object of a file that no longer exists
        out = subprocess.run(["nm", o], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            p = line.split()
            if len(p) == 3 and p[1] in "TDBR":
                defs[p[2]] = name
            elif len(p) == 2 and p[0] == "U":
                uses[name].add(p[1])
    g = collections.defaultdict(set)
    for f, us in uses.items():
        for u in us:
            if u in defs and defs[u] != f:
                g[f].add(defs[u])
    return g, len(srcs & {os.path.splitext(os.path.relpath(o, os.path.join(build, "obj", "lib")))[0] for o in objs}), len(srcs)


def cycles(g):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(set(g) | {w for ws in g.values() for w in ws}):
        if v not in index:
            visit(v)
    return out


def check_calls(build):
    g, have, want = call_graph(build)
    if have < want:
        return [f"{want - have} of {want} library files have no object under {build}/obj/lib (build first)"]
    bad = [f"call cycle between {', '.join(c)}" for c in cycles(g)]
    for f, ts in sorted(g.items()):
        for t in sorted(ts):
            lf, lt = f.split("/")[0], t.split("/")[0]
            if lt not in LAYERS.get(lf, set()):
                bad.append(f"{f} calls {t}: {lf}/ may not use {lt}/")
    return bad


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    build = build if os.path.isabs(build) else os.path.join(REPO, build)
    sys.setrecursionlimit(10000)
    checks = [("every src/ file says its job in a top comment", check_top_comments),
              ("no source file over 800 lines (900 in tests)", check_sizes),
              ("src/<layer>/ includes only its own and lower layers", check_includes),
              ("tools/ includes only public headers, its own and system ones", check_tools_includes),
              ("no call cycle between library files, no call to a higher layer", lambda: check_calls(build))]
    passed = failed = 0
    for name, fn in checks:
        bad = fn()
        if bad:
            failed += 1
            print(f"FAIL {name}")
            for b in bad:
                print(f"     {b}")
        else:
            passed += 1
            print(f"ok   {name}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
