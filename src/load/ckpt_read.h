/* ckpt_read.h - private to src/load/: the read engine's pieces shared between its files (item_file.c
 * -> item_check.c -> box_read.c -> read_plan.c -> ckpt_open.c, each calling only the ones before it),
 * the tuning constants they share, and the types they pass between them.  Each function is described
 * where it is defined. */
#ifndef SCK_CKPT_READ_H
#define SCK_CKPT_READ_H

#include <sys/uio.h>

#include "load/ckpt.h"

#define FEW_RUNS 8                   /* a part of a small item read as this many runs or fewer is read run by run */
#define HEAD_BYTES (64u << 10)       /* a large item's headers: read this much at its start or end */
#define DIRECT_RUN (1u << 20)        /* runs at least this long: O_DIRECT where asked, read ahead on the pipe */
#define WINDOW_RUN (64u << 10)       /* runs of large items shorter than this are copied out of a read window;
                                      * longer ones are read straight into the caller's buffer (a window is
                                      * filled to the item's end: a 680 KiB run of a 2 MiB item read 2 MiB,
                                      * then copied).  Small items stay in windows: they are read whole
                                      * with their neighbours, and checked from there. */
#define MAX_PKL (64u << 20)
#define MAX_RUNS (1u << 20)          /* one-pass check-and-copy keeps at most this many runs in memory */
#define WS_DIO_ALIGN 4096u           /* O_DIRECT alignment of offsets, lengths and memory */
#define PIPE_MIN (1u << 20)          /* ranges this long are read ahead on the pipe's thread */
#define PREFETCH_AHEAD (64u << 20)   /* of a large item, asked of the kernel before it is needed */
#define BATCH_IOV 1024               /* small items read together: iovecs per preadv (IOV_MAX) */
#define BATCH_BYTES (8u << 20)       /* file bytes per preadv */
#define BATCH_SCRATCH (1u << 20)     /* bytes around the runs (headers, trailers, gaps) per preadv */
#define BATCH_GAP (64u << 10)        /* a gap between two items this short is read, not skipped */
#define PEER_GAP (16u << 10)         /* the same before a run of an item another rank checks (thread ranks) */

/* Reads inside one item through the checkpoint's windows (zip_pread_fn for zip_read_dir). */
typedef struct item_rd {
    sck_ckpt *ck;
    int fd;
    const ck_chunk *c;
    uint64_t fsize;
    const char *what;
} item_rd;

/* Copies runs of one chunk from the file into the destination: long runs straight into it, short
 * ones through the checkpoint's windows. */
typedef struct run_ctx {
    item_rd *ird;
    uint64_t base;          /* absolute offset of the chunk view's element 0 */
    uint8_t *dst;
    size_t elem;
    int swap;               /* bytes per component to reverse (ck_res.swap), or 0 */
    int no_window;          /* short runs too are read straight from the file (see ck_copy_peer_checked) */
} run_ctx;

/* The runs of one overlap, kept for checking and copying in a single pass over the item. */
typedef struct run_list {
    uint64_t (*r)[3];       /* src offset, dst offset, bytes: runs [from, n) (NULL: only counted) */
    size_t n, cap;
    int ordered;            /* src offsets ascend without overlap (known for runs stored) */
    uint64_t first_src, first_dst, first_len;
    int abs;                /* the dst offsets are addresses (runs into several ranks' buffers: merge_hands) */
    ck_runbuf *buf;         /* r grows in it, up to MAX_RUNS runs (past that they are only counted: n > cap) */
    size_t from;            /* where this list begins in r (lists appended one after another) */
    size_t stop;            /* the walk stops once this many are found (0: never): "one run or more?" */
} run_list;

