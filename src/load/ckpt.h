/* ckpt.h - an open checkpoint: its model plus open files and per-chunk decode caches. */
#ifndef SCK_CKPT_H
#define SCK_CKPT_H

#include <stddef.h>

#include "format/dcp_meta.h"
#include "io/rcache.h"
#include "io/rpipe.h"

#define CK_IO_AUTO 0                /* O_DIRECT for large items not in the page cache, when aligned */
#define CK_IO_DIRECT 1
#define CK_IO_BUFFERED 2
#define SMALL_ITEM (1u << 20)        /* items up to this size are read whole, with the items after them */

/* 16 bytes a chunk: a load of 80 000 chunks makes one of these per chunk on every rank, and fresh
 * memory is not free. */
typedef struct ck_res {
    uint64_t data_off;              /* absolute file offset of element 0 of the chunk's view */
    uint32_t strides;               /* element strides of the stored view: 0, row-major over the chunk's
                                     * box (box_strides; every item we write), else ck->strides[k - 1] */
    uint8_t done;
    uint8_t swap;                   /* stored big-endian: bytes per component to reverse, else 0 */
    uint8_t verified;               /* the item's bytes matched its CRC-32C (torch-written: its storage
                                     * record matched its zip CRC-32) */
} ck_res;

/* A torch-written item's storage record: the item has no CRC-32C, so its zip CRC-32 is what a read
 * checks (box_read.c).  Kept apart from ck_res, which stays 16 bytes for checkpoints of our own. */
typedef struct ck_zrec {
    uint64_t off, len;              /* absolute file range of the record's bytes */
    uint32_t crc;                   /* the CRC-32 its zip directory records */
    char name[44];                  /* "data/0", for messages (cut if longer) */
} ck_zrec;

/* The end of a piped item's check, left for when the next item's read is under way (box_read.c's
 * read_run_checked): the CRC-32C of the item so far, its last slice (in the caller's buffer) and the
 * CRC-32C of the bytes after it. */
/* A growing array of runs {src offset, dst offset or address, bytes}: the runs of an item are
 * collected per item, and a fresh malloc of each list faulted its pages in and its free handed them
 * back (a TLB flush each, a fifth of a column load's CPU at 8 ranks). */
typedef struct ck_runbuf {
    uint64_t (*r)[3];
    size_t cap;
} ck_runbuf;

typedef struct ck_pending {
    int on;
    size_t ei, ci;
    uint32_t crc;                   /* of the item's bytes before `last` */
    const uint8_t *last;
    uint64_t last_len;
    uint32_t tail_crc;              /* of the item's bytes after `last` (from 0) */
    uint64_t tail_len;
} ck_pending;

/* Where an item lies: the index of items by file and offset finds the one after a given item. */
typedef struct ck_span {
    uint32_t file;
    uint32_t tail;                  /* the item's ck_chunk.tail */
    uint64_t off, len;
    uint64_t head;                  /* its ck_chunk.payload: the bytes before its payload, or 0 */
} ck_span;

/* A checksummed range of an item's file bytes, one part of a combined check (src/load_checks.h):
 * what a rank sends in load's final agreement. */
typedef struct ck_seg {
    uint64_t item;                  /* item number across entries, in model order */
    uint64_t off, len;              /* absolute file range */
    uint32_t crc;                   /* CRC-32C of those file bytes (before any byte swap) */
    uint32_t pad;
} ck_seg;

/* This rank's share of the combined check of one item: while copying its runs it checksums those that
 * are segments (r[0..nseg)); the owner also reads the gaps nobody else reads (r[nseg..nseg+ngap),
 * headers and trailer included) only to checksum them.  r[k][2]: 1 once recorded. */
typedef struct ck_comb {
    size_t ei, ci;
    uint64_t item;
    size_t nseg, ngap;
    uint64_t (*r)[3];
} ck_comb;

typedef struct ck_file {
    int fd;                         /* -1 until opened; headers, windows and checks read through it */
    int sfd;                        /* the same file again, for long runs of tensor data: a read-ahead
                                     * state of their own, not reset by the header reads between them */
    int dfd;                        /* the same file with O_DIRECT: -1 until opened, -2 unavailable */
    uint64_t size;
} ck_file;

/* A model the thread-ranks of one load read together (ckpt_share): the last close frees it. */
typedef struct ck_shared ck_shared;

