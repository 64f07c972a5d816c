#!/bin/sh
# mpirun.sh NP PROGRAM [ARGS...] - runs PROGRAM on NP MPI ranks on this machine, never for longer than
# $SCK_MPI_TIMEOUT seconds (default 120): a hung collective becomes a failure (exit 124), not a stuck test.
# Open MPI needs --oversubscribe for more ranks than cores and --allow-run-as-root as root (CI);
# MPICH's mpirun accepts neither and needs neither.
np=$1
shift
flags=
if mpirun --version 2>/dev/null | grep -q "Open MPI"; then
    flags="--oversubscribe --allow-run-as-root"
    # Shared-memory transport only: the tests run on one machine and need no network.
    export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
fi
exec timeout -k 5 "${SCK_MPI_TIMEOUT:-120}" mpirun $flags -np "$np" "$@"
