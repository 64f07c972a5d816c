#!/bin/sh
# run_all.sh - the whole test suite behind `make test`:
#   1. C unit/integration tests (optimized build)
#   1b. layout: files by layer, each layer calling only downward (tests/check_layout.py)
#   1c. link: the libraries export only what include/*.h declares; a program with its own write_file, plan_build...
#       links and runs against the static and the shared library (tests/link/run.sh)
#   1d. install: `make install` into a temporary prefix; quickstart.c built out of tree with only pkg-config
#       (C, C++, static) and fsdp_train with shardckpt-mpi; DESTDIR staging; uninstall (tests/install/run.sh)
#   2. the same tests under AddressSanitizer + UndefinedBehaviorSanitizer
#   3. interop with the real PyTorch DCP through the CLI: Debian 12's torch 1.13 and Debian 13's torch 2.6 in a
#      trixie chroot (tests/interop/torch26_root.sh builds it on the first run and reuses it after)
#   4. MPI (tests/mpi/run.sh via `make test-mpi`): save/load on 1..8 ranks under mpirun, error agreement,
#      and the fsdp_train example's resume checks (threads only when MPI is not installed)
# Prints one line per suite and the closing "N passed, N failed" summed over all of them.
set -u
cd "$(dirname "$0")/.." || exit 2
MAKE=${MAKE:-make}
B=${BUILD:-build} # the optimized build `make BUILD=... test` made
PYTHON=${PYTHON:-/usr/bin/python3}
total_pass=0
total_fail=0
status=0
log=$(mktemp)

count() { # $1 = label; reads the runner output in $log
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
    if [ -z "$line" ]; then
        echo "== $1: no summary line (crashed?)"; tail -n 30 "$log"
        total_fail=$((total_fail + 1)); status=1; return
    fi
    p=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/')
    total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
    echo "== $1: $line"
    if [ "$f" != 0 ]; then grep -E '^FAIL|check failed|returned' "$log" | head -n 40; status=1; fi
}

echo "== C tests ($B/)"
"$B"/tests/run_tests > "$log" 2>&1 || status=1
count "C tests"

echo "== layout (tests/check_layout.py: layers call only downward)"
$PYTHON tests/check_layout.py "$B" > "$log" 2>&1 || status=1
count "layout"

echo "== link (tests/link/run.sh: exported symbols, a program's own names never clash)"
$MAKE --no-print-directory BUILD="$B" mpi > "$log" 2>&1 || status=1
sh tests/link/run.sh "$B" > "$log" 2>&1 || status=1
count "link"

echo "== install (tests/install/run.sh: make install, pkg-config builds out of tree, uninstall)"
MAKE="$MAKE" sh tests/install/run.sh "$B" > "$log" 2>&1 || status=1
count "install"

echo "== C tests under ASan+UBSan (build-asan/)"
if $MAKE --no-print-directory test-asan > "$log" 2>&1; then
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 build-asan/tests/run_tests > "$log" 2>&1 || status=1
    count "C tests (ASan+UBSan)"
else
    echo "== ASan build failed"; tail -n 30 "$log"; total_fail=$((total_fail + 1)); status=1
fi

echo "== torch interop (tests/interop: torch 1.13, torch 2.6 in a chroot)"
if ! sh tests/interop/torch26_root.sh > "$log" 2>&1; then
    echo "== the torch 2.6 chroot could not be built"; tail -n 30 "$log"; total_fail=$((total_fail + 1)); status=1
fi
SCK_BUILD=$B $PYTHON tests/interop/run_interop.py > "$log" 2>&1 || status=1
count "torch interop"

echo "== MPI and fsdp_train (tests/mpi)"
$MAKE --no-print-directory BUILD="$B" test-mpi > "$log" 2>&1 || status=1
count "MPI and fsdp_train"

rm -f "$log"
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" = 0 ] && [ "$status" = 0 ]
