/* zip.c - writes and reads the stored (uncompressed) zip archives that torch.save produces.
 *
 * Writer: local header + payload per entry (payload aligned through a "FB" padding extra field, as
 * torch does), then the central directory, then ZIP64 end records only when a value overflows, then
 * the classic end record.  Reader: the central directory is the truth (as in miniz, which torch uses);
 * every local header is checked against it because the payload offset comes from the local header. */
#include "format/zip.h"
#include "io/storage.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <isa-l/crc.h>

#define ZIP_SIG_LOCAL 0x04034b50u
#define ZIP_SIG_CENTRAL 0x02014b50u
#define ZIP_SIG_EOCD 0x06054b50u
#define ZIP_SIG_EOCD64 0x06064b50u
#define ZIP_SIG_LOCATOR64 0x07064b50u

#define ZIP_LOCAL_LEN 30u
#define ZIP_CENTRAL_LEN 46u
#define ZIP_EOCD_LEN 22u
#define ZIP_EOCD64_LEN 56u
#define ZIP_LOCATOR64_LEN 20u
#define ZIP_MAX_COMMENT 65535u

#define ZIP_U16_SENTINEL 0xFFFFu
#define ZIP_U32_SENTINEL 0xFFFFFFFFu

#define ZIP_EXTRA_ZIP64 0x0001u
#define ZIP_EXTRA_PAD 0x4246u /* "FB": torch/miniz's alignment padding */
#define ZIP_EXTRA_HDR 4u

#define ZIP_VERSION_PLAIN 20u
#define ZIP_VERSION_ZIP64 45u
#define ZIP_DOS_TIME 0u
#define ZIP_DOS_DATE 0x21u /* 1980-01-01: fixed so archives are reproducible */

#define ZIP_FLAG_ENCRYPTED 0x0001u
#define ZIP_FLAG_DATA_DESCRIPTOR 0x0008u

typedef unsigned long long ull;

/* ---------------------------------------------------------------- CRC */

/* ISA-L's folding CRC (PCLMULQDQ/VPCLMULQDQ, picked at run time) is ~10x zlib's here (see
 * docs/PERFORMANCE.md); crc32_gzip_refl is the zip/zlib polynomial, reflected, same chaining. */
uint32_t sck_crc32(uint32_t crc, const void *p, size_t n) {
    return n ? crc32_gzip_refl(crc, p, (uint64_t)n) : crc;
}

/* ---------------------------------------------------------------- writer */

static int plan_nomem(void) { return sck_err(SCK_ERR_NOMEM, "zip: out of memory building archive headers"); }

/* Adds header bytes [start, hdr.len) as a segment, merged into the previous header segment when
 * they are adjacent (empty payloads leave no segment between them). */
static void plan_hdr_seg(zip_plan *p, size_t start) {
    uint64_t len = (uint64_t)(p->hdr.len - start);
    if (len == 0) return;
    if (p->nseg > 0) {
        zip_segment *last = &p->seg[p->nseg - 1];
        if (last->entry == -1 && last->buf_off + last->len == start) {
            last->len += len;
            return;
        }
    }
    p->seg[p->nseg++] = (zip_segment){-1, start, len};
}

/* Bytes of padding extra field that move `data_start` (archive-relative) to an aligned file offset:
 * 0, or >= 4 so the field can hold its own 4-byte header. */
static uint64_t pad_len(uint64_t file_offset, uint64_t data_start, uint32_t align) {
    uint64_t mod = (file_offset % align + data_start % align) % align;
    uint64_t gap = mod ? align - mod : 0;
    while (gap > 0 && gap < ZIP_EXTRA_HDR) gap += align;
    return gap;
}

/* "prefix/name", as each record names its file (no printf: two of these per record, four records per item). */
static int put_name(sck_buf *h, const char *prefix, const char *name) {
    int rc = sck_buf_append(h, prefix, strlen(prefix));
    rc |= sck_buf_put_u8(h, '/');
    return rc | sck_buf_append(h, name, strlen(name));
}

