/* plan.h - the global save plan: every rank's local entries gathered, checked and merged into one
 * checkpoint model, with each chunk assigned to the rank that writes it.  Every rank checks the
 * gathered plans the same way, so errors are identical everywhere and need no further collective;
 * only the ranks that need it (rank 0, which writes `.metadata`) also build the model. */
#ifndef SCK_PLAN_H
#define SCK_PLAN_H

#include "format/dcp_meta.h"
#include "core/state.h"

/* Serializes this rank's state (keys, kinds, dtypes, shapes, boxes, paths) for the plan exchange:
 * entries in key order, keys and repeated shapes/boxes compressed against the entry before.  With
 * `fabric` (SCK_SAVE_FABRIC), the entries plan_in_meta_pt names are marked as going to meta.pt: the
 * plan then holds them neither as model entries nor as items.  Appends to out. */
int plan_encode_local(const sck_state *st, int fabric, sck_buf *out);
/* 1 if e is a value or blob whose path has one element: the Fabric layout's meta.pt holds it. */
int plan_in_meta_pt(const st_entry *e);

typedef struct plan_item {
    size_t entry;        /* index into the model's entries (in key order) */
    size_t chunk;        /* index into that entry's chunks (0 for bytes) */
    size_t local_entry;  /* on the writing rank: index of the entry in its state */
    size_t local_piece;  /* on the writing rank: index of the state piece holding the data (tensors) */
} plan_item;

struct plan_arena;

typedef struct save_plan {
    ck_meta m;           /* chunk.file == writing rank; offsets/lengths filled after writing.  Empty when
                          * built for one rank only.  Owned by the plan: never ck_meta_free it. */
    plan_item **items;   /* per rank: items that rank writes, in file order (NULL for other ranks when
                          * built for one rank only) */
    size_t *nitems;
    int nranks;
    struct plan_arena *arena;  /* holds the model and the item lists */
} save_plan;

/* Merges the gathered local plans (concatenated, counts per rank) into the full model and every rank's
 * items.  Errors (identical on every rank): SCK_ERR_MISMATCH (kind/dtype/shape differ across ranks),
 * SCK_ERR_COVERAGE (shards overlap or leave holes), SCK_ERR_INVALID_ARG (a blob/value with no data
 * anywhere; a meta.pt entry rank 0 does not supply), SCK_ERR_FORMAT (corrupt plan), SCK_ERR_NOMEM. */
int plan_build(const uint8_t *all, const size_t *counts, int nranks, save_plan *out);

/* The same; only_rank >= 0: check everything as plan_build does (same errors), but keep only that
 * rank's items and no model (the items' entry/chunk indexes are still those of the full model).  Each
 * rank's part of `all` starts with `skip` bytes that are not its plan (a part shorter than that:
 * SCK_ERR_FORMAT). */
int plan_build_ex(const uint8_t *all, const size_t *counts, size_t skip, int nranks, int only_rank, save_plan *out);

void plan_free(save_plan *p);

#endif
