/* load_handoff.c - thread ranks hand each other the parts of items they both read (see load_handoff.h). */
#include "load/load_handoff.h"

#include <stdlib.h>
#include <string.h>

typedef struct lh_view {        /* what one rank shows the others: valid until the load's end */
    sck_ckpt *ck;
    const ck_want *w;
    ck_reads *r;
    size_t split;               /* where its ops' second ascending run starts (rotation) */
} lh_view;

static int op_before(const read_op *o, uint32_t file, uint64_t off) { return o->file < file || (o->file == file && o->off < off); }

/* The ops are in file order, rotated to start at the rank's share (ckpt_plan_reads): two sorted runs,
 * the second from the returned index. */
static size_t rotation(const read_op *op, size_t m) {
    for (size_t i = 1; i < m; i++)
        if (op_before(&op[i], op[i - 1].file, op[i - 1].off)) return i;
    return m;
}

static int cmp_hand(const void *a, const void *b) {
    const ck_hand *x = a, *y = b;
    if (x->ei != y->ei) return x->ei < y->ei ? -1 : 1;
    return x->ci < y->ci ? -1 : x->ci > y->ci;
}

static int push_hand(sck_ckpt *ck, size_t *cap, ck_hand h) {
    if (ck->nhands == *cap) {
        size_t nc = *cap ? 2 * *cap : 256;
        ck_hand *p = sck_big_realloc(ck->hands, nc * sizeof *p);
        if (!p) return sck_err(SCK_ERR_NOMEM, "%s: out of memory planning hand-overs", ck->dir);
        ck->hands = p, *cap = nc;
    }
    ck->hands[ck->nhands++] = h;
    return SCK_OK;
}

/* Lists the hand-overs of the items this rank checks; marks the other ranks' ops.  A small item's single
 * run is handed over; so is an overlap of many runs (a column block) when this rank reads the item as
 * many runs too, in one pass over all of it (item_check.c's ck_check_and_copy) that can copy the other ranks'
 * runs out as well: otherwise each of them would stream the whole item again for its share. */
static int plan(sck_ckpt *ck, const lh_view *v, int nranks, int me) {
    const ck_reads *r = v[me].r;
    size_t *split = calloc((size_t)nranks, sizeof *split), cap = 0;
    /* About one hand-over an item this rank reads when ranks share items: made room for at once, as
     * each step of a doubling array first touches fresh pages (11 us each here). */
    if (!ck->hands && r->m > 256 && (ck->hands = sck_big_alloc(r->m * sizeof *ck->hands))) cap = r->m;
    /* Where each half of each rank's ops was left: this rank's ops come in two ascending runs too, so
     * the cursors only move forward, but at the one wrap-around (a binary search of another rank's
     * ops for each item missed the cache at every step). */
    size_t (*cur)[2] = calloc((size_t)nranks, sizeof *cur);
    if (!split || !cur) {
        free(split);
        free(cur);
        return sck_err(SCK_ERR_NOMEM, "%s: out of memory planning hand-overs", ck->dir);
    }
    for (int q = 0; q < nranks; q++) split[q] = v[q].split, cur[q][0] = 0, cur[q][1] = split[q];
    int rc = SCK_OK;
    for (size_t j = 0; j < r->m && !rc; j++) {
        const read_op *o = &r->op[j];
        if (j && op_before(o, r->op[j - 1].file, r->op[j - 1].off)) /* the wrap-around: start over */
            for (int q = 0; q < nranks; q++) cur[q][0] = 0, cur[q][1] = split[q];
        size_t ei = o->ei, ci = o->ci;
        const ck_chunk *c = &ck->m.e[ei].chunks[ci];
        if (ckpt_peer_mark(ck, ei, ci)) continue; /* not this rank's to check */
        if (!c->has_crc) continue;
        int small = c->length <= SMALL_ITEM;
        for (int q = 0; q < nranks && !rc; q++) {
            if (q == me || ckpt_peer_mark(v[q].ck, ei, ci) != 1) continue; /* q reads its runs, another rank checks */
            read_op *qo = v[q].r->op;
            size_t qm = v[q].r->m, runs[2][2] = {{0, split[q]}, {split[q], qm}};
            for (int h = 0; h < 2 && !rc; h++) {
                while (cur[q][h] < runs[h][1] && op_before(&qo[cur[q][h]], o->file, o->off)) cur[q][h]++;
                for (size_t i = cur[q][h]; i < runs[h][1] && qo[i].file == o->file && qo[i].off == o->off; i++) {
                    if (qo[i].handed || qo[i].ei != ei || qo[i].ci != ci) continue;
                    if (small && qo[i].runs == 1) {
                        rc = push_hand(ck, &cap, (ck_hand){ei, ci, qo[i].run, qo[i].len, qo[i].dst, NULL, 0});
                    } else {
                        const ck_want *x = &v[q].w[qo[i].k];
                        if (o->runs != 2 || qo[i].runs != 2) continue;
                        rc = push_hand(ck, &cap, (ck_hand){ei, ci, 0, 0, x->dst, x->box, 0});
                    }
                    if (!rc) qo[i].handed = 1;
                }
            }
        }
    }
    free(split);
    free(cur);
    if (!rc && ck->nhands > 1) sck_sort(ck->hands, ck->nhands, sizeof *ck->hands, cmp_hand);
    return rc;
}

int lc_handoff(sck_comm *comm, sck_ckpt *ck, const ck_want *w, ck_reads *r, int local) {
    lh_view mine = {ck, w, r, rotation(r->op, r->m)}; /* each rank's found once, by itself */
    size_t *counts = calloc((size_t)comm->size, sizeof *counts);
    if (!counts && !local) local = sck_err(SCK_ERR_NOMEM, "%s: out of memory planning hand-overs", ck->dir);
    void *all = NULL;
    int rc = counts ? comm_agree_gather(comm, local, &mine, sizeof mine, &all, counts) : comm_agree(comm, local);
    if (rc) {
        free(counts);
        return rc;
    }
    for (int q = 0; q < comm->size && !local; q++)
        if (counts[q] != sizeof mine) local = sck_err(SCK_ERR_INVALID_ARG, "%s: rank %d is not a thread of this load", ck->dir, q);
    /* A rank that checks nothing (verification off) owns no item and lists nothing. */
    if (!local && ck->verify && !ck->plan_failed) local = plan(ck, all, comm->size, comm->rank);
    comm_gather_free(comm, all);
    free(counts);
    return comm_agree(comm, local);
}
