/* comm_mpi.c - the MPI backend of sck_comm (library libshardckpt_mpi; the core never links MPI).
 *
 * Every operation is built so that all ranks return the same success or failure: buffer
 * allocations are agreed with one MPI_Allreduce before any data moves, and every size check is
 * computed from data all ranks share.  Transfers above the message limit are split into rounds. */
#include "shardckpt_mpi.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"

typedef struct mpi_ctx {
    MPI_Comm comm;      /* our duplicate, MPI_ERRORS_RETURN */
    int rank, size;
    size_t max_msg;     /* most bytes one collective moves into a rank */
    uint64_t *lens;     /* per rank, preallocated: the counts exchange never needs a fresh allocation */
    int *icounts, *idispls;
} mpi_ctx;

/* SCK_ERR_COMM with MPI's own words for `code`. */
static int mpi_fail(int code, const char *call) {
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, s, &len) != MPI_SUCCESS || len <= 0) snprintf(s, sizeof s, "MPI error code %d", code);
    return sck_err(SCK_ERR_COMM, "%s failed: %s", call, s);
}

/* Every rank passes ok (1) or not (0); returns -1 if all are ok, else the lowest failing rank.
 * A failing MPI call returns -2 with the error recorded. */
static int agree_ok(mpi_ctx *m, int ok) {
    int mine = ok ? m->size : m->rank, low = 0;
    int rc = MPI_Allreduce(&mine, &low, 1, MPI_INT, MPI_MIN, m->comm);
    if (rc != MPI_SUCCESS) {
        mpi_fail(rc, "MPI_Allreduce");
        return -2;
    }
    return low == m->size ? -1 : low;
}

/* After agree_ok reported a failing rank: the same status and message everywhere. */
static int peer_nomem(int bad_rank, const char *op) {
    return sck_err(SCK_ERR_NOMEM, "MPI %s: rank %d is out of memory for its receive buffer", op, bad_rank);
}

/* Moves this rank's n bytes into recv at displacement disp[r] of every rank r, in rounds of at most
 * chunk bytes per rank, through a staging buffer (round totals fit in an int). */
static int allgatherv_rounds(mpi_ctx *m, const uint8_t *send, const size_t *counts, const size_t *disp, uint8_t *recv,
                             uint8_t *stage, size_t chunk) {
    size_t maxc = 0;
    for (int r = 0; r < m->size; r++)
        if (counts[r] > maxc) maxc = counts[r];
    for (size_t done = 0; done < maxc; done += chunk) {
        int tot = 0;
        for (int r = 0; r < m->size; r++) {
            size_t k = counts[r] > done ? counts[r] - done : 0;
            if (k > chunk) k = chunk;
            m->icounts[r] = (int)k;
            m->idispls[r] = tot;
            tot += (int)k;
        }
        int rc = MPI_Allgatherv(send + (counts[m->rank] > done ? done : 0), m->icounts[m->rank], MPI_BYTE, stage,
                                m->icounts, m->idispls, MPI_BYTE, m->comm);
        if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Allgatherv");
        for (int r = 0; r < m->size; r++)
            if (m->icounts[r]) memcpy(recv + disp[r] + done, stage + m->idispls[r], (size_t)m->icounts[r]);
    }
    return SCK_OK;
}

