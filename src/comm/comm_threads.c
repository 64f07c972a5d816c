/* comm_threads.c - N ranks as N threads of one process (tests, single-process multi-rank programs).
 * Collectives rendezvous on a generation-counting barrier; data moves through per-rank slots. */
#include "comm/comm.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where a rank of threads_agree_gather wants the outcome: the collective's last arriver fills in
 * every rank's before it releases them, so that the collective is one barrier. */
typedef struct tout {
    int want;                /* the rank passed `all` */
    int status;
    char msg[1200];
    void *all;               /* the gathered bytes, shared by the ranks that want them */
    size_t *counts;
} tout;

typedef struct tgroup {
    int size;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int waiting;
    unsigned long gen;
    int go;                  /* start gate: 0 wait, 1 run, -1 abandon (a sibling thread failed to start) */
    const void **slot_ptr;   /* per rank: buffer posted for the current collective */
    int *slot_rc;            /* per rank: local outcome, so one rank's failure fails the collective everywhere */
    size_t *slot_len;
    const char **slot_msg;   /* per rank: its error message in threads_agree_gather */
    tout **slot_out;         /* per rank: where its outcome of threads_agree_gather goes */
} tgroup;

typedef struct tctx {
    tgroup *g;
    int rank;
} tctx;

/* Waits until every rank has arrived; the last one runs last(g) first (under the lock, so the others
 * see what it wrote once they are released). */
static void tg_barrier_last(tgroup *g, void (*last)(tgroup *)) {
    pthread_mutex_lock(&g->mu);
    unsigned long gen = g->gen;
    if (++g->waiting == g->size) {
        if (last) last(g);
        g->waiting = 0;
        g->gen++;
        pthread_cond_broadcast(&g->cv);
    } else {
        while (gen == g->gen) pthread_cond_wait(&g->cv, &g->mu);
    }
    pthread_mutex_unlock(&g->mu);
}

static void tg_barrier(tgroup *g) { tg_barrier_last(g, NULL); }

static int th_allgatherv(void *vctx, const void *send, size_t n, void **recv, size_t *counts) {
    tctx *t = vctx;
    tgroup *g = t->g;
    g->slot_ptr[t->rank] = send;
    g->slot_len[t->rank] = n;
    tg_barrier(g);
    size_t total = 0;
    for (int r = 0; r < g->size; r++) total += g->slot_len[r];
    uint8_t *p = malloc(total ? total : 1);
    int rc = SCK_OK;
    if (!p) {
        rc = SCK_ERR_NOMEM;
    } else {
        size_t off = 0;
        for (int r = 0; r < g->size; r++) {
            if (g->slot_len[r]) memcpy(p + off, g->slot_ptr[r], g->slot_len[r]);
            counts[r] = g->slot_len[r];
            off += g->slot_len[r];
        }
    }
    g->slot_rc[t->rank] = rc;
    tg_barrier(g); /* senders' buffers must stay valid until everyone has copied */
    for (int r = 0; r < g->size; r++)
        if (g->slot_rc[r]) rc = g->slot_rc[r];
    tg_barrier(g); /* slot_rc is reused by the next collective */
    if (rc) {
        free(p);
        p = NULL;
        sck_err(rc, "threads backend: a rank ran out of memory in an allgather");
    }
    *recv = p;
    return rc;
}

static int th_bcast(void *vctx, void **buf, size_t *n, int root) {
    tctx *t = vctx;
    tgroup *g = t->g;
    if (root < 0 || root >= g->size) return SCK_ERR_INVALID_ARG;
    if (t->rank == root) {
        g->slot_ptr[root] = *buf;
        g->slot_len[root] = *n;
    }
    tg_barrier(g);
    int rc = SCK_OK;
    void *p = NULL;
    size_t len = g->slot_len[root]; /* read now: after the last barrier the root may post the next collective */
    if (t->rank != root) {
        p = malloc(len ? len : 1);
        if (!p) rc = SCK_ERR_NOMEM;
        else if (len) memcpy(p, g->slot_ptr[root], len);
    }
    g->slot_rc[t->rank] = rc;
    tg_barrier(g);
    for (int r = 0; r < g->size; r++)
        if (g->slot_rc[r]) rc = g->slot_rc[r];
    tg_barrier(g);
    if (rc) {
        free(p);
        return sck_err(rc, "threads backend: a rank ran out of memory in a broadcast");
    }
    if (t->rank != root) {
        *buf = p;
        *n = len;
    }
    return rc;
}

