/* comm.h - the communicator behind sck_comm, and the collective helpers save/load are built from. */
#ifndef SCK_COMM_H
#define SCK_COMM_H

#include "base/util.h"

/* Collectives that ranks sharing one address space (thread ranks) run without copying through the
 * ops; the generic code calls them through this table so that it never depends on a backend. */
typedef struct comm_shared_ops {
    /* comm_agree_gather: one barrier, whose last arriver decides the status and copies the payloads
     * straight from the ranks' buffers, once, into a block every rank shares read-only */
    int (*agree_gather)(sck_comm *c, int local_status, const void *payload, size_t n, void **all, size_t *counts);
    /* frees that block when the last rank lets go of it */
    void (*gather_free)(void *all);
} comm_shared_ops;

struct sck_comm {
    const sck_comm_ops *ops;
    void *ctx;
    int rank;
    int size;
    int one_node;       /* every rank runs on this machine (set by the backend; 0: not known) */
    const comm_shared_ops *shared; /* set by a backend whose ranks share memory (threads), else NULL */
};

int comm_allgatherv(sck_comm *c, const void *send, size_t n, void **recv, size_t *counts);
int comm_bcast(sck_comm *c, void **buf, size_t *n, int root);
int comm_barrier(sck_comm *c);
/* 1 if every rank of c is a thread of this process (sck_threads_run): a pointer one rank broadcasts
 * is valid on all of them, so read-only data can be shared instead of copied. */
int comm_in_process(const sck_comm *c);
/* 1 if every rank of c runs on this machine, under one kernel: thread ranks, one rank, or MPI ranks
 * all on one node (MPI_COMM_TYPE_SHARED).  They share one page cache (what one rank reads, the
 * others find there) and the same CPUs.  The same on every rank. */
int comm_one_node(const sck_comm *c);

/* Every rank passes its local status (message in this thread's last error).  All ranks return the
 * status of the lowest failing rank, with that rank's message prefixed by "rank R: ", or SCK_OK if
 * every rank succeeded.  One allgather. */
int comm_agree(sck_comm *c, int local_status);

/* Like comm_agree, but each rank also contributes a payload (only used when every rank succeeded):
 * on SCK_OK *all receives the concatenated payloads (the caller frees them with comm_gather_free)
 * and counts[r] their lengths. */
int comm_agree_gather(sck_comm *c, int local_status, const void *payload, size_t n, void **all, size_t *counts);
/* Frees what comm_agree_gather returned on c (NULL allowed): thread ranks share one sck_big_alloc'ed
 * block (lists of megabytes, each page of a fresh malloc'ed one a fault; read-only), the backends
 * gather into malloc'ed memory of each rank's own. */
void comm_gather_free(const sck_comm *c, void *all);

#endif
