/*
 * shardckpt_mpi.h - the MPI communicator for shardckpt (library libshardckpt_mpi, link it
 *                    before libshardckpt: `-lshardckpt_mpi -lshardckpt`).
 *
 * The core library does not depend on MPI; only programs that include this header and
 * link libshardckpt_mpi do.  Builds with Open MPI and MPICH.
 *
 *     MPI_Init(&argc, &argv);
 *     sck_comm *comm = sck_comm_mpi(MPI_COMM_WORLD);
 *     ... sck_save(comm, dir, st, NULL); sck_load(comm, dir, st, NULL); ...
 *     sck_comm_free(comm);                  // before MPI_Finalize
 *     MPI_Finalize();
 *
 * How failures behave
 * -------------------
 * The communicator works on its own duplicate of `c` (MPI_Comm_dup), with the error
 * handler MPI_ERRORS_RETURN, so shardckpt's messages never match the caller's and an MPI
 * failure becomes SCK_ERR_COMM carrying MPI's error string instead of aborting the job.
 * Each operation agrees across ranks on whether its buffers could be allocated, so a rank
 * out of memory fails the operation on every rank rather than stranding its peers.
 * Failures that MPI reports on some ranks only (a dead peer, a broken network) are
 * outside that guarantee: MPI itself gives no way to agree on them.
 *
 * Message sizes
 * -------------
 * MPI counts are `int`.  Transfers larger than the message limit (INT_MAX bytes unless
 * sck_comm_mpi_chunked says otherwise) are split into several collectives, so totals
 * above 2 GiB work; an all-gather split that way stages each round in a buffer of at most
 * the limit.
 *
 * Cost: each all-gather is three collectives (sizes, allocation agreement, data), each
 * broadcast three (size, allocation agreement, data); sck_save makes three all-gathers.
 */
#ifndef SHARDCKPT_MPI_H
#define SHARDCKPT_MPI_H

#include <mpi.h>
#include <stddef.h>

#include "shardckpt.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Collective over `c`: a shardckpt communicator of the same ranks, working on a
 *  duplicate of `c` (freed by sck_comm_free, which must be called before MPI_Finalize;
 *  after it, the duplicate is left to MPI).  MPI must be initialized.  The caller keeps
 *  ownership of `c`.  Returns the new communicator, owned by the caller, or NULL with
 *  the reason in sck_last_error(): MPI not initialized, `c` is MPI_COMM_NULL, an MPI
 *  call failed (its error string), or out of memory. */
SCK_API sck_comm *sck_comm_mpi(MPI_Comm c);

/** Like sck_comm_mpi, but one MPI collective moves at most `max_message` bytes into a rank
 *  (values above INT_MAX are lowered to INT_MAX; an all-gather still moves at least one byte
 *  per rank per round): larger transfers are split into rounds.  For MPI stacks with smaller
 *  message limits, and to exercise the splitting in tests.  Errors as sck_comm_mpi. */
SCK_API sck_comm *sck_comm_mpi_chunked(MPI_Comm c, size_t max_message);

#ifdef __cplusplus
}
#endif
#endif /* SHARDCKPT_MPI_H */