static int th_barrier(void *vctx) {
    tctx *t = vctx;
    tg_barrier(t->g);
    return SCK_OK;
}

static void th_destroy(void *vctx) { free(vctx); }

static const sck_comm_ops threads_ops = {th_allgatherv, th_bcast, th_barrier, th_destroy};


/* The gathered bytes follow a header that counts the ranks still holding them. */
#define SHARED_HEAD ((size_t)64)

/* By the last rank to arrive: the status (the lowest failing rank's, with its message), and for
 * every rank that wants them the gathered payloads, copied once into one block they all share. */
static void agree_outcome(tgroup *g) {
    int status = SCK_OK, wanting = 0;
    char msg[1200] = "";
    size_t total = 0;
    for (int r = 0; r < g->size; r++) {
        if (!status && (status = g->slot_rc[r])) snprintf(msg, sizeof msg, "rank %d: %.1100s", r, g->slot_msg[r]);
        wanting += g->slot_out[r]->want;
        total += g->slot_len[r];
    }
    uint8_t *block = NULL;
    if (!status && wanting) {
        if (total > SIZE_MAX - SHARED_HEAD || !(block = sck_big_alloc(SHARED_HEAD + total))) {
            status = SCK_ERR_NOMEM;
            snprintf(msg, sizeof msg, "threads backend: out of memory gathering %zu bytes from %d ranks", total, g->size);
        } else {
            *(int *)(void *)block = wanting;
            size_t off = SHARED_HEAD;
            for (int r = 0; r < g->size; r++) {
                if (g->slot_len[r]) memcpy(block + off, g->slot_ptr[r], g->slot_len[r]);
                off += g->slot_len[r];
            }
        }
    }
    for (int r = 0; r < g->size; r++) {
        tout *o = g->slot_out[r];
        o->status = status;
        memcpy(o->msg, msg, sizeof msg);
        if (status || !o->want) continue;
        o->all = block + SHARED_HEAD;
        for (int k = 0; k < g->size; k++) o->counts[k] = g->slot_len[k];
    }
}

static int threads_agree_gather(sck_comm *c, int local, const void *payload, size_t n, void **all, size_t *counts) {
    tctx *t = c->ctx;
    tgroup *g = t->g;
    tout out;
    out.want = all != NULL;
    out.all = NULL;
    out.counts = counts;
    g->slot_ptr[t->rank] = payload;
    g->slot_len[t->rank] = local || !all ? 0 : n;
    g->slot_msg[t->rank] = local ? sck_last_error() : ""; /* this thread's buffer: unchanged until the barrier */
    g->slot_rc[t->rank] = local;
    g->slot_out[t->rank] = &out;
    tg_barrier_last(g, agree_outcome); /* nobody reads the slots after it: the next collective may fill them */
    if (out.status) {
        sck_err_set_raw(out.msg);
        return out.status;
    }
    if (all) *all = out.all;
    return SCK_OK;
}

static void threads_gather_free(void *all) {
    uint8_t *block = (uint8_t *)all - SHARED_HEAD;
    if (__atomic_sub_fetch((int *)(void *)block, 1, __ATOMIC_ACQ_REL) == 0) sck_big_free(block);
}

static const comm_shared_ops threads_shared = {threads_agree_gather, threads_gather_free};

typedef struct trun {
    tgroup *g;
    sck_comm *comm;
    int (*fn)(sck_comm *, void *);
    void *arg;
    int status;
    char msg[1024];   /* the thread's last error, handed to the caller's thread */
} trun;