static int mpi_allgatherv(void *vctx, const void *send, size_t n, void **recv, size_t *counts) {
    mpi_ctx *m = vctx;
    *recv = NULL;
    uint64_t mine = n;
    int rc = MPI_Allgather(&mine, 1, MPI_UINT64_T, m->lens, 1, MPI_UINT64_T, m->comm);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Allgather");
    /* Totals are computed from the gathered counts, so every rank takes the same branch. */
    size_t total = 0;
    for (int r = 0; r < m->size; r++) {
        if (m->lens[r] > SIZE_MAX - total) return sck_err(SCK_ERR_COMM, "MPI allgather: total size overflows size_t");
        counts[r] = (size_t)m->lens[r];
        total += counts[r];
    }
    int single = total <= m->max_msg;
    size_t chunk = m->max_msg / (size_t)m->size;
    if (chunk == 0) chunk = 1;
    uint8_t *buf = malloc(total ? total : 1);
    size_t *disp = single ? NULL : malloc((size_t)m->size * sizeof *disp);
    uint8_t *stage = single ? NULL : malloc(total < chunk * (size_t)m->size ? total : chunk * (size_t)m->size);
    int bad = agree_ok(m, buf && (single || (disp && stage)));
    if (bad != -1) {
        free(buf);
        free(disp);
        free(stage);
        return bad == -2 ? SCK_ERR_COMM : peer_nomem(bad, "allgather");
    }
    if (single) {
        int off = 0;
        for (int r = 0; r < m->size; r++) {
            m->icounts[r] = (int)counts[r];
            m->idispls[r] = off;
            off += (int)counts[r];
        }
        rc = total ? MPI_Allgatherv(send, (int)n, MPI_BYTE, buf, m->icounts, m->idispls, MPI_BYTE, m->comm) : MPI_SUCCESS;
        rc = rc == MPI_SUCCESS ? SCK_OK : mpi_fail(rc, "MPI_Allgatherv");
    } else {
        size_t off = 0;
        for (int r = 0; r < m->size; r++) {
            disp[r] = off;
            off += counts[r];
        }
        rc = allgatherv_rounds(m, send, counts, disp, buf, stage, chunk);
    }
    free(disp);
    free(stage);
    if (rc) {
        free(buf);
        return rc;
    }
    *recv = buf;
    return SCK_OK;
}

static int mpi_bcast(void *vctx, void **buf, size_t *n, int root) {
    mpi_ctx *m = vctx;
    if (root < 0 || root >= m->size) return sck_err(SCK_ERR_COMM, "MPI broadcast: root %d is not a rank of %d", root, m->size);
    uint64_t len = m->rank == root ? *n : 0;
    int rc = MPI_Bcast(&len, 1, MPI_UINT64_T, root, m->comm);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Bcast");
    if (len > SIZE_MAX - 1) return sck_err(SCK_ERR_COMM, "MPI broadcast: %llu bytes do not fit in memory", (unsigned long long)len);
    uint8_t *p = m->rank == root ? *buf : malloc(len ? (size_t)len : 1);
    int bad = agree_ok(m, p != NULL);
    if (bad != -1) {
        if (m->rank != root) free(p);
        return bad == -2 ? SCK_ERR_COMM : peer_nomem(bad, "broadcast");
    }
    for (uint64_t off = 0; off < len; off += m->max_msg) {
        uint64_t k = len - off < m->max_msg ? len - off : m->max_msg;
        rc = MPI_Bcast(p + off, (int)k, MPI_BYTE, root, m->comm);
        if (rc != MPI_SUCCESS) {
            if (m->rank != root) free(p);
            return mpi_fail(rc, "MPI_Bcast");
        }
    }
    if (m->rank != root) {
        *buf = p;
        *n = (size_t)len;
    }
    return SCK_OK;
}

static int mpi_barrier(void *vctx) {
    mpi_ctx *m = vctx;
    int rc = MPI_Barrier(m->comm);
    return rc == MPI_SUCCESS ? SCK_OK : mpi_fail(rc, "MPI_Barrier");
}

static void ctx_free(mpi_ctx *m) {
    if (!m) return;
    int fin = 1;
    if (MPI_Finalized(&fin) == MPI_SUCCESS && !fin && m->comm != MPI_COMM_NULL) MPI_Comm_free(&m->comm);
    free(m->lens);
    free(m->icounts);
    free(m->idispls);
    free(m);
}

static void mpi_destroy(void *vctx) { ctx_free(vctx); }

static const sck_comm_ops mpi_ops = {mpi_allgatherv, mpi_bcast, mpi_barrier, mpi_destroy};

/* 1 if every rank of c shares this node's memory (MPI-3's MPI_COMM_TYPE_SHARED), 0 if not or unknown.
 * Collective. */
