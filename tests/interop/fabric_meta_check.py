"""torch reads a Fabric layout's meta.pt as Lightning Fabric's load does, and compares it.

usage: fabric_meta_check.py CKPT_DIR VALUES.json

torch.load(CKPT_DIR/meta.pt) (what fabric.load reads for a sharded checkpoint's non-tensor entries),
with weights_only=True on torch 2.x (torch 1.13's weights-only unpickler lacks BINFLOAT, which every
pickled float uses, so 1.13 loads it plainly), must give a dict equal to VALUES.json ({key: value},
bytes as {"__bytes__": hex}; types strict, lists and tuples agree).  Exit 0 only if it does.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop_common as ic  # noqa: E402


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    import torch
    path = os.path.join(sys.argv[1], "meta.pt")
    safe = int(torch.__version__.split(".")[0]) >= 2
    got = torch.load(path, weights_only=True) if safe else torch.load(path)
    want = ic.from_json_value(ic.load_json(sys.argv[2]))
    if not isinstance(got, dict) or not ic.strict_equal(got, want):
        print(f"{path}: torch.load gives {got!r}\nexpected {want!r}")
        return 1
    print(f"{path}: torch {torch.__version__} load(weights_only={safe}) gives the {len(got)} expected entries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
