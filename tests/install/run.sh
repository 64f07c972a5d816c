#!/bin/sh
# run.sh - `make install` as a user of the installed library sees it (README "Installing"):
#   layout: headers, the static library, the versioned shared library (soname libshardckpt.so.0), the CLI and
#   shardckpt.pc land under PREFIX; DESTDIR stages the same tree elsewhere while the .pc files still name PREFIX;
#   out of tree: examples/quickstart.c, copied away from the repository, builds with only
#   `pkg-config --cflags --libs shardckpt` as C and as C++ (g++), shared and static, and runs;
#   CUDA (when the toolkit is there): tests/cuda/cuda_device.c builds with `pkg-config shardckpt-cuda`;
#   MPI (when built): examples/fsdp_train.c builds with `pkg-config shardckpt-mpi` and trains on 2 ranks, bit for
#   bit what the threads run gives;
#   uninstall: removes every file install put there.
# usage: sh tests/install/run.sh [BUILD_DIR]   (after `make all mpi`); prints "N passed, N failed".
set -u
cd "$(dirname "$0")/../.." || exit 2
B=${1:-build}
MAKE=${MAKE:-make}
. tests/suite_lib.sh
repo=$(pwd)
P=$tmp/prefix
VERSION=$(sed -n 's/^#define SCK_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9][0-9]*\)$/\2/p' include/shardckpt.h | paste -sd. -)
MAJOR=${VERSION%%.*}
HAVE_MPI=
command -v "${MPICC:-mpicc}" >/dev/null 2>&1 && HAVE_MPI=1

if ! $MAKE --no-print-directory BUILD="$B" PREFIX="$P" install > "$tmp/install.log" 2>&1; then
    cat "$tmp/install.log"; bad "make install PREFIX=$P"
    echo "$pass passed, $fail failed"; exit 1
fi

# ---- what lands where (install builds libshardckpt_cuda when the CUDA toolkit is there)
HAVE_CUDA=
[ -f "$B/libshardckpt_cuda.a" ] && HAVE_CUDA=1
missing=
for f in include/shardckpt.h bin/shardckpt lib/libshardckpt.a lib/libshardckpt.so.$VERSION \
         lib/pkgconfig/shardckpt.pc ${HAVE_MPI:+include/shardckpt_mpi.h lib/libshardckpt_mpi.a \
         lib/libshardckpt_mpi.so.$VERSION lib/pkgconfig/shardckpt-mpi.pc} \
         ${HAVE_CUDA:+include/shardckpt_cuda.h lib/libshardckpt_cuda.a lib/libshardckpt_cuda.so.$VERSION \
         lib/pkgconfig/shardckpt-cuda.pc}; do
    [ -f "$P/$f" ] || missing="$missing $f"
done
for l in libshardckpt.so libshardckpt.so.$MAJOR; do
    [ "$(readlink "$P/lib/$l")" = "libshardckpt.so.$VERSION" ] || missing="$missing lib/$l(->libshardckpt.so.$VERSION)"
done
soname=$(readelf -d "$P/lib/libshardckpt.so.$VERSION" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
if [ -n "$missing" ]; then bad "install layout: missing$missing"
elif [ "$soname" != "libshardckpt.so.$MAJOR" ]; then bad "install layout: soname is '$soname', want libshardckpt.so.$MAJOR"
else ok "install layout: headers, libshardckpt.a, libshardckpt.so.$VERSION (soname $soname) and links, CLI, .pc"; fi

v=$("$P/bin/shardckpt" --version 2>&1)
case $v in *"$VERSION"*) ok "installed CLI: $v" ;; *) bad "installed CLI --version says '$v', want $VERSION" ;; esac

# ---- a program built away from the repository with pkg-config only
export PKG_CONFIG_PATH="$P/lib/pkgconfig"
mv=$(pkg-config --modversion shardckpt 2>&1)
[ "$mv" = "$VERSION" ] && ok "pkg-config --modversion shardckpt = $mv" || bad "pkg-config --modversion shardckpt: '$mv'"
mkdir -p "$tmp/user"
cp examples/quickstart.c examples/fsdp_train.c "$tmp/user/"
cd "$tmp/user" || exit 2
want="rank 1: w[7][5] = 47, step = 100"
build_and_run() { # $1 = label, $2 = compiler + flags, rest = link arguments
    label=$1 cc=$2; shift 2
    # shellcheck disable=SC2046
    if ! $cc $(pkg-config --cflags shardckpt) -o "qs_$label" quickstart.c "$@" > "$label.log" 2>&1; then
        cat "$label.log"; bad "quickstart ($label): does not build"; return 1
    fi
    out=$(LD_LIBRARY_PATH= "./qs_$label" "ck_$label" 2>&1)
    if [ "$out" = "$want" ]; then ok "quickstart ($label) builds with pkg-config and runs"
    else bad "quickstart ($label): printed '$out', want '$want'"; return 1; fi
}
# shared: the loader finds libshardckpt.so.0 through the rpath only, as it would through ld.so.conf
build_and_run c "cc -std=c11 -Wall -Wextra -Werror" $(pkg-config --libs shardckpt) -Wl,-rpath,"$P/lib" &&
    { readelf -d qs_c | grep -q "NEEDED.*\[libshardckpt.so.$MAJOR\]" &&
      ok "quickstart (c) records NEEDED libshardckpt.so.$MAJOR" || bad "quickstart (c): no NEEDED libshardckpt.so.$MAJOR"; }
