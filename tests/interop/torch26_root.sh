#!/bin/sh
# torch26_root.sh - makes the torch 2.6 the interop tests run against ready: a Debian 13 (trixie) chroot
# with Debian's python3-torch 2.6, python3-safetensors and python3-numpy, built with debootstrap from
# Debian's own archive (Debian 12 ships torch 1.13 only).  Cached: a root where torch 2.6 imports is used
# as it is, so only the first run on a machine pays for it (about 4 minutes, 4 GB).
#
# usage: sh tests/interop/torch26_root.sh        prints the root's path last; exit 0 when torch 2.6 imports
#   TRIXIE_ROOT  where the root lives (default /var/cache/shardckpt/trixie-root)
# Needs root and the debootstrap package.  Safe to run again and from several processes at once (a lock
# serializes them); mounts /proc, /dev and /dev/shm inside the root once.
set -eu
ROOT=${TRIXIE_ROOT:-/var/cache/shardckpt/trixie-root}
PKGS="python3-torch python3-safetensors python3-numpy"
mkdir -p "$(dirname "$ROOT")"
exec 9>"$ROOT.lock"
flock 9

mounted() { grep -q " $1 " /proc/mounts; }
mount_all() {
    mounted "$ROOT/proc" || mount -t proc proc "$ROOT/proc"
    mounted "$ROOT/dev" || mount --bind /dev "$ROOT/dev"
    mounted "$ROOT/dev/shm" || mount -t tmpfs tmpfs "$ROOT/dev/shm"
}
ready() {
    [ -x "$ROOT/usr/bin/python3" ] &&
        chroot "$ROOT" env -i PATH=/usr/bin:/bin HOME=/root python3 -c \
            'import torch, safetensors, numpy; assert torch.__version__.startswith("2.6"), torch.__version__' 2>/dev/null
}

if [ -x "$ROOT/usr/bin/python3" ]; then mount_all; fi
if ready; then echo "$ROOT"; exit 0; fi

command -v debootstrap >/dev/null 2>&1 || { echo "torch26_root.sh: debootstrap is not installed (apt-get install -y debootstrap)" >&2; exit 1; }
if [ ! -x "$ROOT/usr/bin/apt-get" ]; then
    # a half-made root (an interrupted run) is started again from nothing
    for m in dev/shm dev proc; do if mounted "$ROOT/$m"; then umount "$ROOT/$m"; fi; done
    rm -rf "$ROOT"
    echo "torch26_root.sh: debootstrap trixie into $ROOT" >&2
    debootstrap --variant=minbase trixie "$ROOT" >"$ROOT.debootstrap.log" 2>&1 ||
        { tail -n 20 "$ROOT.debootstrap.log" >&2; echo "torch26_root.sh: debootstrap failed" >&2; exit 1; }
fi
mount_all
echo "torch26_root.sh: apt-get install $PKGS in $ROOT" >&2
chroot "$ROOT" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq $PKGS >"$ROOT.apt.log" 2>&1 ||
    { tail -n 20 "$ROOT.apt.log" >&2; echo "torch26_root.sh: apt-get in the chroot failed" >&2; exit 1; }
ready || { echo "torch26_root.sh: torch 2.6 does not import in $ROOT" >&2; exit 1; }
echo "$ROOT"