static int one_node(MPI_Comm c) {
#if MPI_VERSION >= 3 /* MPI_COMM_TYPE_SHARED (an enum in Open MPI, not a macro) */
    MPI_Comm node = MPI_COMM_NULL;
    int n = 0, size = 0;
    if (MPI_Comm_split_type(c, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS) return 0;
    int ok = node != MPI_COMM_NULL && MPI_Comm_size(node, &n) == MPI_SUCCESS && MPI_Comm_size(c, &size) == MPI_SUCCESS && n == size;
    if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
    return ok;
#else
    (void)c;
    return 0;
#endif
}

sck_comm *sck_comm_mpi_chunked(MPI_Comm c, size_t max_message) {
    int init = 0, inter = 0;
    if (MPI_Initialized(&init) != MPI_SUCCESS || !init) {
        sck_err(SCK_ERR_INVALID_ARG, "sck_comm_mpi: MPI is not initialized (call MPI_Init first)");
        return NULL;
    }
    if (c == MPI_COMM_NULL) {
        sck_err(SCK_ERR_INVALID_ARG, "sck_comm_mpi: communicator is MPI_COMM_NULL");
        return NULL;
    }
    int rc = MPI_Comm_test_inter(c, &inter);
    if (rc != MPI_SUCCESS) {
        mpi_fail(rc, "sck_comm_mpi: MPI_Comm_test_inter");
        return NULL;
    }
    if (inter) {
        sck_err(SCK_ERR_INVALID_ARG, "sck_comm_mpi: intercommunicators are not supported");
        return NULL;
    }
    if (max_message == 0) max_message = 1;
    /* No early return from here on: a rank failing alone must still reach the agreement below. */
    MPI_Comm dup = MPI_COMM_NULL;
    int ok = 1;
    if ((rc = MPI_Comm_dup(c, &dup)) != MPI_SUCCESS) ok = 0, mpi_fail(rc, "sck_comm_mpi: MPI_Comm_dup");
    if (ok && (rc = MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN)) != MPI_SUCCESS)
        ok = 0, mpi_fail(rc, "sck_comm_mpi: MPI_Comm_set_errhandler");
    mpi_ctx *m = ok ? calloc(1, sizeof *m) : NULL;
    sck_comm *out = NULL;
    if (m) {
        m->comm = dup;
        dup = MPI_COMM_NULL;
        m->max_msg = max_message < (size_t)INT_MAX ? max_message : (size_t)INT_MAX;
        if ((rc = MPI_Comm_rank(m->comm, &m->rank)) != MPI_SUCCESS || (rc = MPI_Comm_size(m->comm, &m->size)) != MPI_SUCCESS) {
            mpi_fail(rc, "sck_comm_mpi: MPI_Comm_rank/size");
        } else {
            m->lens = calloc((size_t)m->size, sizeof *m->lens);
            m->icounts = calloc((size_t)m->size, sizeof *m->icounts);
            m->idispls = calloc((size_t)m->size, sizeof *m->idispls);
            if (m->lens && m->icounts && m->idispls) out = sck_comm_create(&mpi_ops, m, m->rank, m->size);
            if (!out) sck_err(SCK_ERR_NOMEM, "sck_comm_mpi: out of memory");
        }
    } else if (ok) {
        sck_err(SCK_ERR_NOMEM, "sck_comm_mpi: out of memory");
    }
    if (dup != MPI_COMM_NULL) MPI_Comm_free(&dup);
    /* Agree on the original communicator so that all ranks succeed or fail together, and on whether
     * they all run on one node (the loads' check plans depend on it, so no rank may differ). */
    int mine = out ? 1 + one_node(c) : 0, all = 0;
    rc = MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, c);
    if (rc == MPI_SUCCESS && all) {
        out->one_node = all == 2;
        return out;
    }
    if (rc != MPI_SUCCESS) mpi_fail(rc, "sck_comm_mpi: MPI_Allreduce");
    else if (out) sck_err(SCK_ERR_COMM, "sck_comm_mpi: another rank failed to set up its communicator");
    if (out) sck_comm_free(out); /* frees m through mpi_destroy */
    else ctx_free(m);
    return NULL;
}

sck_comm *sck_comm_mpi(MPI_Comm c) { return sck_comm_mpi_chunked(c, (size_t)INT_MAX); }
