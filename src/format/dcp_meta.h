/* dcp_meta.h - the checkpoint model (entries, chunks, files) and its `.metadata` pickle form. */
#ifndef SCK_DCP_META_H
#define SCK_DCP_META_H

#include "base/box.h"
#include "base/util.h"

typedef struct ck_chunk {
    uint64_t offset;        /* item start in the file */
    uint64_t length;        /* item length */
    uint64_t payload;       /* where in the item our save put the payload (contiguous row-major,
                             * little-endian), known from .metadata.sck only; 0: unknown (the
                             * archive is parsed to find it) */
    uint32_t file;          /* index into ck_meta.files */
    uint32_t crc32c;        /* CRC-32C of the item's bytes [offset, offset+length) */
    uint8_t raw;            /* payload is plain row-major bytes at [offset, offset+length) (safetensors) */
    uint8_t transformed;    /* DCP transform descriptors present: we cannot decode the item */
    uint8_t has_crc;        /* crc32c is known (written by shardckpt; torch records none) */
    uint32_t tail;          /* bytes of the item after its payload, where `payload` is known (set when
                             * a checkpoint is opened); 0: unknown */
} ck_chunk;

typedef struct ck_entry {
    char *key;
    int is_bytes;
    int dtype;              /* sck_dtype, or -1 when the stored dtype is not one we support */
    char dtype_name[32];    /* as stored (e.g. "float32", "complex64") */
    int ndim;
    int64_t shape[SCK_MAX_DIMS];
    ck_chunk *chunks;
    int64_t *dims;          /* where each chunk sits in the global tensor: chunk c's offsets are
                             * dims[2*ndim*c ..], its sizes the ndim values after them (ck_chunk_off,
                             * ck_chunk_size).  Kept out of ck_chunk: an sck_box has room for
                             * SCK_MAX_DIMS dimensions, and 80 000 of them made a model of 25 MB
                             * that every chunk looked up missed the cache in.  NULL for ndim 0. */
    size_t nchunks;
    uint8_t *path;          /* its path in the nested state dict, encoded (src/key_path.h); NULL: the
                             * key's default path */
    uint32_t path_len;
} ck_entry;

typedef struct ck_meta {
    ck_entry *e;            /* sorted by key after ck_meta_finish */
    size_t n, cap;
    char **files;
    size_t nfiles;
    /* Set only by meta_wire_decode, which allocates per kind, not per entry: every key, chunk array
     * and file name then lies in one of these blocks.  Such a model is finished: ck_meta_add,
     * ck_entry_add_chunk and ck_meta_file must not be called on it. */
    char *key_pool;
    ck_chunk *chunk_pool;   /* chunk_pool_n chunks; it and e (cap entries) from sck_huge_calloc */
    size_t chunk_pool_n;
    int64_t *dims_pool;     /* dims_pool_n values, from sck_big_alloc (not zeroed): every entry's dims */
    size_t dims_pool_n;
    char *file_pool;
    uint8_t *path_pool;     /* meta_wire_decode: every entry's path bytes */
    /* Set by ckpt_from_model (src/ckpt.h), freed here: each data file's extent (the end of its last
     * item), nfiles values; the first item number of each entry (items counted across entries in
     * entry order), n + 1 values. */
    uint64_t *file_end;
    size_t *item_base;
} ck_meta;

/* Frees either form (per-entry allocations or the pools above) and zeroes m. */
void ck_meta_free(ck_meta *m);
/* Appends an entry with a copy of key; returns it in *out.  Errors: SCK_ERR_NOMEM. */
int ck_meta_add(ck_meta *m, const char *key, ck_entry **out);
/* Appends a chunk to e, at offsets `off` with sizes `size` (e->ndim values each, set before the first
 * chunk; NULL for ndim 0).  Errors: SCK_ERR_NOMEM. */
int ck_entry_add_chunk(ck_entry *e, const ck_chunk *c, const int64_t *off, const int64_t *size);
/* Chunk c's offsets and sizes in the global tensor (e->ndim values each; NULL for ndim 0). */
static inline const int64_t *ck_chunk_off(const ck_entry *e, size_t c) { return e->ndim ? e->dims + 2 * (size_t)e->ndim * c : NULL; }
static inline const int64_t *ck_chunk_size(const ck_entry *e, size_t c) {
    return e->ndim ? e->dims + 2 * (size_t)e->ndim * c + e->ndim : NULL;
}
/* Chunk c's place in the global tensor as a box (ndim e->ndim). */
void ck_chunk_box(const ck_entry *e, size_t c, sck_box *out);
/* Chunk c's box in *cbox (as ck_chunk_box), and 1 with its overlap with `want` in *ov, or 0 when they
 * do not meet (box_intersect). */
