/* meta_side.c - the model cache beside `.metadata` (see meta_side.h). */
#include "meta_side.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "fileio.h"
#include "meta_wire.h"

static const uint8_t side_magic[8] = {'S', 'C', 'K', 'S', 'I', 'D', 'E', 1};

#define SIDE_HEAD 24

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

int meta_side_write(const char *dir, const ck_meta *m, const uint8_t *meta, size_t meta_len) {
    sck_buf b;
    sck_buf_init(&b);
    uint8_t head[SIDE_HEAD] = {0};
    int rc = sck_buf_append(&b, head, sizeof head);
    if (!rc) rc = meta_wire_encode(m, &b);
    if (!rc) {
        memcpy(b.data, side_magic, 8);
        put32(b.data + 8, (uint32_t)meta_len);
        put32(b.data + 12, (uint32_t)((uint64_t)meta_len >> 32));
        put32(b.data + 16, sck_crc32c(0, meta, meta_len));
        put32(b.data + 20, sck_crc32c(0, b.data + SIDE_HEAD, b.len - SIDE_HEAD));
        rc = write_file(dir, META_SIDE_NAME, b.data, b.len, 0);
    } else if (rc == SCK_ERR_NOMEM) {
        rc = sck_err(SCK_ERR_NOMEM, "%s/%s: out of memory", dir, META_SIDE_NAME);
    }
    sck_buf_free(&b);
    return rc;
}

void meta_side_read(const char *dir, const uint8_t *meta, size_t meta_len, uint8_t **wire, size_t *wire_len) {
    *wire = NULL;
    *wire_len = 0;
    char path[4200], saved[1024];
    snprintf(path, sizeof path, "%s/%s", dir, META_SIDE_NAME);
    snprintf(saved, sizeof saved, "%s", sck_last_error());
    uint8_t *d = NULL;
    size_t n = 0;
    if (sck_read_file(path, &d, &n) != SCK_OK) { /* none (a torch checkpoint) or unreadable */
        sck_err_set_raw(saved);
        return;
    }
    if (n >= SIDE_HEAD && !memcmp(d, side_magic, 8) && sck_le64(d + 8) == (uint64_t)meta_len &&
        sck_le32(d + 16) == sck_crc32c(0, meta, meta_len) && sck_le32(d + 20) == sck_crc32c(0, d + SIDE_HEAD, n - SIDE_HEAD)) {
        memmove(d, d + SIDE_HEAD, n - SIDE_HEAD);
        *wire = d;
        *wire_len = n - SIDE_HEAD;
        return;
    }
    free(d);
}

static int same_chunk(const ck_meta *a, const ck_chunk *x, const ck_meta *b, const ck_chunk *y) {
    if (x->box.ndim != y->box.ndim || x->offset != y->offset || x->length != y->length || x->raw != y->raw ||
        x->transformed != y->transformed || x->has_crc != y->has_crc || (x->has_crc && x->crc32c != y->crc32c))
        return 0;
    for (int d = 0; d < x->box.ndim; d++)
        if (x->box.off[d] != y->box.off[d] || x->box.size[d] != y->box.size[d]) return 0;
    return x->file < a->nfiles && y->file < b->nfiles && !strcmp(a->files[x->file], b->files[y->file]);
}

int meta_same(const ck_meta *a, const ck_meta *b) {
    if (a->n != b->n) return 0;
    for (size_t i = 0; i < a->n; i++) {
        const ck_entry *x = &a->e[i], *y = &b->e[i];
        if (strcmp(x->key, y->key) || x->is_bytes != y->is_bytes || x->dtype != y->dtype || strcmp(x->dtype_name, y->dtype_name) ||
            x->ndim != y->ndim || x->nchunks != y->nchunks || memcmp(x->shape, y->shape, (size_t)x->ndim * sizeof *x->shape))
            return 0;
        for (size_t k = 0; k < x->nchunks; k++)
            if (!same_chunk(a, &x->chunks[k], b, &y->chunks[k])) return 0;
    }
    return 1;
}
