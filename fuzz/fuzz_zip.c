/* fuzz_zip.c - libFuzzer target for the zip reader.
 *
 * Any input must either be rejected with an error status or yield records whose payloads lie inside
 * the window; an accepted directory, written again by our writer, must read back the same.
 * Build: make fuzz (see the Makefile); run: build/fuzz/fuzz_zip -max_total_time=60 fuzz/corpus/zip */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/zip.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_ASSERT(c) do { if (!(c)) __builtin_trap(); } while (0)

/* Rewrites the accepted directory with our writer and checks that it reads back identically. */
static void rewrite_and_compare(const zip_dir *d, const uint8_t *data, uint32_t align) {
    if (!d->prefix[0]) return; /* the writer wants a non-empty top folder */
    zip_entry *e = calloc(d->n ? d->n : 1, sizeof *e);
    if (!e) return;
    for (size_t i = 0; i < d->n; i++)
        e[i] = (zip_entry){d->rec[i].name, data + d->rec[i].data_off, d->rec[i].size, d->rec[i].crc};
    sck_buf b;
    sck_buf_init(&b);
    if (zip_build_mem(&b, e, d->n, d->prefix, align) == SCK_OK) {
        zip_mem m = {b.data, b.len};
        zip_dir d2;
        FUZZ_ASSERT(zip_read_dir(zip_pread_mem, &m, 0, b.len, "rewritten", &d2) == SCK_OK);
        FUZZ_ASSERT(d2.n == d->n && !strcmp(d2.prefix, d->prefix));
        for (size_t i = 0; i < d->n; i++) {
            FUZZ_ASSERT(!strcmp(d2.rec[i].name, d->rec[i].name));
            FUZZ_ASSERT(d2.rec[i].size == d->rec[i].size && d2.rec[i].crc == d->rec[i].crc);
            FUZZ_ASSERT(d2.rec[i].data_off % align == 0);
            FUZZ_ASSERT(!memcmp(b.data + d2.rec[i].data_off, e[i].data, (size_t)e[i].size));
        }
        zip_dir_free(&d2);
    }
    sck_buf_free(&b);
    free(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* The first byte also picks a window start ('P' of a plain archive picks 0), so archives that do
     * not begin at offset 0 of the "file" are exercised. */
    uint64_t base = size > 0 ? (uint64_t)(data[0] & 15u) : 0;
    if (base > size) base = size;
    zip_mem m = {data, size};
    zip_dir d;
    int rc = zip_read_dir(zip_pread_mem, &m, base, size - base, "fuzz", &d);
    if (rc != SCK_OK) {
        FUZZ_ASSERT(rc < 0 && d.rec == NULL && d.n == 0 && d.prefix == NULL);
        FUZZ_ASSERT(strncmp(sck_last_error(), "fuzz: ", 6) == 0);
        return 0;
    }
    FUZZ_ASSERT(d.prefix != NULL);
    uint32_t crc = 0;
    for (size_t i = 0; i < d.n; i++) {
        const zip_rec *r = &d.rec[i];
        FUZZ_ASSERT(r->name && r->name[0]);
        FUZZ_ASSERT(r->data_off >= base && r->data_off <= size && r->size <= size - r->data_off);
        FUZZ_ASSERT(zip_find(&d, r->name) == r); /* names are unique */
        crc ^= sck_crc32(0, data + r->data_off, (size_t)r->size);
    }
    (void)crc;
    rewrite_and_compare(&d, data, size > 1 ? 1u << (data[size - 1] % 13u) : 64u);
    zip_dir_free(&d);
    return 0;
}