static int put_local(sck_buf *h, const zip_entry *e, const char *prefix, size_t nlen, int zip64_sizes,
                     uint64_t pad) {
    uint32_t size32 = zip64_sizes ? ZIP_U32_SENTINEL : (uint32_t)e->size;
    uint16_t xlen = (uint16_t)((zip64_sizes ? ZIP_EXTRA_HDR + 16 : 0) + pad);
    int rc = 0;
    rc |= sck_buf_put_le32(h, ZIP_SIG_LOCAL);
    rc |= sck_buf_put_le16(h, zip64_sizes ? ZIP_VERSION_ZIP64 : ZIP_VERSION_PLAIN);
    rc |= sck_buf_put_le16(h, 0); /* flags: sizes and CRC are in this header, no data descriptor */
    rc |= sck_buf_put_le16(h, 0); /* stored */
    rc |= sck_buf_put_le16(h, ZIP_DOS_TIME);
    rc |= sck_buf_put_le16(h, ZIP_DOS_DATE);
    rc |= sck_buf_put_le32(h, e->crc);
    rc |= sck_buf_put_le32(h, size32);
    rc |= sck_buf_put_le32(h, size32);
    rc |= sck_buf_put_le16(h, (uint16_t)nlen);
    rc |= sck_buf_put_le16(h, xlen);
    rc |= put_name(h, prefix, e->name);
    if (zip64_sizes) { /* the spec wants both sizes in a local zip64 extra */
        rc |= sck_buf_put_le16(h, ZIP_EXTRA_ZIP64);
        rc |= sck_buf_put_le16(h, 16);
        rc |= sck_buf_put_le64(h, e->size);
        rc |= sck_buf_put_le64(h, e->size);
    }
    if (pad > 0) {
        rc |= sck_buf_put_le16(h, ZIP_EXTRA_PAD);
        rc |= sck_buf_put_le16(h, (uint16_t)(pad - ZIP_EXTRA_HDR));
        if (!rc && sck_buf_reserve(h, (size_t)(pad - ZIP_EXTRA_HDR)) == 0) {
            memset(h->data + h->len, ZIP_PAD_BYTE, (size_t)(pad - ZIP_EXTRA_HDR));
            h->len += (size_t)(pad - ZIP_EXTRA_HDR);
        } else {
            rc = 1;
        }
    }
    return rc ? plan_nomem() : SCK_OK;
}

static int put_central(sck_buf *h, const zip_entry *e, const char *prefix, size_t nlen, uint64_t lho) {
    int big_size = e->size >= ZIP_U32_SENTINEL, big_off = lho >= ZIP_U32_SENTINEL;
    uint16_t nfields = (uint16_t)(2 * big_size + big_off);
    uint16_t xlen = nfields ? (uint16_t)(ZIP_EXTRA_HDR + 8u * nfields) : 0;
    uint16_t version = (big_size || big_off) ? ZIP_VERSION_ZIP64 : ZIP_VERSION_PLAIN;
    uint32_t size32 = big_size ? ZIP_U32_SENTINEL : (uint32_t)e->size;
    int rc = 0;
    rc |= sck_buf_put_le32(h, ZIP_SIG_CENTRAL);
    rc |= sck_buf_put_le16(h, version); /* made by: MS-DOS attributes (high byte 0) */
    rc |= sck_buf_put_le16(h, version);
    rc |= sck_buf_put_le16(h, 0);
    rc |= sck_buf_put_le16(h, 0);
    rc |= sck_buf_put_le16(h, ZIP_DOS_TIME);
    rc |= sck_buf_put_le16(h, ZIP_DOS_DATE);
    rc |= sck_buf_put_le32(h, e->crc);
    rc |= sck_buf_put_le32(h, size32);
    rc |= sck_buf_put_le32(h, size32);
    rc |= sck_buf_put_le16(h, (uint16_t)nlen);
    rc |= sck_buf_put_le16(h, xlen);
    rc |= sck_buf_put_le16(h, 0); /* comment */
    rc |= sck_buf_put_le16(h, 0); /* disk */
    rc |= sck_buf_put_le16(h, 0); /* internal attributes */
    rc |= sck_buf_put_le32(h, 0); /* external attributes */
    rc |= sck_buf_put_le32(h, big_off ? ZIP_U32_SENTINEL : (uint32_t)lho);
    rc |= put_name(h, prefix, e->name);
    if (nfields) { /* fields in spec order, only those whose 32-bit slot holds the sentinel */
        rc |= sck_buf_put_le16(h, ZIP_EXTRA_ZIP64);
        rc |= sck_buf_put_le16(h, (uint16_t)(8u * nfields));
        if (big_size) {
            rc |= sck_buf_put_le64(h, e->size);
            rc |= sck_buf_put_le64(h, e->size);
        }
        if (big_off) rc |= sck_buf_put_le64(h, lho);
    }
    return rc ? plan_nomem() : SCK_OK;
}

