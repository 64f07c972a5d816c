/* util.c - thread-local error messages, byte buffers, file helpers and dtype tables. */
#include "base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define SCK_ERRMSG_MAX 1024

static _Thread_local char g_errmsg[SCK_ERRMSG_MAX];

const char *sck_last_error(void) { return g_errmsg; }

void sck_err_clear(void) { g_errmsg[0] = 0; }

const char *sck_version(void) { return SCK_VERSION_STRING; }

int sck_check_reserved(const char *what, const unsigned *reserved, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (reserved[i]) return sck_err(SCK_ERR_INVALID_ARG, "%s.reserved[%zu] is %u, must be 0", what, i, reserved[i]);
    return SCK_OK;
}

void sck_err_set_raw(const char *msg) { snprintf(g_errmsg, sizeof g_errmsg, "%s", msg ? msg : ""); }

/* Room for a message before it is fitted: paths are at most PATH_MAX (4096) and a message names a few. */
#define SCK_ERRMSG_FULL (3 * 4096 + 1024)

/* Stores msg (len bytes) as the message.  One too long for it loses the middle of its longest words
 * (paths, in practice: "/very/long/...name/.metadata"), not its end, where the reason is. */
static void fit_message(char *msg, size_t len) {
    while (len >= SCK_ERRMSG_MAX) {
        size_t best = 0, best_len = 0;
        for (size_t i = 0; i < len;) {
            size_t j = i;
            while (j < len && msg[j] != ' ') j++;
            if (j - i > best_len) best = i, best_len = j - i;
            i = j + 1;
        }
        if (best_len <= 40) break; /* nothing long enough to cut: the end goes */
        size_t excess = len - (SCK_ERRMSG_MAX - 1), keep = best_len > excess + 3 + 32 ? best_len - excess - 3 : 32;
        size_t head = keep / 2, tail = keep - head, cut = best_len - keep; /* cut >= 3 */
        memcpy(msg + best + head, "...", 3);
        memmove(msg + best + head + 3, msg + best + best_len - tail, len - (best + best_len - tail) + 1);
        len -= cut - 3;
    }
    snprintf(g_errmsg, sizeof g_errmsg, "%s", msg);
}

int sck_err(int status, const char *fmt, ...) {
    char full[SCK_ERRMSG_FULL];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(full, sizeof full, fmt, ap);
    va_end(ap);
    fit_message(full, k < 0 ? 0 : (size_t)k < sizeof full ? (size_t)k : sizeof full - 1);
    return status;
}

int sck_err_errno(int status, int errno_value, const char *fmt, ...) {
    char full[SCK_ERRMSG_FULL];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(full, sizeof full, fmt, ap);
    va_end(ap);
    size_t n = k < 0 ? 0 : (size_t)k < sizeof full ? (size_t)k : sizeof full - 1;
    int e = snprintf(full + n, sizeof full - n, ": %s", strerror(errno_value));
    n += e < 0 ? 0 : (size_t)e < sizeof full - n ? (size_t)e : sizeof full - n - 1;
    fit_message(full, n);
    return status;
}

int sck_err_wrap(int status, const char *fmt, ...) {
    char prev[SCK_ERRMSG_MAX], full[SCK_ERRMSG_FULL];
    memcpy(prev, g_errmsg, sizeof prev);
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(full, sizeof full, fmt, ap);
    va_end(ap);
    size_t n = k < 0 ? 0 : (size_t)k < sizeof full ? (size_t)k : sizeof full - 1;
    int e = snprintf(full + n, sizeof full - n, ": %s", prev);
    n += e < 0 ? 0 : (size_t)e < sizeof full - n ? (size_t)e : sizeof full - n - 1;
    fit_message(full, n);
    return status;
}

