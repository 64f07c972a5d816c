/* util.h - error reporting, growable byte buffers and small helpers shared by every module. */
#ifndef SCK_UTIL_H
#define SCK_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "shardckpt.h"


/* sck_err (record `status` and a formatted message as this thread's last error, return `status`)
 * is public, for communication backends: include/shardckpt.h. */
/* Like sck_err but appends ": strerror(errno_value)". */
int sck_err_errno(int status, int errno_value, const char *fmt, ...) SCK_PRINTF(3, 4);
/* Prefixes the current message with "<prefix>: " (keeps the status), returns `status`. */
int sck_err_wrap(int status, const char *fmt, ...) SCK_PRINTF(2, 3);
/* Sets the last error verbatim (used to replicate a peer's error). */
void sck_err_set_raw(const char *msg);
void sck_err_clear(void);
/* SCK_ERR_INVALID_ARG naming the first nonzero entry of an option struct's `reserved` array
 * ("sck_load: sck_load_opts.reserved[2] is 5, must be 0"), else SCK_OK.  `what` is "fn: struct". */
int sck_check_reserved(const char *what, const unsigned *reserved, size_t n);

/* Growable byte buffer.  All functions return SCK_OK or SCK_ERR_NOMEM. */
typedef struct sck_buf {
    uint8_t *data;
    size_t len;
    size_t cap;
} sck_buf;

void sck_buf_init(sck_buf *b);
void sck_buf_free(sck_buf *b);
int sck_buf_reserve(sck_buf *b, size_t extra);
/* Inline: encoders append a few bytes at a time, millions of times for a large checkpoint's headers
 * and metadata; only growing the buffer is a call. */
static inline int sck_buf_append(sck_buf *b, const void *p, size_t n) {
    if (n == 0) return SCK_OK;
    if (b->cap - b->len < n && sck_buf_reserve(b, n)) return SCK_ERR_NOMEM;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return SCK_OK;
}
static inline int sck_buf_put_u8(sck_buf *b, uint8_t v) { return sck_buf_append(b, &v, 1); }
static inline int sck_buf_put_le16(sck_buf *b, uint16_t v) {
    uint8_t t[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    return sck_buf_append(b, t, 2);
}
static inline int sck_buf_put_le32(sck_buf *b, uint32_t v) {
    uint8_t t[4];
    for (int i = 0; i < 4; i++) t[i] = (uint8_t)(v >> (8 * i));
    return sck_buf_append(b, t, 4);
}
static inline int sck_buf_put_le64(sck_buf *b, uint64_t v) {
    uint8_t t[8];
    for (int i = 0; i < 8; i++) t[i] = (uint8_t)(v >> (8 * i));
    return sck_buf_append(b, t, 8);
}
int sck_buf_printf(sck_buf *b, const char *fmt, ...) SCK_PRINTF(2, 3);
/* Appends n zero bytes. */
int sck_buf_zero(sck_buf *b, size_t n);

/* Little-endian loads from memory. */
static inline uint16_t sck_le16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t sck_le32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t sck_le64(const uint8_t *p) { return (uint64_t)sck_le32(p) | ((uint64_t)sck_le32(p + 4) << 32); }

/* Unsigned LEB128 varints (at most 10 bytes): the compact records of the save plan exchange. */
static inline uint8_t *sck_put_varint(uint8_t *q, uint64_t v) {
    while (v >= 0x80) {
        *q++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *q++ = (uint8_t)v;
    return q;
}
/* Reads one varint at *p (advanced past it) before end; 0 if truncated or longer than 64 bits. */
static inline int sck_get_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
    *v = 0;
    for (unsigned s = 0; s < 64 && *p < end; s += 7) {
        uint8_t b = *(*p)++;
        *v |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80)) return 1;
    }
    return 0;
}

/* Checked arithmetic: return 0 on success, 1 on overflow. */
static inline int sck_mul_overflow_u64(uint64_t a, uint64_t b, uint64_t *out) {
    if (a != 0 && b > UINT64_MAX / a) return 1;
    *out = a * b;
    return 0;
}
static inline int sck_add_overflow_u64(uint64_t a, uint64_t b, uint64_t *out) {
    if (b > UINT64_MAX - a) return 1;
    *out = a + b;
    return 0;
}

/* strdup that reports nothing (caller maps NULL to SCK_ERR_NOMEM). */
char *sck_strdup(const char *s);
char *sck_strndup(const char *s, size_t n);

/* count * size zeroed bytes (NULL on overflow or out of memory) for a large table filled right away:
 * from 1 MiB on a block of sck_big_alloc's (below): a kept mapping, zeroed, or a fresh 2 MiB-aligned
 * one advised MADV_HUGEPAGE and faulted in at once, as the first touch of each 4 KiB page costs more
 * than filling it (11 to 16 us here, against 0.2 ms per 2 MiB huge page); below 1 MiB, calloc.  Free with
 * sck_huge_free and the same count and size. */
void *sck_huge_calloc(size_t count, size_t size);
void sck_huge_free(void *p, size_t count, size_t size);
/* Large transient arrays (read plans, gathered lists, file images) that are filled once and freed at
 * the end of a call.  glibc maps each such block afresh and every first touch of a 4 KiB page then
 * faults (11 us a page on this project's VMs, 3 to 12 ms a load); from 256 KiB on these are whole
 * 2 MiB-aligned mappings advised MADV_HUGEPAGE, one fault a 2 MiB page, and freed ones of up to
 * 8 MiB are kept for reuse (64 MiB at most, process-wide: a load makes a dozen a rank).  Smaller ones, and every
 * one in sanitizer builds (which then see overflows), come from malloc.  sck_big_alloc: n bytes,
 * uninitialised, NULL when out of memory.  sck_big_realloc: like realloc (NULL p allocates; on
 * failure p is left as it was and NULL returned).  sck_big_free: NULL allowed.  Never mix these
 * with malloc/free. */
void *sck_big_alloc(size_t n);
void *sck_big_realloc(void *p, size_t n);
void sck_big_free(void *p);

/* qsort's contract with a merge sort whose scratch comes from sck_big_alloc (glibc's qsort mallocs
 * its own, faulted in afresh on every call); stable; falls back to qsort when out of memory.
 * Already-sorted input costs one comparison an element. */
void sck_sort(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *));

/* Torch names for dtypes. */
const char *sck_dtype_torch_name(sck_dtype dt);    /* "float32" -> used as torch.<name> */
const char *sck_dtype_storage_name(sck_dtype dt);  /* "FloatStorage"; NULL: saved as UntypedStorage */
const char *sck_dtype_st_name(sck_dtype dt);       /* safetensors: "F32"; "?" where it has none */
size_t sck_dtype_swap_unit(sck_dtype dt);          /* bytes per component (complex: half the element) */
int sck_dtype_from_storage_name(const char *name, sck_dtype *out);

/* Product of dims with overflow check; returns 1 on overflow. */
int sck_numel(int ndim, const int64_t *shape, uint64_t *out);

#endif
