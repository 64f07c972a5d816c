/* comm.c - dispatch to a backend, plus the error-agreement collective every save/load ends with. */
#include "comm/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

sck_comm *sck_comm_create(const sck_comm_ops *ops, void *ctx, int rank, int size) {
    if (!ops || !ops->allgatherv || !ops->bcast || !ops->barrier || size < 1 || rank < 0 || rank >= size) return NULL;
    sck_comm *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->ops = ops;
    c->ctx = ctx;
    c->rank = rank;
    c->size = size;
    return c;
}

void sck_comm_free(sck_comm *c) {
    if (!c) return;
    if (c->ops->destroy) c->ops->destroy(c->ctx);
    free(c);
}

int sck_comm_rank(const sck_comm *c) { return c ? c->rank : 0; }
int sck_comm_size(const sck_comm *c) { return c ? c->size : 1; }

int comm_allgatherv(sck_comm *c, const void *send, size_t n, void **recv, size_t *counts) {
    int rc = c->ops->allgatherv(c->ctx, send, n, recv, counts);
    /* keep the backend's own message (e.g. MPI's error string) behind ours */
    if (rc) return sck_err_wrap(SCK_ERR_COMM, "rank %d: allgather of %zu bytes failed (status %d)", c->rank, n, rc);
    return SCK_OK;
}

int comm_bcast(sck_comm *c, void **buf, size_t *n, int root) {
    int rc = c->ops->bcast(c->ctx, buf, n, root);
    if (rc) return sck_err_wrap(SCK_ERR_COMM, "rank %d: broadcast from rank %d failed (status %d)", c->rank, root, rc);
    return SCK_OK;
}

int comm_barrier(sck_comm *c) {
    int rc = c->ops->barrier(c->ctx);
    if (rc) return sck_err_wrap(SCK_ERR_COMM, "rank %d: barrier failed (status %d)", c->rank, rc);
    return SCK_OK;
}

/* Wire record: int32 status, uint32 message length, message, payload (only meaningful if all succeed). */
int comm_agree_gather(sck_comm *c, int local_status, const void *payload, size_t n, void **all, size_t *counts_out) {
    if (all) *all = NULL;
    if (c->shared) return c->shared->agree_gather(c, local_status, payload, n, all, counts_out);
    const char *msg = local_status ? sck_last_error() : "";
    size_t mlen = strlen(msg);
    size_t plen = local_status ? 0 : n;
    size_t rec_len = 8 + mlen + plen;
    uint8_t *rec = malloc(rec_len);
    size_t *counts = calloc((size_t)c->size, sizeof *counts);
    if (!rec || !counts) {
        /* Out of memory: we cannot even gather.  Peers are blocked in the same collective, so the only
         * safe move is to take part with a minimal record through the stack and report NOMEM. */
        free(rec);
        free(counts);
        size_t cnt_stack[64];
        size_t *cnt = c->size <= 64 ? cnt_stack : NULL;
        uint8_t small[8] = {0};
        int32_t st = SCK_ERR_NOMEM;
        memcpy(small, &st, 4);
        void *r2 = NULL;
        if (cnt) {
            if (comm_allgatherv(c, small, sizeof small, &r2, cnt) == SCK_OK) free(r2);
        }
        return sck_err(SCK_ERR_NOMEM, "rank %d: out of memory agreeing on status", c->rank);
    }
    int32_t st32 = local_status;
    uint32_t m32 = (uint32_t)mlen;
    memcpy(rec, &st32, 4);
    memcpy(rec + 4, &m32, 4);
    memcpy(rec + 8, msg, mlen);
    if (plen) memcpy(rec + 8 + mlen, payload, plen);
    void *recv = NULL;
    int rc = comm_allgatherv(c, rec, rec_len, &recv, counts);
    free(rec);
    if (rc) {
        free(counts);
        return rc;
    }
    /* Find the lowest failing rank. */
    uint8_t *p = recv;
    int status = SCK_OK;
    for (int r = 0; r < c->size; r++) {
        int32_t s;
        uint32_t ml;
        memcpy(&s, p, 4);
        memcpy(&ml, p + 4, 4);
        if (s != 0 && status == SCK_OK) {
            status = s;
            char buf[1200];
            snprintf(buf, sizeof buf, "rank %d: %.*s", r, (int)(ml > 1100 ? 1100 : ml), (const char *)p + 8);
            sck_err_set_raw(buf);
        }
        p += counts[r];
    }
    if (status != SCK_OK || !all) {
        free(recv);
        free(counts);
        return status;
    }
    /* Strip the 8-byte headers in place so callers see payloads only. */
    uint8_t *src = recv, *dst = recv;
    for (int r = 0; r < c->size; r++) {
        size_t len = counts[r] - 8;
        memmove(dst, src + 8, len);
        src += counts[r];
        dst += len;
        counts_out[r] = len;
    }
    *all = recv;
    free(counts);
    return SCK_OK;
}

void comm_gather_free(const sck_comm *c, void *all) {
    if (!all) return;
    if (c->shared) c->shared->gather_free(all);
    else free(all);
}

int comm_agree(sck_comm *c, int local_status) { return comm_agree_gather(c, local_status, NULL, 0, NULL, NULL); }

int sck_comm_agree(sck_comm *c, int status) {
    if (!c) return status;
    return comm_agree(c, status);
}

int comm_in_process(const sck_comm *c) { return c->shared != NULL; }

int comm_one_node(const sck_comm *c) { return c->size == 1 || c->one_node || comm_in_process(c); }
