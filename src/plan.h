/* plan.h - the global save plan: every rank's local entries gathered, checked and merged into one
 * checkpoint model, with each chunk assigned to the rank that writes it.  Computed identically on
 * every rank from the same gathered bytes, so no further collective is needed to agree on it. */
#ifndef SCK_PLAN_H
#define SCK_PLAN_H

#include "dcp_meta.h"
#include "state.h"

/* Serializes this rank's state (keys, kinds, dtypes, shapes, boxes) for the plan exchange. */
int plan_encode_local(const sck_state *st, sck_buf *out);

typedef struct plan_item {
    size_t entry;        /* index into the model's entries */
    size_t chunk;        /* index into that entry's chunks (0 for bytes) */
    size_t local_piece;  /* on the writing rank: index of the state piece holding the data */
} plan_item;

typedef struct save_plan {
    ck_meta m;           /* chunk.file == writing rank; offsets/lengths filled after writing */
    plan_item **items;   /* per rank: items that rank writes, in file order */
    size_t *nitems;
    int nranks;
} save_plan;

/* Merges the gathered local plans (concatenated, counts per rank).  Errors (identical on every rank):
 * SCK_ERR_MISMATCH (kind/dtype/shape differ across ranks), SCK_ERR_COVERAGE (shards overlap or leave
 * holes), SCK_ERR_INVALID_ARG (a blob/value with no data anywhere), SCK_ERR_FORMAT (corrupt plan), SCK_ERR_NOMEM. */
int plan_build(const uint8_t *all, const size_t *counts, int nranks, save_plan *out);
void plan_free(save_plan *p);

#endif