static int put_end(sck_buf *h, uint64_t n, uint64_t cd_off, uint64_t cd_size) {
    int zip64 = n >= ZIP_U16_SENTINEL || cd_off >= ZIP_U32_SENTINEL || cd_size >= ZIP_U32_SENTINEL;
    int rc = 0;
    if (zip64) {
        uint64_t eocd64_off = cd_off + cd_size;
        rc |= sck_buf_put_le32(h, ZIP_SIG_EOCD64);
        rc |= sck_buf_put_le64(h, ZIP_EOCD64_LEN - 12); /* size of the rest of the record */
        rc |= sck_buf_put_le16(h, ZIP_VERSION_ZIP64);
        rc |= sck_buf_put_le16(h, ZIP_VERSION_ZIP64);
        rc |= sck_buf_put_le32(h, 0);
        rc |= sck_buf_put_le32(h, 0);
        rc |= sck_buf_put_le64(h, n);
        rc |= sck_buf_put_le64(h, n);
        rc |= sck_buf_put_le64(h, cd_size);
        rc |= sck_buf_put_le64(h, cd_off);
        rc |= sck_buf_put_le32(h, ZIP_SIG_LOCATOR64);
        rc |= sck_buf_put_le32(h, 0);
        rc |= sck_buf_put_le64(h, eocd64_off);
        rc |= sck_buf_put_le32(h, 1);
    }
    uint16_t n16 = n >= ZIP_U16_SENTINEL ? ZIP_U16_SENTINEL : (uint16_t)n;
    rc |= sck_buf_put_le32(h, ZIP_SIG_EOCD);
    rc |= sck_buf_put_le16(h, 0);
    rc |= sck_buf_put_le16(h, 0);
    rc |= sck_buf_put_le16(h, n16);
    rc |= sck_buf_put_le16(h, n16);
    rc |= sck_buf_put_le32(h, cd_size >= ZIP_U32_SENTINEL ? ZIP_U32_SENTINEL : (uint32_t)cd_size);
    rc |= sck_buf_put_le32(h, cd_off >= ZIP_U32_SENTINEL ? ZIP_U32_SENTINEL : (uint32_t)cd_off);
    rc |= sck_buf_put_le16(h, 0);
    return rc ? plan_nomem() : SCK_OK;
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Rejects names the reader would refuse, so we never write an archive we cannot read back. */
static int check_entries(const zip_entry *e, size_t n, const char *prefix) {
    if (!prefix || !*prefix || strchr(prefix, '/'))
        return sck_err(SCK_ERR_INVALID_ARG, "zip: prefix must be a non-empty name without '/'");
    if (n > 0 && !e) return sck_err(SCK_ERR_INVALID_ARG, "zip: NULL entry array");
    size_t plen = strlen(prefix);
    for (size_t i = 0; i < n; i++) {
        if (!e[i].name || !*e[i].name)
            return sck_err(SCK_ERR_INVALID_ARG, "zip: entry %zu has no name", i);
        if (strlen(e[i].name) > ZIP_U16_SENTINEL - 1 - plen)
            return sck_err(SCK_ERR_INVALID_ARG, "zip: name of entry %zu is too long for a zip header", i);
    }
    if (n < 2) return SCK_OK;
    const char **names = malloc(n * sizeof *names);
    if (!names) return plan_nomem();
    for (size_t i = 0; i < n; i++) names[i] = e[i].name;
    qsort(names, n, sizeof *names, cmp_str_ptr);
    for (size_t i = 1; i < n; i++) {
        if (!strcmp(names[i - 1], names[i])) {
            int rc = sck_err(SCK_ERR_INVALID_ARG, "zip: duplicate entry name '%s'", names[i]);
            free(names);
            return rc;
        }
    }
    free(names);
    return SCK_OK;
}

static int plan_overflow(void) { return sck_err(SCK_ERR_INVALID_ARG, "zip: archive size overflows 64 bits"); }

int zip_plan_build(zip_plan *p, const zip_entry *e, size_t n, const char *prefix, uint64_t file_offset,
                   uint32_t align) {
    return zip_plan_build_ex(p, e, n, prefix, file_offset, align, SIZE_MAX, align);
}

int zip_plan_build_ex(zip_plan *p, const zip_entry *e, size_t n, const char *prefix, uint64_t file_offset,
                      uint32_t align, size_t big, uint32_t big_align) {
    if (!p) return sck_err(SCK_ERR_INVALID_ARG, "zip: NULL plan");
    memset(p, 0, sizeof *p);
    sck_buf_init(&p->hdr);
    if (align == 0 || (align & (align - 1)) || big_align == 0 || (big_align & (big_align - 1)))
        return sck_err(SCK_ERR_INVALID_ARG, "zip: alignment %u is not a power of two", align == 0 || (align & (align - 1)) ? align : big_align);
    if (n > INT_MAX) return sck_err(SCK_ERR_INVALID_ARG, "zip: too many entries (%zu)", n);
    int rc = check_entries(e, n, prefix);
    if (rc) return rc;
    if (n > (SIZE_MAX / sizeof(zip_segment) - 1) / 2) return plan_nomem();
    p->seg = malloc((2 * n + 1) * sizeof *p->seg); /* header, payload per entry + the directory */
    p->payload_off = malloc((n ? n : 1) * sizeof *p->payload_off);
    if (!p->seg || !p->payload_off) return plan_nomem();

    size_t plen = strlen(prefix);
    uint64_t cursor = 0;
    for (size_t i = 0; i < n; i++) {
        size_t nlen = plen + 1 + strlen(e[i].name);
        int zip64_sizes = e[i].size >= ZIP_U32_SENTINEL;
        uint64_t fixed = ZIP_LOCAL_LEN + nlen + (zip64_sizes ? ZIP_EXTRA_HDR + 16 : 0);
        uint64_t data_start, end;
        if (sck_add_overflow_u64(cursor, fixed, &data_start)) return plan_overflow();
        uint32_t al = i == big ? big_align : align;
        uint64_t pad = pad_len(file_offset, data_start, al);
        if (fixed - ZIP_LOCAL_LEN - nlen + pad > ZIP_U16_SENTINEL)
            return sck_err(SCK_ERR_INVALID_ARG, "zip: alignment %u needs more padding than a zip extra field holds", al);
        if (sck_add_overflow_u64(data_start, pad, &data_start) || sck_add_overflow_u64(data_start, e[i].size, &end))
            return plan_overflow();
        size_t start = p->hdr.len;
        rc = put_local(&p->hdr, &e[i], prefix, nlen, zip64_sizes, pad);
        if (rc) return rc;
        plan_hdr_seg(p, start);
        p->payload_off[i] = data_start;
        if (e[i].size > 0) p->seg[p->nseg++] = (zip_segment){(int)i, 0, e[i].size};
        cursor = end;
    }
    uint64_t cd_off = cursor;
    size_t cd_start = p->hdr.len;
    for (size_t i = 0; i < n; i++) {
        /* Each local header starts right where the previous payload ends. */
        uint64_t lho = i == 0 ? 0 : p->payload_off[i - 1] + e[i - 1].size;
        rc = put_central(&p->hdr, &e[i], prefix, plen + 1 + strlen(e[i].name), lho);
        if (rc) return rc;
    }
    uint64_t cd_size = (uint64_t)(p->hdr.len - cd_start);
    if (sck_add_overflow_u64(cd_off, cd_size, &cursor)) return plan_overflow();
    size_t end_start = p->hdr.len;
    rc = put_end(&p->hdr, n, cd_off, cd_size);
    if (rc) return rc;
    if (sck_add_overflow_u64(cursor, (uint64_t)(p->hdr.len - end_start), &p->total)) return plan_overflow();
    plan_hdr_seg(p, cd_start);
    return SCK_OK;
}

void zip_plan_free(zip_plan *p) {
    if (!p) return;
    sck_buf_free(&p->hdr);
    free(p->seg);
    free(p->payload_off);
    p->seg = NULL;
    p->payload_off = NULL;
    p->nseg = 0;
    p->total = 0;
}

int zip_build_mem(sck_buf *out, const zip_entry *e, size_t n, const char *prefix, uint32_t align) {
    if (!out) return sck_err(SCK_ERR_INVALID_ARG, "zip: NULL output buffer");
    for (size_t i = 0; e && i < n; i++)
        if (e[i].size > 0 && !e[i].data)
            return sck_err(SCK_ERR_INVALID_ARG, "zip: entry '%s' has %llu bytes but no data",
                           e[i].name ? e[i].name : "?", (ull)e[i].size);
    zip_plan plan;
    int rc = zip_plan_build(&plan, e, n, prefix, 0, align);
    if (!rc && (plan.total > SIZE_MAX || sck_buf_reserve(out, (size_t)plan.total)))
        rc = sck_err(SCK_ERR_NOMEM, "zip: out of memory for a %llu byte archive", (ull)plan.total);
    for (size_t i = 0; !rc && i < plan.nseg; i++) {
        const zip_segment *s = &plan.seg[i];
        const void *src = s->entry < 0 ? (const void *)(plan.hdr.data + s->buf_off) : e[s->entry].data;
        rc = sck_buf_append(out, src, (size_t)s->len); /* cannot fail: reserved above */
    }
    zip_plan_free(&plan);
    return rc;
}

/* ---------------------------------------------------------------- reader */

typedef struct zip_src {
    zip_pread_fn rd;
    void *ctx;
    uint64_t base, len; /* the archive window; offsets below are relative to base */
    const char *what;
} zip_src;

/* Where the end records put the central directory. */
typedef struct zip_end {
    uint64_t n, cd_off, cd_size;
    uint64_t cd_limit; /* the directory must end at or before this offset (start of the end records) */
} zip_end;

static ull abs_off(const zip_src *s, uint64_t rel) { return (ull)(s->base + rel); }

static int in_window(const zip_src *s, uint64_t rel, uint64_t n) { return rel <= s->len && n <= s->len - rel; }

/* Every read goes through here, so nothing outside the window is ever requested. */
static int src_read(const zip_src *s, void *buf, size_t n, uint64_t rel, const char *part) {
    if (!in_window(s, rel, n))
        return sck_err(SCK_ERR_FORMAT, "%s: %s (%zu bytes at offset %llu) lies beyond the archive end at offset %llu",
                       s->what, part, n, abs_off(s, rel), abs_off(s, s->len));
    if (n == 0) return SCK_OK;
    int rc = s->rd(s->ctx, buf, n, s->base + rel);
    if (rc == 0) return SCK_OK;
    if (rc > 0) rc = SCK_ERR_IO;
    return sck_err_wrap(rc, "%s: reading %s at offset %llu", s->what, part, abs_off(s, rel));
}

static int find_eocd(const zip_src *s, uint64_t *eocd_rel, uint8_t rec[ZIP_EOCD_LEN]) {
    if (s->len < ZIP_EOCD_LEN)
        return sck_err(SCK_ERR_FORMAT, "%s: %llu bytes at offset %llu are too few for a zip archive", s->what,
                       (ull)s->len, abs_off(s, 0));
    /* Fast path: writers (torch, us) leave no comment, so the record is the last 22 bytes. */
    int rc = src_read(s, rec, ZIP_EOCD_LEN, s->len - ZIP_EOCD_LEN, "end of central directory");
    if (rc) return rc;
    if (sck_le32(rec) == ZIP_SIG_EOCD && sck_le16(rec + 20) == 0) {
        *eocd_rel = s->len - ZIP_EOCD_LEN;
        return SCK_OK;
    }
    size_t tail = s->len < ZIP_EOCD_LEN + ZIP_MAX_COMMENT ? (size_t)s->len : ZIP_EOCD_LEN + ZIP_MAX_COMMENT;
    uint64_t tail_rel = s->len - tail;
    uint8_t *buf = malloc(tail);
    if (!buf) return sck_err(SCK_ERR_NOMEM, "%s: out of memory", s->what);
    rc = src_read(s, buf, tail, tail_rel, "end of archive");
    if (rc) {
        free(buf);
        return rc;
    }
    /* Backwards, preferring a record whose comment ends exactly at the window end, so a signature
     * inside the comment is not taken for the record; else the last one whose comment fits. */
    size_t found = SIZE_MAX;
    for (size_t i = tail - ZIP_EOCD_LEN + 1; i-- > 0;) {
        if (sck_le32(buf + i) != ZIP_SIG_EOCD) continue;
        size_t end = i + ZIP_EOCD_LEN + sck_le16(buf + i + 20);
        if (end == tail) {
            found = i;
            break;
        }
        if (end < tail && found == SIZE_MAX) found = i;
    }
    if (found != SIZE_MAX) {
        memcpy(rec, buf + found, ZIP_EOCD_LEN);
        *eocd_rel = tail_rel + found;
        free(buf);
        return SCK_OK;
    }
    free(buf);
    return sck_err(SCK_ERR_FORMAT, "%s: end of central directory record not found in the %zu bytes before offset %llu",
                   s->what, tail, abs_off(s, s->len));
}

static int read_zip64_end(const zip_src *s, uint64_t loc_rel, const uint8_t loc[ZIP_LOCATOR64_LEN], zip_end *end) {
    uint32_t loc_disk = sck_le32(loc + 4), ndisks = sck_le32(loc + 16);
    uint64_t e64 = sck_le64(loc + 8);
    if (loc_disk != 0 || ndisks > 1)
        return sck_err(SCK_ERR_UNSUPPORTED, "%s: multi-disk archive (ZIP64 locator at offset %llu)", s->what,
                       abs_off(s, loc_rel));
    if (e64 > loc_rel || ZIP_EOCD64_LEN > loc_rel - e64)
        return sck_err(SCK_ERR_FORMAT, "%s: ZIP64 end record offset %llu (locator at offset %llu) is outside the archive",
                       s->what, (ull)e64, abs_off(s, loc_rel));
    uint8_t r[ZIP_EOCD64_LEN];
    int rc = src_read(s, r, sizeof r, e64, "ZIP64 end of central directory");
    if (rc) return rc;
    uint64_t recsize = sck_le64(r + 4);
    if (sck_le32(r) != ZIP_SIG_EOCD64)
        return sck_err(SCK_ERR_FORMAT, "%s: bad ZIP64 end of central directory signature at offset %llu", s->what,
                       abs_off(s, e64));
    if (recsize < ZIP_EOCD64_LEN - 12 || recsize > loc_rel - e64 - 12)
        return sck_err(SCK_ERR_FORMAT, "%s: ZIP64 end of central directory at offset %llu has bad size %llu", s->what,
                       abs_off(s, e64), (ull)recsize);
    uint64_t n_disk = sck_le64(r + 24);
    if (sck_le32(r + 16) != 0 || sck_le32(r + 20) != 0 || n_disk != sck_le64(r + 32))
        return sck_err(SCK_ERR_UNSUPPORTED, "%s: multi-disk archive (ZIP64 end record at offset %llu)", s->what,
                       abs_off(s, e64));
    end->n = n_disk;
    end->cd_size = sck_le64(r + 40);
    end->cd_off = sck_le64(r + 48);
    end->cd_limit = e64;
    return SCK_OK;
}

static int read_end(const zip_src *s, zip_end *end) {
    uint8_t r[ZIP_EOCD_LEN] = {0};
    uint64_t eocd = 0;
    int rc = find_eocd(s, &eocd, r);
    if (rc) return rc;
    uint16_t disk = sck_le16(r + 4), cd_disk = sck_le16(r + 6), n_disk = sck_le16(r + 8), n = sck_le16(r + 10);
    uint32_t cd_size = sck_le32(r + 12), cd_off = sck_le32(r + 16);
    int marked64 = disk == ZIP_U16_SENTINEL || cd_disk == ZIP_U16_SENTINEL || n_disk == ZIP_U16_SENTINEL ||
                   n == ZIP_U16_SENTINEL || cd_size == ZIP_U32_SENTINEL || cd_off == ZIP_U32_SENTINEL;
    /* torch always writes ZIP64 end records, needed or not: use them whenever the locator is there. */
    if (eocd >= ZIP_LOCATOR64_LEN) {
        uint8_t loc[ZIP_LOCATOR64_LEN];
        uint64_t loc_rel = eocd - ZIP_LOCATOR64_LEN;
        rc = src_read(s, loc, sizeof loc, loc_rel, "ZIP64 locator");
        if (rc) return rc;
        if (sck_le32(loc) == ZIP_SIG_LOCATOR64) return read_zip64_end(s, loc_rel, loc, end);
    }
    if (marked64)
        return sck_err(SCK_ERR_FORMAT, "%s: end of central directory at offset %llu needs ZIP64 records but has no locator",
                       s->what, abs_off(s, eocd));
    if (disk != 0 || cd_disk != 0 || n_disk != n)
        return sck_err(SCK_ERR_UNSUPPORTED, "%s: multi-disk archive (end record at offset %llu)", s->what,
                       abs_off(s, eocd));
    end->n = n;
    end->cd_size = cd_size;
    end->cd_off = cd_off;
    end->cd_limit = eocd;
    return SCK_OK;
}

/* Replaces the fields holding their sentinel (0xFFFFFFFF, disk 0xFFFF) by the values of the ZIP64
 * extra block, which lists exactly those fields in this order.  lho/disk may be NULL (local headers).
 * Returns 0, or -1 when a needed value is missing. */
static int apply_zip64_extra(const uint8_t *x, size_t xlen, uint64_t *usize, uint64_t *csize, uint64_t *lho,
                             uint64_t *disk) {
    int need_u = *usize == ZIP_U32_SENTINEL, need_c = *csize == ZIP_U32_SENTINEL;
    int need_o = lho && *lho == ZIP_U32_SENTINEL, need_d = disk && *disk == ZIP_U16_SENTINEL;
    if (!need_u && !need_c && !need_o && !need_d) return 0;
    size_t off = 0;
    while (xlen - off >= ZIP_EXTRA_HDR) {
        size_t id = sck_le16(x + off), sz = sck_le16(x + off + 2);
        if (sz > xlen - off - ZIP_EXTRA_HDR) break;
        if (id == ZIP_EXTRA_ZIP64) {
            const uint8_t *f = x + off + ZIP_EXTRA_HDR;
            size_t want = 8u * (size_t)(need_u + need_c + need_o) + 4u * (size_t)need_d;
            if (sz < want) return -1;
            if (need_u) { *usize = sck_le64(f); f += 8; }
            if (need_c) { *csize = sck_le64(f); f += 8; }
            if (need_o) { *lho = sck_le64(f); f += 8; }
            if (need_d) *disk = sck_le32(f);
            return 0;
        }
        off += ZIP_EXTRA_HDR + sz;
    }
    return -1;
}

/* Checks the local header of `full` (central name, nlen bytes) at lho and returns where its payload
 * starts: lho + 30 + local name length + local extra length, as torch computes it. */
static int check_local(const zip_src *s, const char *full, size_t nlen, uint64_t lho, uint32_t crc, uint64_t size,
                       uint8_t *scratch, uint64_t *data_rel) {
    uint8_t h[ZIP_LOCAL_LEN];
    if (!in_window(s, lho, ZIP_LOCAL_LEN))
        return sck_err(SCK_ERR_FORMAT, "%s: local header of '%s' at offset %llu lies beyond the archive end at offset %llu",
                       s->what, full, abs_off(s, lho), abs_off(s, s->len));
    int rc = src_read(s, h, sizeof h, lho, "local header");
    if (rc) return rc;
    if (sck_le32(h) != ZIP_SIG_LOCAL)
        return sck_err(SCK_ERR_FORMAT, "%s: bad local header signature for '%s' at offset %llu", s->what, full,
                       abs_off(s, lho));
    uint16_t lflags = sck_le16(h + 6), lmethod = sck_le16(h + 8), lnlen = sck_le16(h + 26), lxlen = sck_le16(h + 28);
    if (lmethod != 0)
        return sck_err(SCK_ERR_UNSUPPORTED, "%s: record '%s' is compressed (method %u in the local header at offset %llu)",
                       s->what, full, lmethod, abs_off(s, lho));
    if (lnlen != nlen)
        return sck_err(SCK_ERR_FORMAT, "%s: local header at offset %llu names another record than the central directory's '%s'",
                       s->what, abs_off(s, lho), full);
    rc = src_read(s, scratch, (size_t)lnlen + lxlen, lho + ZIP_LOCAL_LEN, "local header name and extra");
    if (rc) return rc;
    if (memcmp(scratch, full, nlen) != 0)
        return sck_err(SCK_ERR_FORMAT, "%s: local header at offset %llu names another record than the central directory's '%s'",
                       s->what, abs_off(s, lho), full);
    /* With a data descriptor (torch sets bit 3) the local CRC and sizes may be 0: the central directory rules. */
    if (!(lflags & ZIP_FLAG_DATA_DESCRIPTOR)) {
        uint64_t lu = sck_le32(h + 22), lc = sck_le32(h + 18);
        uint32_t lcrc = sck_le32(h + 14);
        if (apply_zip64_extra(scratch + nlen, lxlen, &lu, &lc, NULL, NULL))
            return sck_err(SCK_ERR_FORMAT, "%s: local header of '%s' at offset %llu lacks its ZIP64 extra field", s->what,
                           full, abs_off(s, lho));
        if (lu != size || lc != size || lcrc != crc)
            return sck_err(SCK_ERR_FORMAT,
                           "%s: local header of '%s' at offset %llu disagrees with the central directory "
                           "(sizes %llu/%llu vs %llu, crc %08x vs %08x)",
                           s->what, full, abs_off(s, lho), (ull)lc, (ull)lu, (ull)size, lcrc, crc);
    }
    uint64_t data = lho + ZIP_LOCAL_LEN + lnlen + lxlen; /* <= len: the read above succeeded */
    if (!in_window(s, data, size))
        return sck_err(SCK_ERR_FORMAT, "%s: payload of '%s' (%llu bytes at offset %llu) extends beyond the archive end at offset %llu",
                       s->what, full, (ull)size, abs_off(s, data), abs_off(s, s->len));
    *data_rel = data;
    return SCK_OK;
}

/* Parses the central directory entry at cd[*pos] into out->rec[out->n], advancing *pos. */
static int parse_entry(const zip_src *s, const uint8_t *cd, uint64_t cd_off, size_t cd_size, size_t *pos,
                       uint8_t *scratch, zip_dir *out) {
    ull at = abs_off(s, cd_off + *pos);
    if (cd_size - *pos < ZIP_CENTRAL_LEN)
        return sck_err(SCK_ERR_FORMAT, "%s: central directory entry %zu at offset %llu is truncated", s->what, out->n, at);
    const uint8_t *c = cd + *pos;
    if (sck_le32(c) != ZIP_SIG_CENTRAL)
        return sck_err(SCK_ERR_FORMAT, "%s: bad central directory signature at offset %llu", s->what, at);
    uint16_t flags = sck_le16(c + 8), method = sck_le16(c + 10);
    uint32_t crc = sck_le32(c + 16);
    uint64_t csize = sck_le32(c + 20), usize = sck_le32(c + 24), disk = sck_le16(c + 34), lho = sck_le32(c + 42);
    size_t nlen = sck_le16(c + 28), xlen = sck_le16(c + 30), clen = sck_le16(c + 32);
    if (nlen + xlen + clen > cd_size - *pos - ZIP_CENTRAL_LEN)
        return sck_err(SCK_ERR_FORMAT, "%s: central directory entry at offset %llu runs past the directory end", s->what, at);
    const char *name = (const char *)c + ZIP_CENTRAL_LEN;
    if (nlen == 0 || memchr(name, 0, nlen))
        return sck_err(SCK_ERR_FORMAT, "%s: central directory entry at offset %llu has an empty name or one with a NUL byte",
                       s->what, at);
    char *full = sck_strndup(name, nlen);
    if (!full) return sck_err(SCK_ERR_NOMEM, "%s: out of memory", s->what);
    int rc = SCK_OK;
    const char *slash = memchr(full, '/', nlen);
    uint64_t data_rel = 0;
    if (flags & ZIP_FLAG_ENCRYPTED)
        rc = sck_err(SCK_ERR_UNSUPPORTED, "%s: record '%s' (central directory offset %llu) is encrypted", s->what, full, at);
    else if (method != 0)
        rc = sck_err(SCK_ERR_UNSUPPORTED,
                     "%s: record '%s' (central directory offset %llu) is compressed (method %u); only stored records are supported",
                     s->what, full, at, method);
    else if (apply_zip64_extra(c + ZIP_CENTRAL_LEN + nlen, xlen, &usize, &csize, &lho, &disk))
        rc = sck_err(SCK_ERR_FORMAT, "%s: record '%s' (central directory offset %llu) lacks its ZIP64 extra field",
                     s->what, full, at);
    else if (disk != 0)
        rc = sck_err(SCK_ERR_UNSUPPORTED, "%s: multi-disk archive (record '%s' at offset %llu)", s->what, full, at);
    else if (csize != usize)
        rc = sck_err(SCK_ERR_FORMAT, "%s: stored record '%s' (central directory offset %llu) has compressed size %llu != size %llu",
                     s->what, full, at, (ull)csize, (ull)usize);
    else if (!slash || slash[1] == 0)
        rc = sck_err(SCK_ERR_FORMAT, "%s: record '%s' (central directory offset %llu) is not a file inside a top folder",
                     s->what, full, at);
    else if (out->prefix && (strlen(out->prefix) != (size_t)(slash - full) || memcmp(full, out->prefix, (size_t)(slash - full))))
        rc = sck_err(SCK_ERR_FORMAT, "%s: record '%s' (central directory offset %llu) is not under the top folder '%s' of the first record",
                     s->what, full, at, out->prefix);
    else
        rc = check_local(s, full, nlen, lho, crc, usize, scratch, &data_rel);
    if (!rc && !out->prefix && !(out->prefix = sck_strndup(full, (size_t)(slash - full))))
        rc = sck_err(SCK_ERR_NOMEM, "%s: out of memory", s->what);
    if (rc) {
        free(full);
        return rc;
    }
    size_t skip = (size_t)(slash - full) + 1;
    memmove(full, full + skip, nlen - skip + 1); /* strip "<prefix>/" in place */
    out->rec[out->n++] = (zip_rec){full, s->base + data_rel, usize, crc};
    *pos += ZIP_CENTRAL_LEN + nlen + xlen + clen;
    return SCK_OK;
}

static int cmp_rec_name(const void *a, const void *b) {
    return strcmp((*(const zip_rec *const *)a)->name, (*(const zip_rec *const *)b)->name);
}

static int check_duplicates(const zip_src *s, const zip_dir *d) {
    if (d->n < 2) return SCK_OK;
    const zip_rec **v = malloc(d->n * sizeof *v);
    if (!v) return sck_err(SCK_ERR_NOMEM, "%s: out of memory", s->what);
    for (size_t i = 0; i < d->n; i++) v[i] = &d->rec[i];
    qsort(v, d->n, sizeof *v, cmp_rec_name);
    int rc = SCK_OK;
    for (size_t i = 1; i < d->n && !rc; i++) {
        if (!strcmp(v[i - 1]->name, v[i]->name)) {
            const zip_rec *later = v[i - 1]->data_off > v[i]->data_off ? v[i - 1] : v[i];
            rc = sck_err(SCK_ERR_FORMAT, "%s: duplicate record '%s/%s' (second payload at offset %llu)", s->what,
                         d->prefix, later->name, (ull)later->data_off);
        }
    }
    free(v);
    return rc;
}

static int read_central_dir(const zip_src *s, const zip_end *end, zip_dir *out) {
    if (end->cd_off > end->cd_limit || end->cd_size > end->cd_limit - end->cd_off)
        return sck_err(SCK_ERR_FORMAT,
                       "%s: central directory (%llu bytes at offset %llu) does not lie before the end records at offset %llu",
                       s->what, (ull)end->cd_size, abs_off(s, end->cd_off), abs_off(s, end->cd_limit));
    /* Bound the count by the bytes that hold it before allocating anything for it. */
    if (end->n > end->cd_size / ZIP_CENTRAL_LEN)
        return sck_err(SCK_ERR_FORMAT, "%s: %llu entries cannot fit in the central directory of %llu bytes at offset %llu",
                       s->what, (ull)end->n, (ull)end->cd_size, abs_off(s, end->cd_off));
    if (end->cd_size > SIZE_MAX / 2) return sck_err(SCK_ERR_NOMEM, "%s: central directory too large", s->what);
    size_t cd_size = (size_t)end->cd_size, n = (size_t)end->n;
    uint8_t *cd = malloc(cd_size ? cd_size : 1);
    uint8_t *scratch = malloc(2u * ZIP_U16_SENTINEL); /* a local header's name + extra */
    out->rec = calloc(n ? n : 1, sizeof *out->rec);
    int rc = SCK_OK;
    if (!cd || !scratch || !out->rec) rc = sck_err(SCK_ERR_NOMEM, "%s: out of memory for %zu records", s->what, n);
    if (!rc) rc = src_read(s, cd, cd_size, end->cd_off, "central directory");
    size_t pos = 0;
    while (!rc && out->n < n) rc = parse_entry(s, cd, end->cd_off, cd_size, &pos, scratch, out);
    if (!rc && pos != cd_size)
        rc = sck_err(SCK_ERR_FORMAT, "%s: central directory at offset %llu has %zu bytes after its %zu entries", s->what,
                     abs_off(s, end->cd_off), cd_size - pos, n);
    if (!rc && !out->prefix && !(out->prefix = sck_strdup("")))
        rc = sck_err(SCK_ERR_NOMEM, "%s: out of memory", s->what);
    if (!rc) rc = check_duplicates(s, out);
    free(cd);
    free(scratch);
    return rc;
}

int zip_read_dir(zip_pread_fn rd, void *ctx, uint64_t base, uint64_t len, const char *what, zip_dir *out) {
    if (!out) return sck_err(SCK_ERR_INVALID_ARG, "zip: NULL output directory");
    memset(out, 0, sizeof *out);
    if (!what) what = "zip archive";
    if (!rd) return sck_err(SCK_ERR_INVALID_ARG, "%s: NULL read callback", what);
    if (len > UINT64_MAX - base)
        return sck_err(SCK_ERR_INVALID_ARG, "%s: window of %llu bytes at offset %llu overflows", what, (ull)len, (ull)base);
    zip_src s = {rd, ctx, base, len, what};
    zip_end end = {0, 0, 0, 0};
    int rc = read_end(&s, &end);
    if (!rc) rc = read_central_dir(&s, &end, out);
    if (rc) zip_dir_free(out);
    return rc;
}

void zip_dir_free(zip_dir *d) {
    if (!d) return;
    for (size_t i = 0; i < d->n; i++) free(d->rec[i].name);
    free(d->rec);
    free(d->prefix);
    memset(d, 0, sizeof *d);
}

const zip_rec *zip_find(const zip_dir *d, const char *name) {
    if (!d || !name) return NULL;
    for (size_t i = 0; i < d->n; i++)
        if (!strcmp(d->rec[i].name, name)) return &d->rec[i];
    return NULL;
}

int zip_pread_fd(void *ctx, void *buf, size_t n, uint64_t off) {
    return sck_pread_full(*(const int *)ctx, buf, n, off, "archive file");
}

int zip_pread_mem(void *ctx, void *buf, size_t n, uint64_t off) {
    const zip_mem *m = ctx;
    if (off > m->len || n > m->len - off)
        return sck_err(SCK_ERR_FORMAT, "read of %zu bytes at offset %llu beyond the end of a %llu byte buffer", n,
                       (ull)off, (ull)m->len);
    if (n) memcpy(buf, m->data + off, n);
    return SCK_OK;
}
