/* zip.h - the uncompressed ("stored") zip archives torch.save produces, written and read.
 *
 * Writing is split into a plan of segments so tensor payloads can be written straight from the
 * caller's buffer: the plan holds header bytes; payload segments refer back to the entries.
 * Reading works on a window [base, base+len) of a file through a pread callback, because DCP
 * concatenates many archives into one file and each archive's offsets are relative to its start.
 */
#ifndef SCK_ZIP_H
#define SCK_ZIP_H

#include <stddef.h>
#include <stdint.h>

#include "base/util.h"

typedef struct zip_entry {
    const char *name;       /* without prefix, e.g. "data.pkl", "data/0" */
    const void *data;       /* payload (may be NULL when size is 0) */
    uint64_t size;
    uint32_t crc;           /* CRC-32 (zip polynomial) of the payload */
} zip_entry;

typedef struct zip_segment {
    int entry;              /* -1: bytes from the plan's header buffer; >= 0: payload of entries[entry] */
    uint64_t buf_off;       /* entry == -1: offset into plan->hdr.data */
    uint64_t len;
} zip_segment;

typedef struct zip_plan {
    sck_buf hdr;            /* all non-payload bytes, concatenated */
    zip_segment *seg;
    size_t nseg;
    uint64_t total;         /* archive length */
    uint64_t *payload_off;  /* per entry: payload offset relative to archive start */
} zip_plan;

/* What fills the alignment padding before a payload (the data of a "FB" extra field), as torch writes it. */
#define ZIP_PAD_BYTE 'Z'

/* Lays out a stored zip of `n` entries named "<prefix>/<name>".  Each payload starts at an offset
 * such that (file_offset + payload offset) % align == 0 (align a power of two >= 1; padding goes in
 * an extra field, as torch does with 64).  ZIP64 fields are used when any size/offset needs them.
 * Errors: SCK_ERR_INVALID_ARG, SCK_ERR_NOMEM.  Free with zip_plan_free (also after failure). */
int zip_plan_build(zip_plan *p, const zip_entry *e, size_t n, const char *prefix,
                   uint64_t file_offset, uint32_t align);
/* The same, except that entry `big` (SIZE_MAX: none) is aligned to big_align: a tensor payload can
 * start on a page while the small records around it keep the 64 bytes torch uses. */
int zip_plan_build_ex(zip_plan *p, const zip_entry *e, size_t n, const char *prefix, uint64_t file_offset,
                      uint32_t align, size_t big, uint32_t big_align);
void zip_plan_free(zip_plan *p);
/* Convenience: the whole archive (headers + payloads) into `out`. */
int zip_build_mem(sck_buf *out, const zip_entry *e, size_t n, const char *prefix, uint32_t align);

/* CRC-32 (zip/zlib polynomial, via ISA-L) of a buffer, continuing from `crc` (start with 0). */
uint32_t sck_crc32(uint32_t crc, const void *p, size_t n);

/* ---- reader ---- */
typedef int (*zip_pread_fn)(void *ctx, void *buf, size_t n, uint64_t off);

typedef struct zip_rec {
    char *name;             /* with the prefix stripped ("data.pkl", "data/0", "version", ...) */
    uint64_t data_off;      /* absolute offset of the payload (base + relative) */
    uint64_t size;
    uint32_t crc;
} zip_rec;

typedef struct zip_dir {
    char *prefix;           /* the common top folder, e.g. "archive" */
    zip_rec *rec;
    size_t n;
} zip_dir;

/* Reads the central directory of the archive occupying [base, base+len) via `rd`.  Checks: EOCD
 * (and ZIP64 records) inside the window, every record stored (method 0) with compressed == uncompressed
 * size, local header consistent with the central directory, payload inside the window, names share one
 * top folder.  `what` names the file in errors.
 * Errors: SCK_ERR_FORMAT (message says what and at which offset), SCK_ERR_UNSUPPORTED (compressed
 * records, multi-disk), SCK_ERR_IO (from rd), SCK_ERR_NOMEM. */
int zip_read_dir(zip_pread_fn rd, void *ctx, uint64_t base, uint64_t len, const char *what, zip_dir *out);
void zip_dir_free(zip_dir *d);
/* Record by name without prefix, or NULL. */
const zip_rec *zip_find(const zip_dir *d, const char *name);

/* pread callbacks: over a file descriptor (ctx = pointer to int fd) and over memory (ctx = zip_mem*). */
int zip_pread_fd(void *ctx, void *buf, size_t n, uint64_t off);
typedef struct zip_mem { const uint8_t *data; uint64_t len; } zip_mem;
int zip_pread_mem(void *ctx, void *buf, size_t n, uint64_t off);

#endif