static void *trun_main(void *p) {
    trun *r = p;
    tgroup *g = r->g;
    pthread_mutex_lock(&g->mu);
    while (g->go == 0) pthread_cond_wait(&g->cv, &g->mu);
    int go = g->go;
    pthread_mutex_unlock(&g->mu);
    r->status = go > 0 ? r->fn(r->comm, r->arg) : SCK_ERR_COMM;
    if (r->status) snprintf(r->msg, sizeof r->msg, "%s", go > 0 ? sck_last_error() : "not started");
    return NULL;
}

int sck_threads_run(int nranks, int (*fn)(sck_comm *comm, void *arg), void *arg) {
    if (nranks < 1 || !fn) return sck_err(SCK_ERR_INVALID_ARG, "sck_threads_run: need nranks >= 1 and a function");
    tgroup g;
    memset(&g, 0, sizeof g);
    g.size = nranks;
    g.slot_ptr = calloc((size_t)nranks, sizeof *g.slot_ptr);
    g.slot_len = calloc((size_t)nranks, sizeof *g.slot_len);
    g.slot_rc = calloc((size_t)nranks, sizeof *g.slot_rc);
    g.slot_msg = calloc((size_t)nranks, sizeof *g.slot_msg);
    g.slot_out = calloc((size_t)nranks, sizeof *g.slot_out);
    trun *runs = calloc((size_t)nranks, sizeof *runs);
    pthread_t *tids = calloc((size_t)nranks, sizeof *tids);
    int rc = SCK_OK;
    int nctx = 0;
    if (!g.slot_ptr || !g.slot_len || !g.slot_rc || !g.slot_msg || !g.slot_out || !runs || !tids) {
        rc = sck_err(SCK_ERR_NOMEM, "sck_threads_run: out of memory for %d ranks", nranks);
        goto out;
    }
    if (pthread_mutex_init(&g.mu, NULL) || pthread_cond_init(&g.cv, NULL)) {
        rc = sck_err(SCK_ERR_COMM, "sck_threads_run: cannot create mutex/condition");
        goto out;
    }
    for (; nctx < nranks; nctx++) {
        tctx *t = malloc(sizeof *t);
        if (!t) break;
        t->g = &g;
        t->rank = nctx;
        runs[nctx].comm = sck_comm_create(&threads_ops, t, nctx, nranks);
        if (!runs[nctx].comm) {
            free(t);
            break;
        }
        runs[nctx].comm->shared = &threads_shared;
        runs[nctx].fn = fn;
        runs[nctx].arg = arg;
    }
    if (nctx < nranks) {
        rc = sck_err(SCK_ERR_NOMEM, "sck_threads_run: out of memory for %d ranks", nranks);
        goto destroy;
    }
    /* All threads must start, or none may run fn: a partial group would deadlock in its first
     * collective.  Threads wait at a gate until every one of them exists. */
    int started = 0;
    for (; started < nranks; started++) {
        runs[started].g = &g;
        if (pthread_create(&tids[started], NULL, trun_main, &runs[started])) break;
    }
    pthread_mutex_lock(&g.mu);
    g.go = started == nranks ? 1 : -1;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    if (started < nranks) rc = sck_err(SCK_ERR_COMM, "sck_threads_run: cannot start thread for rank %d", started);
    for (int r = 0; r < started; r++) pthread_join(tids[r], NULL);
    for (int r = 0; r < nranks && rc == SCK_OK; r++) {
        if (runs[r].status != SCK_OK) {
            rc = runs[r].status;
            sck_err_set_raw(runs[r].msg);
        }
    }
    pthread_cond_destroy(&g.cv);
    pthread_mutex_destroy(&g.mu);
destroy:
    for (int r = 0; r < nctx; r++) sck_comm_free(runs[r].comm);
out:
    free(g.slot_ptr);
    free(g.slot_len);
    free(g.slot_rc);
    free(g.slot_msg);
    free(g.slot_out);
    free(runs);
    free(tids);
    return rc;
}