const char *sck_status_name(int status) {
    switch (status) {
    case SCK_OK: return "SCK_OK";
    case SCK_ERR_INVALID_ARG: return "SCK_ERR_INVALID_ARG";
    case SCK_ERR_NOMEM: return "SCK_ERR_NOMEM";
    case SCK_ERR_IO: return "SCK_ERR_IO";
    case SCK_ERR_FORMAT: return "SCK_ERR_FORMAT";
    case SCK_ERR_UNSUPPORTED: return "SCK_ERR_UNSUPPORTED";
    case SCK_ERR_MISSING_KEY: return "SCK_ERR_MISSING_KEY";
    case SCK_ERR_UNEXPECTED_KEY: return "SCK_ERR_UNEXPECTED_KEY";
    case SCK_ERR_MISMATCH: return "SCK_ERR_MISMATCH";
    case SCK_ERR_COVERAGE: return "SCK_ERR_COVERAGE";
    case SCK_ERR_COMM: return "SCK_ERR_COMM";
    case SCK_ERR_PEER: return "SCK_ERR_PEER";
    case SCK_ERR_CHECKSUM: return "SCK_ERR_CHECKSUM";
    case SCK_ERR_BUSY: return "SCK_ERR_BUSY";
    default: return "SCK_ERR_UNKNOWN";
    }
}

/* ---- buffers ---- */

#define HUGE_MIN ((size_t)1 << 20)
#define HUGE_PAGE ((size_t)2 << 20)