/* A part of an item this rank checks that another thread rank of the load wants: the item's owner
 * copies it into that rank's buffer once the item is checked, so the other rank reads nothing of it.
 * Either one run (a row block of a small item) or, with `want` set, that rank's whole overlap with the
 * chunk as many short runs (a column block), which the owner copies out in its own pass over the item. */
typedef struct ck_hand {
    size_t ei, ci;
    uint64_t run, len;              /* the run's file offset and length, inside the item (no `want`) */
    uint8_t *dst;                   /* the run's destination, or the other rank's buffer for `want` */
    const sck_box *want;            /* the other rank's box (its state's, alive until the load ends) */
    int done;                       /* `want`'s runs are in place */
} ck_hand;

struct sck_ckpt {
    char *dir;
    uint64_t dir_dev, dir_ino;      /* dir's identity when opened: a save replacing it makes a new one */
    int dir_known;
    int files_may_link;             /* safetensors sources: data files may be symbolic links */
    ck_meta m;                      /* read-only once built; owned unless `shared` */
    ck_shared *shared;              /* m is a copy of a shared model's struct, or NULL */
    ck_file *files;                 /* parallel to m.files */
    ck_res **res;                   /* per entry, per chunk: into res_pool, made on the first resolve */
    ck_res *res_pool;
    int64_t (*strides)[SCK_MAX_DIMS]; /* views that are not row-major (ck_res.strides) */
    size_t nstrides, capstrides;
    size_t res_pool_n;
    ck_zrec *zrecs;                 /* storage records of resolved torch-written items */
    size_t nzrecs, capzrecs;
    uint32_t *zrec_of;              /* parallel to res_pool: 1 + index into zrecs, 0 none; lazy */
    size_t *order;                  /* scratch */
    int verify;                     /* check CRC-32Cs when reading (default on) */
    int io;                         /* CK_IO_AUTO (the default), CK_IO_DIRECT or CK_IO_BUFFERED */
    int direct;                     /* the item being read: its long page-aligned runs with O_DIRECT
                                     * (decided per item from `io`, see item_file.c's ck_choose_direct) */
    rcache rc;                      /* windows for headers, small items and short runs */
    uint8_t *scratch;               /* small items read in batches: their bytes around the runs; lazy, sck_big_alloc'ed */
    ck_runbuf runbuf[3];            /* run lists kept from item to item (box_read.c's ck_read_overlap, ck_merge_hands) */
    rpipe *rp;                      /* reads long ranges ahead while they are checksummed; lazy */
    int rp_failed;                  /* no pipe could be made: long ranges go through the windows */
    ck_pending pend;                /* the last check of a piped item, done while the next one is read */
    const struct ck_want *look;     /* the read after the current one (ckpt_run_reads), whose range a
                                     * piped read queues on the pipe behind its own; NULL: none */
    size_t look_ci;                 /* its chunk */
    uint32_t advised_file;          /* the item whose headers prefetch_next asked for last (file, offset) */
    uint64_t advised_off;
    ck_span *spans;                 /* every chunk's item, by file and offset; built on first use */
    size_t nspans;
    ck_span *bigs;                  /* the same for items over SMALL_ITEM only */
    size_t nbigs;
    uint8_t *peer_checks;           /* by item (m.item_base[ei] + ci): 1 if another rank of this load
                                     * checks the item (src/load_checks.h), so reads here copy only
                                     * their runs; NULL (the default): every item read is checked;
                                     * 2: checked by combining the readers' CRCs (combs below) */
    ck_comb *combs;                 /* by (ei, ci): this rank's shares of combined checks */
    size_t ncombs;
    ck_seg *segs;                   /* CRCs this rank computed for combined checks, in reading order */
    size_t nsegs, capsegs;
    int plan_failed;                /* planning this rank's share of the checks failed (1: out of memory,
                                     * 2: a malformed list from a rank): the load must fail */
    int files_disjoint;             /* the load's ranks read disjoint sets of files (lc_assign): no item
                                     * is checked by combining CRCs, so no rank has segs to share */
    int rank, nranks;               /* this reader among a load's ranks (0 of 1 outside a load) */
    int one_cache;                  /* the load's ranks share one page cache (thread ranks): what one
                                     * reads, the others then find there (load_checks' owners) */
    ck_hand *hands;                 /* by (ei, ci): other thread ranks' runs of items this rank checks,
                                     * copied into their buffers once checked (load_handoff.h); sck_big_alloc'ed */
    size_t nhands;
    size_t hand_finger;             /* where hands_of found the last item's: the next search starts there */
    int from_side;                  /* the model came from .metadata.sck (sck_ckpt_verify compares it) */
    int full_resolve;               /* parse every archive, checking the cache's payload offsets
                                     * against it (sck_ckpt_verify), rather than trusting them */
    /* A Fabric checkpoint's meta.pt (src/meta_pt.h): its entries follow the model's, entry m.n + k
     * being the k-th of its keys in sorted order. */
    sck_value *meta_pt;             /* its dict, or NULL */
    size_t n_meta;
    size_t *meta_order;             /* index in meta_pt of the k-th key in sorted order */
    uint64_t *meta_nbytes;          /* per meta_pt item: the bytes of its pickle, as a DCP byte item's */
};

