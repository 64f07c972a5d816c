/* box.h - n-d box arithmetic for resharding: intersections, flat-range decomposition, and the
 * byte runs that move an overlap from one layout to another. */
#ifndef SCK_BOX_H
#define SCK_BOX_H

#include <stddef.h>
#include <stdint.h>

#include "shardckpt.h"

typedef struct sck_box {
    int ndim;
    int64_t off[SCK_MAX_DIMS];
    int64_t size[SCK_MAX_DIMS];
} sck_box;

/* Number of elements (product of sizes; 1 for ndim 0). No overflow check: boxes are validated first. */
uint64_t box_numel(const sck_box *b);
/* 1 if any size is 0. */
int box_empty(const sck_box *b);
/* 1 and *out = a ∩ b if the intersection is non-empty, else 0.  a and b must have equal ndim. */
int box_intersect(const sck_box *a, const sck_box *b, sck_box *out);
/* 1 if b lies inside shape (0 <= off, off+size <= shape, no overflow). */
int box_within(const sck_box *b, const int64_t *shape);
/* 1 if a and b are the same box. */
int box_equal(const sck_box *a, const sck_box *b);

/* Splits the flat row-major range [begin, begin+count) of a tensor of `shape` into at most
 * 2*ndim-1 boxes (fewer when aligned), in flat order, each contiguous in memory, and whose
 * concatenated row-major elements are exactly the range.  out must have room for 2*SCK_MAX_DIMS boxes.
 * ndim 0: the range must be [0,1) or empty.  Returns the number of boxes (0 for count 0), or -1 if the
 * range does not fit the shape. */
int box_from_flat(int ndim, const int64_t *shape, int64_t begin, int64_t count, sck_box *out);

/* Row-major strides (in elements) of a box's own extent. */
void box_strides(const sck_box *b, int64_t *strides);

/* Callback for a run of `nbytes` contiguous in both source and destination. */
typedef int (*box_run_fn)(void *ctx, uint64_t src_off, uint64_t dst_off, uint64_t nbytes);

/* Enumerates the byte runs moving region `ov` (inside both src and dst boxes) from a source laid
 * out over `src` with element strides `src_strides` (NULL = row-major over src's sizes) to a
 * destination laid out row-major over `dst`.  Offsets are bytes relative to each buffer's start
 * (the element at src->off / dst->off).  Adjacent runs are merged: for two row-major layouts of the
 * same box the callback fires once.  Runs come in increasing destination order.  Stops and returns the
 * first non-zero callback result; returns 0 otherwise. */
int box_runs(const sck_box *src, const int64_t *src_strides, const sck_box *dst, const sck_box *ov,
             size_t elem, box_run_fn fn, void *ctx);

/* 1 if region `ov` (non-empty, inside both boxes) is one run in both row-major layouts, with that run's
 * byte offsets in src's and dst's layouts and its length; else 0.  The run box_runs would report, found
 * in O(ndim) where box_runs walks strides (a plan makes one of these per want and chunk).  0 says
 * nothing about the runs: ask box_runs. */
int box_single_run(const sck_box *src, const sck_box *dst, const sck_box *ov, size_t elem, uint64_t *src_off, uint64_t *dst_off,
                   uint64_t *len);

/* Copies region `ov` from src (layout as in box_runs) to dst (row-major over dst box) in memory. */
void box_copy(void *dst, const sck_box *dbox, const void *src, const sck_box *sbox,
              const int64_t *src_strides, const sck_box *ov, size_t elem);

/* 1 if the boxes (all of `shape`'s ndim) cover shape exactly once (no overlap, no hole, all within).
 * On failure returns 0 and, if non-NULL, *bad_a and *bad_b receive the indexes of an offending pair (or
 * the single out-of-range box in *bad_a with *bad_b = -1, or -1/-1 for a hole).
 * Must be better than O(n^2) for many boxes (sort + sweep is fine). */
int box_cover_exact(int ndim, const int64_t *shape, const sck_box *boxes, size_t n, long *bad_a, long *bad_b);

#endif