static size_t huge_len(size_t n) { return (n + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE; }

/* A buffer that grows to HUGE_MIN or more (an encoder's: a `.metadata` of 80 000 chunks is 10 MB)
 * moves into a block of whole 2 MiB pages, 2 MiB-aligned and advised MADV_HUGEPAGE before its bytes are
 * copied in, so that it faults in a huge page at a time: on the benchmark's VM (shadow page tables)
 * each first touch of a 4 KiB page costs 11 us, and glibc maps large blocks afresh (and unmaps them)
 * save after save; rank 0's encoding of an 8-rank save of 10 000 tensors took 3 500 faults.  Advice
 * only, on memory malloc owns and frees.  (Blocks from sck_big_alloc did worse: glibc then kept mapping
 * the process's other large blocks afresh, twice the faults in all.) */
void sck_buf_init(sck_buf *b) { b->data = NULL; b->len = b->cap = 0; }

void sck_buf_free(sck_buf *b) {
    free(b->data);
    sck_buf_init(b);
}

int sck_buf_reserve(sck_buf *b, size_t extra) {
    if (extra > SIZE_MAX - b->len) return SCK_ERR_NOMEM;
    size_t need = b->len + extra;
    if (need <= b->cap) return SCK_OK;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    uint8_t *p;
    if (cap < HUGE_MIN) {
        if (!(p = realloc(b->data, cap))) return SCK_ERR_NOMEM;
    } else {
        if (cap > SIZE_MAX - HUGE_PAGE) return SCK_ERR_NOMEM;
        cap = huge_len(cap);
        if (!(p = aligned_alloc(HUGE_PAGE, cap))) return SCK_ERR_NOMEM;
        madvise(p, cap, MADV_HUGEPAGE); /* advice only */
        if (b->len) memcpy(p, b->data, b->len);
        free(b->data);
    }
    b->data = p;
    b->cap = cap;
    return SCK_OK;
}

int sck_buf_zero(sck_buf *b, size_t n) {
    if (n == 0) return SCK_OK;
    if (sck_buf_reserve(b, n)) return SCK_ERR_NOMEM;
    memset(b->data + b->len, 0, n);
    b->len += n;
    return SCK_OK;
}

int sck_buf_printf(sck_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (k < 0) return SCK_ERR_NOMEM;
    if (sck_buf_reserve(b, (size_t)k + 1)) return SCK_ERR_NOMEM;
    va_start(ap, fmt);
    vsnprintf((char *)b->data + b->len, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)k;
    return SCK_OK;
}

char *sck_strdup(const char *s) { return sck_strndup(s, strlen(s)); }

char *sck_strndup(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* ---- dtypes ---- */

typedef struct {
    const char *name;     /* our canonical name == torch attribute name */
    size_t size;
    size_t unit;          /* bytes per component: the unit a byte swap reverses */
    const char *storage;  /* legacy torch storage class; NULL: torch saves it as UntypedStorage + dtype */
    const char *st;       /* safetensors name; NULL: safetensors has none */
} dtype_info;

static const dtype_info g_dtypes[SCK_DTYPE_COUNT] = {
    [SCK_F32] = {"float32", 4, 4, "FloatStorage", "F32"},
    [SCK_F64] = {"float64", 8, 8, "DoubleStorage", "F64"},
    [SCK_F16] = {"float16", 2, 2, "HalfStorage", "F16"},
    [SCK_BF16] = {"bfloat16", 2, 2, "BFloat16Storage", "BF16"},
    [SCK_I8] = {"int8", 1, 1, "CharStorage", "I8"},
    [SCK_I16] = {"int16", 2, 2, "ShortStorage", "I16"},
    [SCK_I32] = {"int32", 4, 4, "IntStorage", "I32"},
    [SCK_I64] = {"int64", 8, 8, "LongStorage", "I64"},
    [SCK_U8] = {"uint8", 1, 1, "ByteStorage", "U8"},
    [SCK_BOOL] = {"bool", 1, 1, "BoolStorage", "BOOL"},
    [SCK_COMPLEX64] = {"complex64", 8, 4, "ComplexFloatStorage", "C64"},
    [SCK_COMPLEX128] = {"complex128", 16, 8, "ComplexDoubleStorage", NULL},
    [SCK_COMPLEX32] = {"complex32", 4, 2, NULL, NULL},
    [SCK_U16] = {"uint16", 2, 2, NULL, "U16"},
    [SCK_U32] = {"uint32", 4, 4, NULL, "U32"},
    [SCK_U64] = {"uint64", 8, 8, NULL, "U64"},
    [SCK_F8_E4M3FN] = {"float8_e4m3fn", 1, 1, NULL, "F8_E4M3"},
    [SCK_F8_E4M3FNUZ] = {"float8_e4m3fnuz", 1, 1, NULL, NULL},
    [SCK_F8_E5M2] = {"float8_e5m2", 1, 1, NULL, "F8_E5M2"},
    [SCK_F8_E5M2FNUZ] = {"float8_e5m2fnuz", 1, 1, NULL, NULL},
    [SCK_F8_E8M0FNU] = {"float8_e8m0fnu", 1, 1, NULL, "F8_E8M0"},
    [SCK_BITS8] = {"bits8", 1, 1, NULL, NULL},
    [SCK_BITS16] = {"bits16", 2, 2, NULL, NULL},
    [SCK_BITS1X8] = {"bits1x8", 1, 1, NULL, NULL},
    [SCK_BITS2X4] = {"bits2x4", 1, 1, NULL, NULL},
    [SCK_BITS4X2] = {"bits4x2", 1, 1, NULL, NULL},
};

static int dtype_ok(sck_dtype dt) { return (int)dt >= 0 && dt < SCK_DTYPE_COUNT; }

size_t sck_dtype_size(sck_dtype dt) { return dtype_ok(dt) ? g_dtypes[dt].size : 0; }
size_t sck_dtype_swap_unit(sck_dtype dt) { return dtype_ok(dt) ? g_dtypes[dt].unit : 0; }
const char *sck_dtype_name(sck_dtype dt) { return dtype_ok(dt) ? g_dtypes[dt].name : "?"; }
const char *sck_dtype_torch_name(sck_dtype dt) { return sck_dtype_name(dt); }
const char *sck_dtype_storage_name(sck_dtype dt) { return dtype_ok(dt) ? g_dtypes[dt].storage : NULL; }
const char *sck_dtype_safetensors_name(sck_dtype dt) { return dtype_ok(dt) ? g_dtypes[dt].st : NULL; }
const char *sck_dtype_st_name(sck_dtype dt) {
    const char *s = sck_dtype_safetensors_name(dt);
    return s ? s : "?";
}

int sck_dtype_from_name(const char *name, sck_dtype *out) {
    static const struct { const char *alias; sck_dtype dt; } aliases[] = {
        {"float", SCK_F32}, {"double", SCK_F64}, {"half", SCK_F16}, {"long", SCK_I64},
        {"int", SCK_I32}, {"short", SCK_I16}, {"f32", SCK_F32}, {"f64", SCK_F64}, {"f16", SCK_F16},
        {"bf16", SCK_BF16}, {"i8", SCK_I8}, {"i16", SCK_I16}, {"i32", SCK_I32}, {"i64", SCK_I64},
        {"u8", SCK_U8}, {"cfloat", SCK_COMPLEX64}, {"cdouble", SCK_COMPLEX128}, {"chalf", SCK_COMPLEX32},
        {"c64", SCK_COMPLEX64}, {"u16", SCK_U16}, {"u32", SCK_U32}, {"u64", SCK_U64},
    };
    if (!name || !out) return SCK_ERR_INVALID_ARG;
    for (int i = 0; i < SCK_DTYPE_COUNT; i++) {
        if (!strcmp(name, g_dtypes[i].name) || (g_dtypes[i].st && !strcmp(name, g_dtypes[i].st))) {
            *out = (sck_dtype)i;
            return SCK_OK;
        }
    }
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++) {
        if (!strcmp(name, aliases[i].alias)) {
            *out = aliases[i].dt;
            return SCK_OK;
        }
    }
    return SCK_ERR_INVALID_ARG;
}

int sck_dtype_from_storage_name(const char *name, sck_dtype *out) {
    for (int i = 0; i < SCK_DTYPE_COUNT; i++) {
        if (g_dtypes[i].storage && !strcmp(name, g_dtypes[i].storage)) {
            *out = (sck_dtype)i;
            return SCK_OK;
        }
    }
    return SCK_ERR_UNSUPPORTED;
}

int sck_numel(int ndim, const int64_t *shape, uint64_t *out) {
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return 1;
        if (sck_mul_overflow_u64(n, (uint64_t)shape[i], &n)) return 1;
    }
    *out = n;
    return 0;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* A mapping of len bytes (a multiple of HUGE_PAGE) that starts on a HUGE_PAGE boundary, advised
 * MADV_HUGEPAGE (a huge page needs its 2 MiB-aligned frame: an unaligned mapping of 3 MiB gets none). */
static void *map_huge(size_t len) {
    if (len > SIZE_MAX - HUGE_PAGE) return NULL;
    uint8_t *m = mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return NULL;
    uint8_t *a = (uint8_t *)(((uintptr_t)m + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (a > m) munmap(m, (size_t)(a - m));
    if (m + HUGE_PAGE > a) munmap(a + len, (size_t)(m + HUGE_PAGE - a));
    madvise(a, len, MADV_HUGEPAGE); /* advice only */
    return a;
}

/* ---- large transient arrays (util.h) ---- */

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define BIG_MAPPED 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define BIG_MAPPED 0
#endif
#endif
#ifndef BIG_MAPPED
#define BIG_MAPPED 1
#endif

#define BIG_MIN ((size_t)256 << 10)
#define BIG_HEAD ((size_t)64) /* keeps the caller's bytes 64-byte aligned in a mapping */

typedef struct big_head {
    size_t n;   /* bytes the caller asked for */
    size_t map; /* length of the mapping the block starts, 0: from malloc */
} big_head;

static big_head *big_head_of(void *p) { return (big_head *)(void *)((uint8_t *)p - BIG_HEAD); }

/* Freed mappings kept for the next big allocations: a load makes a dozen of these a rank, and a fresh
 * one costs a huge page's zeroing (or its 4 KiB faults) and an munmap.  At most BIG_KEEP bytes are
 * kept, process-wide, in mappings of at most BIG_KEEP_ONE each. */
#define BIG_KEEP ((size_t)64 << 20)
#define BIG_KEEP_ONE ((size_t)8 << 20)
#define BIG_KEEP_N 32
static pthread_mutex_t big_mu = PTHREAD_MUTEX_INITIALIZER;
static void *big_kept[BIG_KEEP_N];
static size_t big_kept_len[BIG_KEEP_N], big_kept_total;

/* A kept mapping of at least len bytes (the smallest), or NULL. */
static void *big_take(size_t len) {
    pthread_mutex_lock(&big_mu);
    int best = -1;
    for (int i = 0; i < BIG_KEEP_N; i++)
        if (big_kept[i] && big_kept_len[i] >= len && (best < 0 || big_kept_len[i] < big_kept_len[best])) best = i;
    void *p = NULL;
    if (best >= 0) {
        p = big_kept[best];
        big_kept[best] = NULL;
        big_kept_total -= big_kept_len[best];
    }
    pthread_mutex_unlock(&big_mu);
    return p;
}

/* Keeps mapping p of len bytes for big_take, or unmaps it. */
static void big_keep(void *p, size_t len) {
    int kept = 0;
    if (len <= BIG_KEEP_ONE) {
        pthread_mutex_lock(&big_mu);
        for (int i = 0; i < BIG_KEEP_N && !kept && big_kept_total + len <= BIG_KEEP; i++)
            if (!big_kept[i]) big_kept[i] = p, big_kept_len[i] = len, big_kept_total += len, kept = 1;
        pthread_mutex_unlock(&big_mu);
    }
    if (!kept) munmap(p, len);
}

/* sck_big_alloc; *fresh: 1 if the block is a new mapping (zeroed, not yet faulted in). */
static void *big_alloc(size_t n, int *fresh) {
    *fresh = 0;
    if (n > SIZE_MAX - BIG_HEAD - 2 * HUGE_PAGE) return NULL;
    size_t need = n + BIG_HEAD;
    big_head *h;
    if (!BIG_MAPPED || need < BIG_MIN) {
        if (!(h = malloc(need))) return NULL;
        h->map = 0;
    } else {
        size_t len = huge_len(need);
        if ((h = big_take(len))) {
            len = h->map; /* the kept mapping's own length */
        } else {
            if (!(h = map_huge(len))) return NULL;
            *fresh = 1;
        }
        h->map = len;
    }
    h->n = n;
    return (uint8_t *)h + BIG_HEAD;
}

void *sck_big_alloc(size_t n) {
    int fresh;
    return big_alloc(n, &fresh);
}

void *sck_big_realloc(void *p, size_t n) {
    if (!p) return sck_big_alloc(n);
    big_head *h = big_head_of(p);
    if (h->map && n <= h->map - BIG_HEAD) {
        h->n = n;
        return p;
    }
    if (!h->map && (!BIG_MAPPED || n < BIG_MIN - BIG_HEAD)) {
        big_head *g = realloc(h, n + BIG_HEAD);
        if (!g) return NULL;
        g->n = n;
        return (uint8_t *)g + BIG_HEAD;
    }
    void *q = sck_big_alloc(n);
    if (!q) return NULL;
    memcpy(q, p, h->n < n ? h->n : n);
    sck_big_free(p);
    return q;
}

void sck_big_free(void *p) {
    if (!p) return;
    big_head *h = big_head_of(p);
    if (h->map) big_keep(h, h->map);
    else free(h);
}

/* ---- sorting (util.h) ---- */

#define SORT_RUN 8
#define SORT_ELEM_MAX 256

/* Merges the sorted runs [a, a+na) and [b, b+nb) (adjacent in memory) into out. */
static void sort_merge(const uint8_t *a, size_t na, const uint8_t *b, size_t nb, uint8_t *out, size_t size,
                       int (*cmp)(const void *, const void *)) {
    const uint8_t *ae = a + na * size, *be = b + nb * size;
    while (a < ae && b < be) {
        if (cmp(b, a) < 0) memcpy(out, b, size), b += size; /* ties take a: stable */
        else memcpy(out, a, size), a += size;
        out += size;
    }
    if (a < ae) memcpy(out, a, (size_t)(ae - a));
    if (b < be) memcpy(out, b, (size_t)(be - b));
}

/* Where v[0..n), whose first ascending run ends at `first`, is at most SORT_NAT_MAX ascending runs (a
 * plan's reads in file order, rotated; one list per file): their starts in at[0..*k), at[*k] = n, and
 * 1; else 0.  Merging those runs takes a pass for each doubling of their length, where blocks of
 * SORT_RUN take log2(n / SORT_RUN) passes. */
#define SORT_NAT_MAX 32
static int natural_runs(const uint8_t *v, size_t n, size_t first, size_t size, int (*cmp)(const void *, const void *), size_t *at,
                        size_t *k) {
    *k = 0;
    at[(*k)++] = 0;
    at[(*k)++] = first;
    for (size_t i = first + 1; i < n; i++) {
        if (cmp(v + (i - 1) * size, v + i * size) <= 0) continue;
        if (*k == SORT_NAT_MAX) return 0;
        at[(*k)++] = i;
    }
    at[*k] = n;
    return 1;
}

void sck_sort(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *)) {
    uint8_t *v = base;
    size_t i = 1;
    while (i < n && cmp(v + (i - 1) * size, v + i * size) <= 0) i++;
    if (i >= n) return;
    uint8_t *tmp = size <= SORT_ELEM_MAX && n <= SIZE_MAX / size ? sck_big_alloc(n * size) : NULL;
    if (!tmp) {
        qsort(base, n, size, cmp);
        return;
    }
    size_t at[SORT_NAT_MAX + 1], nruns;
    if (natural_runs(v, n, i, size, cmp, at, &nruns)) { /* v[0..i) is the first run (above) */
        uint8_t *src = v, *dst = tmp;
        while (nruns > 1) { /* adjacent runs merged pairwise, stable (ties take the earlier run) */
            size_t nk = 0;
            for (size_t r = 0; r < nruns; r += 2) {
                size_t lo = at[r], mid = r + 1 < nruns ? at[r + 1] : at[nruns], hi = r + 1 < nruns ? at[r + 2] : at[nruns];
                sort_merge(src + lo * size, mid - lo, src + mid * size, hi - mid, dst + lo * size, size, cmp);
                at[nk++] = lo;
            }
            at[nk] = n;
            nruns = nk;
            uint8_t *x = src;
            src = dst, dst = x;
        }
        if (src != v) memcpy(v, src, n * size);
        sck_big_free(tmp);
        return;
    }
    uint8_t t[SORT_ELEM_MAX];
    for (size_t lo = 0; lo < n; lo += SORT_RUN) { /* insertion sort of short runs */
        size_t hi = lo + SORT_RUN < n ? lo + SORT_RUN : n;
        for (size_t k = lo + 1; k < hi; k++) {
            size_t j = k;
            memcpy(t, v + k * size, size);
            while (j > lo && cmp(t, v + (j - 1) * size) < 0) j--;
            if (j < k) {
                memmove(v + (j + 1) * size, v + j * size, (k - j) * size);
                memcpy(v + j * size, t, size);
            }
        }
    }
    uint8_t *src = v, *dst = tmp;
    for (size_t w = SORT_RUN; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            if (mid == hi || cmp(src + (mid - 1) * size, src + mid * size) <= 0) /* in order already */
                memcpy(dst + lo * size, src + lo * size, (hi - lo) * size);
            else
                sort_merge(src + lo * size, mid - lo, src + mid * size, hi - mid, dst + lo * size, size, cmp);
        }
        uint8_t *x = src;
        src = dst, dst = x;
    }
    if (src != v) memcpy(v, src, n * size);
    sck_big_free(tmp);
}

void *sck_huge_calloc(size_t count, size_t size) {
    if (size && count > SIZE_MAX / size) return NULL;
    size_t n = count * size;
    if (n < HUGE_MIN) return calloc(count ? count : 1, size ? size : 1);
    int fresh;
    uint8_t *p = big_alloc(n, &fresh);
    if (!p) return NULL;
    if (!fresh) {
        memset(p, 0, n); /* a kept mapping: zeroing it costs less than a new one's page table */
        return p;
    }
    /* Faulted in writable now: tables like these are read before they are written (a flag is tested,
     * then set), and a first read maps the shared zero page, so each first write would then take a
     * copy-on-write fault and a TLB flush on every CPU.  Advice only (Linux 5.14 on). */
    big_head *h = big_head_of(p);
    madvise(h, h->map, MADV_POPULATE_WRITE);
    return p;
}

void sck_huge_free(void *p, size_t count, size_t size) {
    if (!p) return;
    if (count * size < HUGE_MIN) free(p);
    else sck_big_free(p);
}