/* Entries of ck: the model's, then meta.pt's. */
static inline size_t ckpt_count(const sck_ckpt *ck) { return ck->m.n + ck->n_meta; }
/* Entry i's key (i < ckpt_count). */
const char *ckpt_key(const sck_ckpt *ck, size_t i);
/* 1 if entry i is a DCP byte item or a meta.pt entry, 0 for a tensor. */
static inline int ckpt_is_bytes(const sck_ckpt *ck, size_t i) { return i >= ck->m.n || ck->m.e[i].is_bytes; }
/* ckpt_count's index of meta.pt's `key`, or -1. */
long ckpt_meta_find(const sck_ckpt *ck, const char *key);
/* The value of meta.pt entry i (m.n <= i < ckpt_count), borrowed. */
const sck_value *ckpt_meta_value(const sck_ckpt *ck, size_t i);
/* Reads the directory's meta.pt, if it has one, into ck (src/meta_pt.h); a key that is also one of the
 * model's is SCK_ERR_FORMAT.  Errors as meta_pt_read. */
int ckpt_attach_meta_pt(sck_ckpt *ck);

/* ck->peer_checks for item (ei, ci): 0 (this rank checks it, or no table), 1 or 2. */
static inline int ckpt_peer_mark(const sck_ckpt *ck, size_t ei, size_t ci) {
    return ck->peer_checks ? ck->peer_checks[ck->m.item_base[ei] + ci] : 0;
}

/* Where ck_ov_begin starts on entry e: a same-layout load's rank r wants what rank r of as many saved. */
static inline size_t ckpt_chunk_hint(const sck_ckpt *ck, const ck_entry *e) {
    return e->nchunks * (size_t)ck->rank / (size_t)(ck->nranks > 0 ? ck->nranks : 1);
}

/* Where file offset `off` of file `file` lies, counted in files: the file's index plus how far into it
 * (by its extent) the offset is.  Reading orders (ckpt_read_boxes) and check owners (load_checks)
 * share the files among n ranks as n equal parts of this measure. */
static inline double ckpt_file_pos(const uint64_t *ext, uint32_t file, uint64_t off) { /* ext: ck->m.file_end */
    return file + (ext[file] ? (double)off / (double)ext[file] : 0.0);
}

/* Opens DCP directory `dir`: builds the sck_ckpt from the model cache beside `.metadata` when that
 * belongs to it (src/meta_side.h: `.metadata` is then not even read), else by decoding the pickle.  When the cache served and wire
 * is not NULL, *wire (from sck_big_alloc: the caller frees it with sck_big_free) holds its meta_wire
 * bytes, else NULL.  Errors: SCK_ERR_IO and the
 * decoders' (SCK_ERR_FORMAT, SCK_ERR_UNSUPPORTED, SCK_ERR_NOMEM), SCK_ERR_COVERAGE (overlapping chunks). */
/* Sets the identity of ck->dir that reads compare with to tell a replaced checkpoint (SCK_ERR_BUSY). */
void ckpt_set_dir_id(sck_ckpt *ck, uint64_t dev, uint64_t ino, int known);
int ckpt_open_dcp(const char *dir, sck_ckpt **out, uint8_t **wire, size_t *wire_len);
/* Builds an sck_ckpt from a finished model (safetensors sources); takes ownership of *m.  Checks that
 * no two chunks of a tensor overlap (SCK_ERR_COVERAGE) unless `checked`: the model is one rank 0 built
 * and checked, decoded here from its broadcast bytes (the same check on the same bytes, on every rank,
 * was a tenth of a small-tensor load's CPU). */
