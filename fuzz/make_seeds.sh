#!/bin/sh
# make_seeds.sh - rebuilds the committed seed corpora (fuzz/corpus/NAME) from real files:
#   a checkpoint saved by shardckpt (examples/quickstart, 4 ranks) and, when torch is there, one saved
#   by torch's DCP (tests/interop/torch_save_ref.py, 2 ranks); their .metadata and data.pkl pickles,
#   single torch.save items (zip), and safetensors files written by `shardckpt convert`.
# usage: sh fuzz/make_seeds.sh [BUILD_DIR]     (needs BUILD_DIR/bin/shardckpt and BUILD_DIR/examples/quickstart)
set -eu
cd "$(dirname "$0")/.."
B=${1:-build}
PY=${PYTHON:-/usr/bin/python3}
make --no-print-directory BUILD="$B" cli "$B/examples/quickstart" >/dev/null
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
"$B/examples/quickstart" "$w/ours" >/dev/null
"$B/bin/shardckpt" convert "$w/ours" "$w/ours.safetensors" --to safetensors >/dev/null
if PYTHONPATH=tests/interop "$PY" tests/interop/torch_save_ref.py "$w/torch" --single-file-per-rank >/dev/null 2>&1; then
    "$B/bin/shardckpt" convert "$w/torch" "$w/torch.safetensors" --to safetensors >/dev/null
fi
# fuzz/corpus/meta_wire (models, not files) is made from the pickle seeds' .metadata by dcp_meta_decode and
# meta_wire_encode, remade when the model layout changes: kept.  fuzz/corpus/pickle/torch26.metadata is a
# torch 2.6 save of an nn.Module and Adam (full planner_data paths), made in the torch 2.6 chroot: kept.
find fuzz/corpus/pickle -type f ! -name torch26.metadata -delete 2>/dev/null || true
rm -rf fuzz/corpus/ckpt fuzz/corpus/zip fuzz/corpus/safetensors
mkdir -p fuzz/corpus/ckpt fuzz/corpus/pickle fuzz/corpus/zip fuzz/corpus/safetensors
"$PY" - "$w" <<'PYEOF'
import glob, io, os, struct, sys, zipfile
w = sys.argv[1]
out = "fuzz/corpus"
def put(kind, name, data):
    with open(os.path.join(out, kind, name), "wb") as f:
        f.write(data)
def items(blob):
    """torch.save archives inside a data file: each starts with a zip local header."""
    starts = [i for i in range(len(blob)) if blob.startswith(b"PK\x03\x04", i)]
    res, i = [], 0
    for s in starts:
        if s < i:
            continue
        e = blob.find(b"PK\x05\x06", s)
        if e < 0:
            break
        end = e + 22 + struct.unpack_from("<H", blob, e + 20)[0]
        res.append(blob[s:end]); i = end
    return res
for src in ("ours", "torch"):
    d = os.path.join(w, src)
    if not os.path.isdir(d):
        continue
    meta = open(os.path.join(d, ".metadata"), "rb").read()
    files = sorted(glob.glob(os.path.join(d, "__*_0.distcp")))
    put("ckpt", src + ".bin", b"SCKFUZZ/".join([meta] + [open(f, "rb").read() for f in files]))
    put("pickle", src + ".metadata", meta)
    seen = 0
    for f in files:
        for k, it in enumerate(items(open(f, "rb").read())):
            if seen < 4:
                put("zip", "%s_%s_%d.zip" % (src, os.path.basename(f)[:-7], k), it)
                z = zipfile.ZipFile(io.BytesIO(it))
                pk = [n for n in z.namelist() if n.endswith("/data.pkl")]
                if pk:
                    put("pickle", "%s_%d.pkl" % (src, seen), z.read(pk[0]))
            seen += 1
for src in ("ours", "torch"):
    f = os.path.join(w, src + ".safetensors")
    if os.path.exists(f):
        put("safetensors", src + ".safetensors", open(f, "rb").read())
PYEOF
du -sh fuzz/corpus; ls fuzz/corpus/*