/* item_file.c */
int ck_replaced_error(const sck_ckpt *ck, const char *what);
void ck_advise_headers(const sck_ckpt *ck, uint32_t file, uint64_t off, uint64_t len, uint64_t ahead, uint64_t tail);
int ck_check_window(const sck_ckpt *ck, const ck_entry *e, const ck_chunk *c, uint64_t fsize);
int ck_choose_direct(sck_ckpt *ck, const ck_chunk *c, uintptr_t skew, int long_runs);
int ck_direct_fd(sck_ckpt *ck, uint32_t fi);
void ck_fill_range(sck_ckpt *ck, const ck_chunk *c, uint64_t fsize, uint64_t off, uint64_t n, uint64_t *lo, uint64_t *hi);
int ck_get_file(sck_ckpt *ck, uint32_t fi, int *fd, uint64_t *size);
int ck_item_pread(void *ctx, void *buf, size_t n, uint64_t off);
int ck_item_view(item_rd *r, uint64_t off, uint64_t n, const uint8_t **p);
void ck_item_what(const sck_ckpt *ck, const ck_entry *e, const ck_chunk *c, char *buf, size_t cap);
int ck_preadv_full(const sck_ckpt *ck, size_t ei, size_t ci, int fd, struct iovec *iov, int n, uint64_t off);
int ck_read_long(sck_ckpt *ck, uint32_t fi, uint8_t *d, uint64_t n, uint64_t abs, const char *what);
int ck_res_ready(sck_ckpt *ck, const char *key);
const int64_t *ck_res_strides(const sck_ckpt *ck, const sck_box *cbox, const ck_res *r, int64_t *buf);
int ck_resolve_reads(const sck_ckpt *ck, const ck_chunk *c);
size_t ck_span_at_or_after(const ck_span *sp, size_t n, uint32_t file, uint64_t off);
int ck_spans_ready(sck_ckpt *ck, int all);
int ck_stream_fd(sck_ckpt *ck, uint32_t fi);
void ck_swap_elems(uint8_t *p, uint64_t nbytes, size_t elem);
const ck_zrec *ck_zrec_of(const sck_ckpt *ck, const ck_res *r);

/* item_check.c */
int ck_check_and_copy(sck_ckpt *ck, size_t ei, size_t ci, run_ctx *rx, const run_list *l, int check);
int ck_checked_here(const sck_ckpt *ck, const ck_chunk *c, const ck_res *r, int peer);
int ck_collect_run(void *vctx, uint64_t s, uint64_t d, uint64_t n);
int ck_copy_peer_checked(sck_ckpt *ck, size_t ei, size_t ci, const sck_box *cbox, const sck_box *want, const sck_box *ov, const int64_t *strides, run_ctx *rx, const run_list *l);
int ck_copy_run(void *vctx, uint64_t src_off, uint64_t dst_off, uint64_t nbytes);
int ck_crc_span(item_rd *ird, uint64_t from, uint64_t to, uint32_t *crc);
int ck_crc32_span(item_rd *ird, uint64_t from, uint64_t to, uint32_t *crc);
int ck_item_peer(sck_ckpt *ck, size_t ei, size_t ci, ck_comb **cb);
int ck_pipe_begin(sck_ckpt *ck, item_rd *ird, uint8_t *d, uint64_t abs, uint64_t len);
int ck_pipe_drain_crc(sck_ckpt *ck, item_rd *ird, uint64_t len, uint32_t *crc, const uint8_t **last, uint64_t *last_len);
int ck_pipe_helpers(const sck_ckpt *ck);
int ck_piped_run(int check, const ck_res *r, const run_list *l);
void ck_prefetch_next(sck_ckpt *ck, const ck_chunk *c);
int ck_read_combined(sck_ckpt *ck, ck_comb *cb, const sck_box *cbox, const sck_box *want, const sck_box *ov, const int64_t *strides, run_ctx *rx);
run_list ck_run_list_first(void);
run_list ck_run_list_in(ck_runbuf *b, size_t from);
int ck_runbuf_grow(ck_runbuf *b, size_t need);

/* box_read.c */
int ck_finish_pending(sck_ckpt *ck);
int ck_hand_over(sck_ckpt *ck, size_t ei, size_t ci, const uint8_t *const *p, const uint64_t *at);
ck_hand *ck_hands_of(sck_ckpt *ck, size_t ei, size_t ci, size_t *n);
int ck_read_overlap(sck_ckpt *ck, size_t ei, size_t ci, const sck_box *cbox, const sck_box *want, const sck_box *ov, void *dst);

#endif