int ck_chunk_intersect(const ck_entry *e, size_t c, const sck_box *want, sck_box *cbox, sck_box *ov);
/* Elements of chunk c (1 for ndim 0). */
uint64_t ck_chunk_numel(const ck_entry *e, size_t c);
/* Index of file name (added if new).  Errors: SCK_ERR_NOMEM. */
int ck_meta_file(ck_meta *m, const char *name, uint32_t *idx);
/* Sorts entries by key and rejects duplicates.  Errors: SCK_ERR_FORMAT. */
int ck_meta_finish(ck_meta *m, const char *what);
/* Binary search; -1 if absent (after ck_meta_finish). */
long ck_meta_find(const ck_meta *m, const char *key);
/* ck_meta_find, trying entry `hint` first (one compare when keys are looked up in sorted order). */
long ck_meta_find_near(const ck_meta *m, const char *key, long hint);
/* The chunks of entry e that overlap box `want`, in turn, from chunk `from` on and wrapping around (a
 * hint: where a rank's own part usually is).  An open checkpoint's chunks never overlap (sck_ckpt
 * checks), so the walk stops once the overlaps found cover want: a box that one chunk holds costs
 * one intersection, not one per chunk. */
typedef struct ck_ov_it {
    const ck_entry *e;
    const sck_box *want;
    uint64_t left;          /* elements of want no overlap found so far covers */
    size_t from, k;
} ck_ov_it;
void ck_ov_begin(ck_ov_it *it, const ck_entry *e, const sck_box *want, size_t from);
/* The next overlapping chunk: its index in *ci, the overlap in *ov.  0 when there is none. */
int ck_ov_next(ck_ov_it *it, size_t *ci, sck_box *ov);
/* Chunks of every entry together. */
size_t ck_meta_nchunks(const ck_meta *m);
/* 1 if a data file name is a plain name inside the checkpoint directory (no '/', '\\', "." or ".."). */
int ck_plain_file_name(const char *s);

/* The _StorageInfo attribute holding an item's CRC-32C: torch ignores attributes it does not know. */
#define DCP_CRC_KEY "shardckpt_crc32c"

/* Serializes m as DCP's Metadata (pickle protocol 4, torch 2.x class paths); chunks with has_crc get
 * DCP_CRC_KEY in their _StorageInfo.  Errors: SCK_ERR_NOMEM. */
int dcp_meta_encode(const ck_meta *m, sck_buf *out);

/* dcp_meta_encode in two steps, for a save: the early one before the items are written (every chunk
 * then gets a CRC-32C), the late one once each chunk's storage offset, length and CRC are known: it
 * copies the early bytes around those integers, the same bytes dcp_meta_encode makes.  Rank 0
 * encodes a large .metadata early while its own file is still being written, not while every rank
 * waits for it at the end. */
typedef struct dcp_meta_early {
    sck_buf pre;   /* the pickle without each chunk's offset, length and CRC */
    size_t *at;    /* where in pre they go: 3 per chunk, in model order */
    size_t n;      /* chunks */
} dcp_meta_early;
/* Errors: SCK_ERR_NOMEM (e is then empty).  Free e with dcp_meta_early_free. */
int dcp_meta_encode_early(const ck_meta *m, dcp_meta_early *e);
/* Makes *out the .metadata of m (the model e was encoded from, with every chunk's offset, length and
 * CRC now set), in e's memory: e is consumed (left empty) and what out held is freed.  On error
 * nothing changes.  Errors: SCK_ERR_INVALID_ARG (another number of chunks, a chunk without CRC),
 * SCK_ERR_NOMEM. */
int dcp_meta_encode_late(dcp_meta_early *e, const ck_meta *m, sck_buf *out);
void dcp_meta_early_free(dcp_meta_early *e);
/* Parses a `.metadata` written by torch 1.13..2.x or by us.  Accepts both module layouts, either
 * enum encoding, missing optional fields.  Checks that every chunk has storage info, files are
 * plain names (no '/', no ".."), chunks lie inside their tensor, a DCP_CRC_KEY is a 32-bit integer.
 * `what` names the file.
 * Errors: SCK_ERR_FORMAT, SCK_ERR_UNSUPPORTED, SCK_ERR_NOMEM. */
int dcp_meta_decode(const uint8_t *data, size_t n, const char *what, ck_meta *out);

#endif
