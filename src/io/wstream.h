/* wstream.h - one rank's data file, written by a background thread.
 *
 * Appends are either copied into a bounded set of staging buffers (headers; with O_DIRECT also small
 * tensors) or written straight from the caller's memory, no copy: a large piece in the same pwritev
 * as the staged bytes before it (its headers), and in buffered mode small tensors as pieces of the
 * batch their headers are staged in (one pwritev per batch).  One writer thread issues the writes in file order, so the caller's thread keeps encoding
 * and checksumming while the disk works.  Buffered mode streams writeback behind the writer
 * (sync_file_range + dropping written pages) when the file is to be fsynced, so the final fsync is
 * short and the save does not fill the page cache.  Direct mode opens with O_DIRECT: every write is
 * 4 KiB aligned (unaligned data goes through staging; the file is padded and truncated at close).
 */
#ifndef SCK_WSTREAM_H
#define SCK_WSTREAM_H

#include <stdint.h>

#include "base/util.h"

#define WS_ALIGN 4096u                  /* O_DIRECT alignment of offsets, lengths and memory */
#define WS_STAGE_DEFAULT (64u << 20)    /* bytes per staging buffer */
#define WS_NBUFS_DEFAULT 2u
#define WS_REF_MIN (256u << 10)         /* appends this large may be queued by reference */
#define WS_IOV_MIN 1024u                /* buffered mode: smaller by-reference appends are copied */

/* Staging buffers kept from one stream to the next (an async save handle's): mapped by the first
 * stream that needs them, handed back at its close instead of unmapped, freed with ws_pool_free.
 * A stream whose staging size differs unmaps the pool's buffers and maps its own. */
#define WS_POOL_MAX 4u
typedef struct ws_pool {
    uint8_t *buf[WS_POOL_MAX];
    uint64_t size;          /* bytes of each buffer */
    /* NULL, or where the buffers come from instead of mmap (a device's pinned memory): alloc returns
     * n bytes, WS_ALIGN-aligned, or NULL; release frees them (ws_pool_free). */
    void *(*alloc)(void *ctx, size_t n);
    void (*release)(void *ctx, void *p, size_t n);
    void *ctx;
} ws_pool;

void ws_pool_free(ws_pool *p);

typedef struct ws_opts {
    uint64_t stage_bytes;  /* size of each staging buffer, rounded up to WS_ALIGN (0: WS_STAGE_DEFAULT) */
    unsigned nbufs;        /* staging buffers (0: WS_NBUFS_DEFAULT; at least 1) */
    int direct;            /* O_DIRECT; falls back to buffered I/O where the file system refuses it */
    int do_fsync;          /* fsync at close */
    ws_pool *pool;         /* NULL, or where staging buffers come from and go back to (nbufs <=
                            * WS_POOL_MAX); only one open stream may use a pool at a time */
} ws_opts;

typedef struct wstream wstream;

/* Creates/truncates `path` and starts the writer thread.  Errors: SCK_ERR_IO, SCK_ERR_NOMEM. */
int ws_open(wstream **out, const char *path, const ws_opts *o);
/* Appends n bytes at the end of the file.  by_ref: the caller guarantees p stays valid and unchanged
 * until ws_close/ws_abort returns, so pieces are written from it without a copy: from WS_REF_MIN
 * bytes on as the end of the batch staged before them, or by a write of their own when nothing is
 * staged (with O_DIRECT: their 4 KiB-aligned part), and in buffered mode
 * from WS_IOV_MIN bytes on as a piece of the batch the staged bytes around them go in (one pwritev).
 * Blocks while every staging buffer is in flight.  Errors: the writer's first error (SCK_ERR_IO,
 * with its message), SCK_ERR_NOMEM. */
int ws_append(wstream *w, const void *p, uint64_t n, int by_ref);
/* Appends n bytes of constant memory that outlives the stream (zip padding): by reference, never
 * copied, where the mode allows (O_DIRECT: the file position, p and n all WS_ALIGN-aligned;
 * buffered: from WS_IOV_MIN bytes on), as a piece of the current batch; copied otherwise.  Staging
 * pages a copy would touch cost a page fault each on a fresh buffer.  Errors: as ws_append. */
int ws_append_const(wstream *w, const void *p, uint64_t n);
/* Room for up to n bytes in the current staging buffer (taking one, waiting for the writer, if
 * none), for a caller that fills staging itself (a device's copy to host): *p and *got (1 to n) bytes.
 * ws_commit(w, k) then appends the first k <= *got of them, as ws_append would have copied them.
 * Errors: as ws_append. */
int ws_reserve(wstream *w, uint64_t n, uint8_t **p, uint64_t *got);
int ws_commit(wstream *w, uint64_t k);
/* Bytes appended so far (the file offset of the next append). */
uint64_t ws_pos(const wstream *w);
/* Bytes copied into staging buffers so far. */
uint64_t ws_copied(const wstream *w);
/* Times the caller has waited for the writer to give a staging buffer back. */
uint64_t ws_waits(const wstream *w);
/* 1 if the file is being written with O_DIRECT. */
int ws_is_direct(const wstream *w);
/* Hands what is staged to the writer and asks it to finish the file on its own thread (the last
 * writes, the truncation, the fsync), so that the caller can work meanwhile; no more appends.
 * Returns an error the writer has already met (SCK_ERR_IO, SCK_ERR_NOMEM); call ws_close either way. */
int ws_close_start(wstream *w);
/* ws_close_start (unless called), waits for the writer to finish the file, closes and frees.  Returns
 * the first error of the whole stream.  Errors: SCK_ERR_IO. */
int ws_close(wstream *w);
/* Stops the writer after its current write, closes and frees without flushing (after an error). */
void ws_abort(wstream *w);

#endif