int ckpt_from_model(const char *dir, ck_meta *m, int checked, sck_ckpt **out);
/* Makes ck's model shared with `extra` more sck_ckpt, each made by ckpt_from_shared, and returns it:
 * thread-ranks of one process then decode and hold one model, not one each.  Errors: SCK_ERR_NOMEM. */
int ckpt_share(sck_ckpt *ck, int extra, ck_shared **out);
/* Builds an sck_ckpt for `dir` on shared model s, taking over one of its references (on failure too).
 * The model was checked where it was built.  Errors: SCK_ERR_NOMEM. */
int ckpt_from_shared(const char *dir, ck_shared *s, sck_ckpt **out);
/* Drops n references to s (those of ranks that never got it); the last one frees the model. */
void ckpt_shared_release(ck_shared *s, int n);
/* Safetensors sources: a single file, or a directory with model.safetensors.index.json. */
int ckpt_open_safetensors(const char *path, sck_ckpt **out);
/* Resolves where chunk ci of tensor entry ei keeps its elements (zip + data.pkl checked against the
 * metadata); *out stays owned by ck. */
int ckpt_resolve_chunk(sck_ckpt *ck, size_t ei, size_t ci, ck_res **out);
/* Reads all bytes of chunk ci's item and, if the metadata records a CRC-32C, checks them against it;
 * without one (torch-written), checks its zip records as ckpt_check_zip_item.  `known`, if not NULL, already holds the file's bytes [known_off, known_off+known_len) (inside the
 * item), which are then not read again.  Errors: SCK_ERR_CHECKSUM (names file, key, item offset and
 * chunk), SCK_ERR_FORMAT, SCK_ERR_IO, SCK_ERR_NOMEM. */
int ckpt_check_item(sck_ckpt *ck, size_t ei, size_t ci, const uint8_t *known, uint64_t known_off, uint64_t known_len);
/* The file ranges (absolute offset, length) box_runs gives for overlap ov of chunk ci with want,
 * resolving the chunk first: the first `cap` into rg, their count in *n (may exceed cap).  Errors: the
 * resolve's; SCK_ERR_FORMAT if a run lies outside the item. */
int ckpt_overlap_runs(sck_ckpt *ck, size_t ei, size_t ci, const sck_box *want, const sck_box *ov, uint64_t (*rg)[2], size_t cap,
                      size_t *n);
/* Asks the kernel to read ahead the headers of chunk ci's item (its first and last 64 KiB): advice
 * only, no error. */
void ckpt_prefetch_headers(sck_ckpt *ck, size_t ei, size_t ci);
/* SCK_ERR_CHECKSUM naming file, key, item offset and chunk: the item's bytes have CRC-32C `crc`. */
int ckpt_crc_mismatch(const sck_ckpt *ck, size_t ei, size_t ci, uint32_t crc);
/* SCK_ERR_CHECKSUM naming file, key, chunk and the zip record (name, absolute offset, length) whose
 * bytes do not match the zip CRC-32 `want` its directory records (SCK_ERR_BUSY where a save replaced
 * the checkpoint meanwhile). */
int ckpt_zip_mismatch(const sck_ckpt *ck, size_t ei, size_t ci, const char *rec, uint64_t off, uint64_t len, uint32_t want);
/* SCK_ERR_CHECKSUM for byte entry ei, whose item is not a torch.save archive and has no CRC-32C:
 * torch writes every byte item with torch.save, so one without the zip signature is damaged (a zeroed
 * block, say), and nothing could show it otherwise (SCK_ERR_BUSY where a save replaced the checkpoint). */
int ckpt_unvouched_bytes(const sck_ckpt *ck, size_t ei);
/* Checks every record of chunk ci's item, a torch.save archive without a CRC-32C (torch-written),
 * against the zip CRC-32 its directory records, reading each record whole.  *summed (may be NULL):
 * 1 if the item is an archive and was checked.  A byte item that is not an archive is refused
 * (ckpt_unvouched_bytes).  Errors: SCK_ERR_CHECKSUM (ckpt_zip_mismatch), SCK_ERR_FORMAT (no
 * readable zip directory), SCK_ERR_IO, SCK_ERR_NOMEM. */
