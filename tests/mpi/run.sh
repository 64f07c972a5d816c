#!/bin/sh
# run.sh BUILD - the MPI suite (make test-mpi, run by tests/run_all.sh).  With SCK_MPI=1 (MPI was built):
#   - mpi_ckpt under mpirun: the backend's collectives; save on N ranks and load on M ranks for every pair of
#     N, M in {1, 2, 3, 4, 8}, checked byte for byte; the same with messages split small; error agreement
#     with a failure injected on one rank, on 1, 2, 3, 4 and 8 ranks;
#   - fsdp_train under mpirun: resume on the same rank count is bit-identical to an uninterrupted run,
#     resume on other counts matches within float tolerance, and MPI and threads runs are identical.
# Always: fsdp_train's threads runs (the same resume checks), and some runs again under ASan+UBSan when
# SCK_ASAN_BUILD names a sanitizer build.  Every mpirun is bounded by a timeout,
# so a hang is a failure.  Prints one line per test and "N passed, N failed" last.
set -u
B=${1:-build}
MPI=${SCK_MPI:-0}
RUN="sh tests/mpi/mpirun.sh"
TRAIN=$B/examples/fsdp_train
DIFF=$B/tests/f32_diff
TOL=1e-4   # resumed on another rank count: gradient sums regroup; measured max |diff| ~2.4e-7 after 150 steps
pass=0
fail=0
tmp=$(mktemp -d)
log=$tmp/log
trap 'rm -rf "$tmp"' EXIT

ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; tail -n 25 "$log"; }