build_and_run c++ "g++ -x c++ -std=c++17 -Wall -Wextra -Werror" $(pkg-config --libs shardckpt) -Wl,-rpath,"$P/lib"
# static: the .pc's private requirements must be all a static link needs
static_libs=$(pkg-config --static --libs shardckpt | sed "s|-lshardckpt|$P/lib/libshardckpt.a|")
build_and_run static "cc -std=c11 -Wall -Wextra -Werror" $static_libs &&
    { readelf -d qs_static | grep -q "libshardckpt" && bad "quickstart (static) still needs the shared library" ||
      ok "quickstart (static) links libshardckpt.a alone with pkg-config --static"; }

if [ -n "$HAVE_MPI" ]; then
    # shellcheck disable=SC2046
    if ! mpicc -DFSDP_WITH_MPI -std=c11 $(pkg-config --cflags shardckpt-mpi) -o fsdp fsdp_train.c \
            $(pkg-config --libs shardckpt-mpi) -Wl,-rpath,"$P/lib" -lm > mpi.log 2>&1; then
        cat mpi.log; bad "fsdp_train (MPI): does not build with pkg-config shardckpt-mpi"
    elif SCK_MPI_TIMEOUT=120 sh "$repo/tests/mpi/mpirun.sh" 2 ./fsdp --data "$repo/examples/data/gpl-3.txt" --steps 20 --dump mpi.bin > mpi.log 2>&1 &&
         ./fsdp --data "$repo/examples/data/gpl-3.txt" --threads 2 --steps 20 --dump thr.bin > thr.log 2>&1 && cmp -s mpi.bin thr.bin; then
        ok "fsdp_train built with pkg-config shardckpt-mpi: 2 MPI ranks match 2 threads bit for bit"
    else
        tail -n 20 mpi.log; bad "fsdp_train (MPI, pkg-config build): run failed or differs from threads"
    fi
fi
if [ -n "$HAVE_CUDA" ]; then
    # built and linked only: running it needs a GPU (tests/cuda/cuda_device.c)
    cp "$repo/tests/cuda/cuda_device.c" .
    # shellcheck disable=SC2046
    if cc -std=c11 -D_GNU_SOURCE $(pkg-config --cflags shardckpt-cuda) -o cuda_device cuda_device.c \
            $(pkg-config --libs shardckpt-cuda) -Wl,-rpath,"$P/lib" -lcudart -L"$(pkg-config --variable=cuda_home shardckpt-cuda)/lib64" \
            > cuda.log 2>&1; then
        ok "tests/cuda/cuda_device.c builds out of tree with pkg-config shardckpt-cuda (not run: needs a GPU)"
    else
        cat cuda.log; bad "cuda_device: does not build with pkg-config shardckpt-cuda"
    fi
fi
cd "$repo" || exit 2

# ---- DESTDIR stages under another root; the .pc still names the final PREFIX
S=$tmp/stage
if $MAKE --no-print-directory BUILD="$B" PREFIX=/opt/shardckpt DESTDIR="$S" install > "$tmp/stage.log" 2>&1 &&
   [ -f "$S/opt/shardckpt/lib/libshardckpt.so.$VERSION" ] && [ -f "$S/opt/shardckpt/include/shardckpt.h" ] &&
   grep -qx "prefix=/opt/shardckpt" "$S/opt/shardckpt/lib/pkgconfig/shardckpt.pc" && ! grep -q "$S" "$S/opt/shardckpt/lib/pkgconfig/shardckpt.pc"; then
    ok "DESTDIR stages under $S/opt/shardckpt; shardckpt.pc says prefix=/opt/shardckpt"
else
    cat "$tmp/stage.log"; bad "make install DESTDIR=... PREFIX=/opt/shardckpt"
fi

# ---- uninstall leaves nothing behind but the directories
$MAKE --no-print-directory BUILD="$B" PREFIX="$P" uninstall > "$tmp/uninstall.log" 2>&1
left=$(find "$P" ! -type d | sed "s|^$P/||" | tr '\n' ' ')
[ -z "$left" ] && ok "make uninstall removes every installed file" || bad "make uninstall left: $left"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
