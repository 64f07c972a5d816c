#!/bin/sh
# fsdp_demo.sh BUILD - `make demo`: trains examples/fsdp_train.c (a character-level model, parameters and Adam
# moments flat-sharded ZeRO-3 style) on 2 ranks with a checkpoint every 150 steps, resumes from the step-300
# checkpoint on 3 ranks (resharding on load), and inspects the final checkpoint with the CLI.
# Ranks are MPI processes (mpirun) when MPI was built (SCK_MPI=1) and mpirun exists, else threads.
set -eu
B=${1:-build}
out=$B/fsdp_demo
rm -rf "$out"
if [ "${SCK_MPI:-0}" = 1 ] && command -v mpirun >/dev/null 2>&1; then
    ranks() { np=$1; shift; sh tests/mpi/mpirun.sh "$np" "$B/examples/fsdp_train" "$@"; }
else
    ranks() { np=$1; shift; "$B/examples/fsdp_train" --threads "$np" "$@"; }
fi
common="--log-every 25 --save-every 150 --ckpt-dir $out"

echo "== 1. train steps 1..300 on 2 ranks (loss = mean over the last 25 steps; ln 96 = 4.56 is chance)"
ranks 2 --steps 300 $common
echo
echo "== 2. resume from $out/step-000300 on 3 ranks, train to step 600"
ranks 3 --steps 600 --resume "$out/step-000300" $common
echo
echo "== 3. shardckpt inspect $out/step-000600"
"$B/bin/shardckpt" inspect "$out/step-000600"