# A program that prints its own "N passed, N failed": add its counts (no summary = one failure).
suite() { # label, command...
    label=$1
    shift
    "$@" > "$log" 2>&1
    rc=$?
    grep -E '^(ok|FAIL) ' "$log"
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
    if [ -z "$line" ]; then
        bad "$label: no summary (exit $rc$([ $rc = 124 ] && echo ', timed out: a hang'))"
        return
    fi
    p=${line%% passed*}
    f=${line#* passed, }
    f=${f%% failed*}
    pass=$((pass + p))
    fail=$((fail + f))
    if [ "$f" != 0 ] || [ $rc != 0 ]; then
        [ "$f" = 0 ] && fail=$((fail + 1))
        echo "FAIL $label (exit $rc)"
        grep -vE '^(ok|FAIL) ' "$log" | head -n 30
    fi
}

# One command that must succeed: a test of its own.
check() { # label, command...
    label=$1
    shift
    if "$@" > "$log" 2>&1; then ok "$label"; else bad "$label (exit $?)"; fi
}

SIZES="1 2 3 4 8"
if [ "$MPI" = 1 ]; then
    suite "backend collectives, np 3" $RUN 3 $B/tests/mpi/mpi_ckpt comm
    suite "backend collectives, np 8" $RUN 8 $B/tests/mpi/mpi_ckpt comm
    dirs=
    for n in $SIZES; do
        suite "save on $n" $RUN "$n" $B/tests/mpi/mpi_ckpt save "$tmp/ckpt$n"
        dirs="$dirs $tmp/ckpt$n"
    done
    for m in $SIZES; do
        suite "load on $m" $RUN "$m" $B/tests/mpi/mpi_ckpt load $dirs
    done
    suite "save on 3, messages of at most 50 bytes" $RUN 3 $B/tests/mpi/mpi_ckpt save "$tmp/split3" 50
    suite "load on 4, messages of at most 50 bytes" $RUN 4 $B/tests/mpi/mpi_ckpt load "$tmp/split3" "$tmp/ckpt8" 50
    for n in $SIZES; do
        suite "error agreement on $n" $RUN "$n" $B/tests/mpi/mpi_ckpt errors "$tmp/err$n"
    done
    for n in 1 3; do
        suite "Fabric layout and entry paths on $n" $RUN "$n" $B/tests/mpi/mpi_ckpt fabric "$tmp/fabric$n"
    done
fi

# MPICH, when installed beside Open MPI: the backend, the tests and fsdp_train build with its wrapper
# (a build dir of its own) and run under its mpirun.
if [ "$MPI" = 1 ] && command -v mpicc.mpich >/dev/null 2>&1 && command -v mpirun.mpich >/dev/null 2>&1; then
    MB=$B-mpich
    if env -u MAKEFLAGS -u MFLAGS make --no-print-directory -j2 BUILD="$MB" MPICC=mpicc.mpich \
        mpi "$MB/tests/mpi/mpi_ckpt" "$MB/examples/fsdp_train" > "$log" 2>&1; then
        ok "builds with MPICH (mpicc.mpich)"
        suite "MPICH: backend collectives, np 3" timeout 120 mpirun.mpich -np 3 "$MB/tests/mpi/mpi_ckpt" comm
        suite "MPICH: error agreement, np 3" timeout 120 mpirun.mpich -np 3 "$MB/tests/mpi/mpi_ckpt" errors "$tmp/mpich_err"
        check "MPICH: fsdp_train on 2 ranks is bit-identical to 2 threads" sh -c \
            "timeout 120 mpirun.mpich -np 2 $MB/examples/fsdp_train --steps 20 --dump $tmp/mpich.bin > /dev/null &&
             $TRAIN --threads 2 --steps 20 --dump $tmp/thr.bin > /dev/null && cmp $tmp/mpich.bin $tmp/thr.bin"
    else
        bad "builds with MPICH (mpicc.mpich)"
    fi
fi

# fsdp_train: 40 steps uninterrupted vs. stopped at 20 and resumed.  Dumps hold params + both Adam moments.
T="--steps 40 --log-every 10"
threads() { np=$1; shift; "$TRAIN" --threads "$np" $T "$@"; }
if [ "$MPI" = 1 ]; then
    launch() { np=$1; shift; $RUN "$np" "$TRAIN" $T "$@"; }
    how=mpirun
else
    launch() { threads "$@"; }
    how=threads
fi
resumed_same() { # launcher, ranks, checkpoint, reference dump
    $1 "$2" --resume "$3" --dump "$tmp/r.bin" && cmp "$4" "$tmp/r.bin"
}
resumed_close() { # launcher, ranks, checkpoint, reference dump
    $1 "$2" --resume "$3" --dump "$tmp/r.bin" && $DIFF "$4" "$tmp/r.bin" $TOL
}
refused() {
    ! threads 1 --batch 16 --resume "$tmp/run2/step-000020" 2> "$tmp/err" && grep -q 'does not match' "$tmp/err"
}

check "fsdp_train ($how, 2 ranks): 40 steps, checkpoints at 20 and 40" \
    launch 2 --save-every 20 --ckpt-dir "$tmp/run2" --dump "$tmp/full2.bin"
check "fsdp_train ($how): resumed at 20 on 2 ranks is bit-identical" resumed_same launch 2 "$tmp/run2/step-000020" "$tmp/full2.bin"
check "fsdp_train ($how): resumed at 20 on 3 ranks matches within $TOL" resumed_close launch 3 "$tmp/run2/step-000020" "$tmp/full2.bin"
check "fsdp_train ($how): resumed at 20 on 8 ranks matches within $TOL" resumed_close launch 8 "$tmp/run2/step-000020" "$tmp/full2.bin"
check "fsdp_train (threads): resumed at 20 on 2 threads is bit-identical to the $how run" \
    resumed_same threads 2 "$tmp/run2/step-000020" "$tmp/full2.bin"
check "fsdp_train (threads, 3 ranks): 40 steps, checkpoint at 20" threads 3 --save-every 20 --ckpt-dir "$tmp/run3" --dump "$tmp/full3.bin"
check "fsdp_train (threads): resumed at 20 on 3 threads is bit-identical" resumed_same threads 3 "$tmp/run3/step-000020" "$tmp/full3.bin"
check "fsdp_train ($how): resumed at 20 on 1 rank matches within $TOL" resumed_close launch 1 "$tmp/run3/step-000020" "$tmp/full3.bin"
check "fsdp_train: a checkpoint of another model config is refused" refused

# The same code under ASan+UBSan (SCK_ASAN_BUILD: a build dir made with the sanitizers).  Leak checks for the
# threads runs only: Open MPI's own allocations are still live at exit.
A=${SCK_ASAN_BUILD:-}
if [ -n "$A" ] && [ -x "$A/examples/fsdp_train" ]; then
    export UBSAN_OPTIONS=print_stacktrace=1
    asan_resume() {
        ASAN_OPTIONS=detect_leaks=1 "$A/examples/fsdp_train" --threads 3 --steps 20 --save-every 10 --ckpt-dir "$tmp/asan" \
            --dump "$tmp/asan_full.bin" &&
        ASAN_OPTIONS=detect_leaks=1 "$A/examples/fsdp_train" --threads 2 --steps 20 --resume "$tmp/asan/step-000010" \
            --dump "$tmp/asan_res.bin" && $DIFF "$tmp/asan_full.bin" "$tmp/asan_res.bin" $TOL
    }
    check "ASan+UBSan: fsdp_train on 3 threads, resumed on 2" asan_resume
    if [ "$MPI" = 1 ] && [ -x "$A/tests/mpi/mpi_ckpt" ]; then
        export ASAN_OPTIONS=detect_leaks=0
        suite "ASan+UBSan: backend collectives, np 3" $RUN 3 "$A/tests/mpi/mpi_ckpt" comm
        suite "ASan+UBSan: save on 3" $RUN 3 "$A/tests/mpi/mpi_ckpt" save "$tmp/asan3" 50
        suite "ASan+UBSan: load on 2" $RUN 2 "$A/tests/mpi/mpi_ckpt" load "$tmp/asan3" "$tmp/ckpt8"
        suite "ASan+UBSan: error agreement, np 3" $RUN 3 "$A/tests/mpi/mpi_ckpt" errors "$tmp/asan_err"
        check "ASan+UBSan: fsdp_train under mpirun, resumed on 2 ranks" sh -c \
            "$RUN 2 $A/examples/fsdp_train --steps 20 --resume $tmp/asan/step-000010 --dump $tmp/asan_mpi.bin > /dev/null &&
             cmp $tmp/asan_res.bin $tmp/asan_mpi.bin"
        unset ASAN_OPTIONS
    fi
fi

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
