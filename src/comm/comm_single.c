/* comm_single.c - the default communicator: one process, one rank; collectives are copies. */
#include "comm/comm.h"

#include <stdlib.h>
#include <string.h>

static int single_allgatherv(void *ctx, const void *send, size_t n, void **recv, size_t *counts) {
    (void)ctx;
    void *p = malloc(n ? n : 1);
    if (!p) return SCK_ERR_NOMEM;
    if (n) memcpy(p, send, n);
    *recv = p;
    counts[0] = n;
    return SCK_OK;
}

static int single_bcast(void *ctx, void **buf, size_t *n, int root) {
    (void)ctx; (void)buf; (void)n;
    return root == 0 ? SCK_OK : SCK_ERR_INVALID_ARG;
}

static int single_barrier(void *ctx) {
    (void)ctx;
    return SCK_OK;
}

static const sck_comm_ops single_ops = {single_allgatherv, single_bcast, single_barrier, NULL};

sck_comm *sck_comm_single(void) { return sck_comm_create(&single_ops, NULL, 0, 1); }