int ckpt_check_zip_item(sck_ckpt *ck, size_t ei, size_t ci, int *summed);
/* Reads box `want` of entry `ei` into dst (row-major over want). */
int ckpt_read_box(sck_ckpt *ck, size_t ei, const sck_box *want, void *dst);
/* One box of a tensor entry to read into dst (row-major over *box). */
typedef struct ck_want {
    size_t ei;
    const sck_box *box;
    void *dst;
} ck_want;
/* Reads n boxes, as ckpt_read_box each, but every box is checked (kind, dtype, fit, coverage) before
 * anything is read, and the overlaps are read in file order.  Errors: the first failing box's check,
 * then the first failing read's; SCK_ERR_NOMEM.  The same as ckpt_plan_reads, then ckpt_run_reads. */
int ckpt_read_boxes(sck_ckpt *ck, const ck_want *w, size_t n);
/* Asks the CPU for the parts of box b a load reads (ndim, off, size): a state's boxes lie apart in
 * memory, and loops over thousands of them otherwise wait on each one's first touch. */
static inline void ckpt_prefetch_box(const sck_box *b) {
    __builtin_prefetch(b);
    __builtin_prefetch((const char *)b + offsetof(sck_box, size));
}
#define CK_AHEAD 8 /* how many wants ahead loops over them ask for their boxes */
/* Asks the CPU for entry e's chunk records and their places (the first 1 KiB of each): every want's
 * planning reads them, and a rank's pass over a model of 80 000 chunks (8 MB, shared by the thread
 * ranks) otherwise waits on each entry's first touch.  Loops ask for the entry itself CK_AHEAD wants
 * before this. */
static inline void ckpt_prefetch_chunks(const ck_entry *e) {
    size_t n = e->nchunks * sizeof *e->chunks, d = e->nchunks * 2 * (size_t)e->ndim * sizeof *e->dims;
    for (size_t o = 0; o < n && o < 1024; o += 64) __builtin_prefetch((const char *)e->chunks + o);
    for (size_t o = 0; o < d && o < 1024; o += 64) __builtin_prefetch((const char *)e->dims + o);
}
/* ckpt_read_boxes in two steps: a load plans its checks (src/load_checks.h) from the planned reads.
 * ckpt_plan_reads checks every box and orders the reads (errors as ckpt_read_boxes'; on error *r
 * holds nothing); ckpt_run_reads then reads them, wants w unchanged (their buffers too: the plan
 * keeps where single runs land), and frees *r whatever it returns.  r->op is sck_big_alloc'ed (a caller that drops a plan unrun frees it with sck_big_free). */
typedef struct read_op {           /* one overlap to read: want k's part in chunk ci of its entry */
    uint32_t file;
    uint8_t handed;                 /* the item's owner copies it into place (load_handoff.h): skip it */
    uint8_t whole;                  /* the overlap is all of want k's box (the box is not read again to know) */
    uint8_t chunk;                  /* the overlap is all of the chunk */
    uint8_t runs;                   /* an item of ours with a checksum (the model cache places its payload:
                                     * row-major, little-endian): its overlap is 1 run (below, inside the
                                     * item) or 2 (more); 0: not known.  Worked out once, when planned:
                                     * the checks' planning, the hand-overs and the batches all ask */
    uint64_t off;                   /* the item's file and offset: the reading order */
    uint32_t k, ci;                 /* want k (ckpt_plan_reads' wants: fewer than 2^32), chunk ci */
    uint32_t ei;                    /* want k's entry: other ranks' hand-over planning reads it here */
    uint64_t elems;                 /* elements in the overlap */
    uint64_t run, len;              /* runs == 1: the run's file offset and length */
    uint8_t *dst;                   /* runs == 1: where the run goes in want k's buffer */
} read_op;
typedef struct ck_reads {
    read_op *op;
    size_t m;
} ck_reads;
int ckpt_plan_reads(sck_ckpt *ck, const ck_want *w, size_t n, ck_reads *r);
int ckpt_run_reads(sck_ckpt *ck, const ck_want *w, ck_reads *r);
/* Reads the raw bytes of a bytes entry (caller frees). */
int ckpt_read_item(sck_ckpt *ck, size_t ei, uint8_t **data, size_t *n);

#endif
