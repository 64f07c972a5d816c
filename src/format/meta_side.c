/* meta_side.c - the model cache beside `.metadata` (see meta_side.h). */
#include "format/meta_side.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/crc32c.h"
#include "io/fileio.h"
#include "format/meta_wire.h"
#include "io/storage.h"

static const uint8_t side_magic[7] = {'S', 'C', 'K', 'S', 'I', 'D', 'E'};

#define SIDE_HEAD_V1 24
#define SIDE_HEAD 64

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v) {
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

/* Bytes 24..56 of a version 2 header: the identity of a `.metadata` file. */
static void put_identity(uint8_t *p, const struct stat *sb) {
    put64(p, (uint64_t)sb->st_ino);
    put64(p + 8, (uint64_t)(int64_t)sb->st_mtim.tv_sec);
    put32(p + 16, (uint32_t)sb->st_mtim.tv_nsec);
    put32(p + 20, (uint32_t)sb->st_ctim.tv_nsec);
    put64(p + 24, (uint64_t)(int64_t)sb->st_ctim.tv_sec);
}

int meta_side_write(const char *dir, const ck_meta *m, const uint8_t *meta, size_t meta_len) {
    sck_buf b;
    sck_buf_init(&b);
    uint8_t head[SIDE_HEAD] = {0};
    int rc = sck_buf_append(&b, head, sizeof head);
    if (!rc) rc = meta_wire_encode(m, &b);
    if (!rc) {
        char path[4200];
        snprintf(path, sizeof path, "%s/.metadata", dir);
        struct stat sb;
        int known = io_stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size == (uint64_t)meta_len;
        memcpy(b.data, side_magic, 7);
        b.data[7] = 2;
        put64(b.data + 8, (uint64_t)meta_len);
        put32(b.data + 16, sck_crc32c(0, meta, meta_len));
        put32(b.data + 20, sck_crc32c(0, b.data + SIDE_HEAD, b.len - SIDE_HEAD));
        if (known) put_identity(b.data + 24, &sb);
        put32(b.data + 56, (uint32_t)known);
        put32(b.data + 60, sck_crc32c(0, b.data, 60));
        rc = write_file(dir, META_SIDE_NAME, b.data, b.len, 0);
    } else if (rc == SCK_ERR_NOMEM) {
        rc = sck_err(SCK_ERR_NOMEM, "%s/%s: out of memory", dir, META_SIDE_NAME);
    }
    sck_buf_free(&b);
    return rc;
}

/* Whether the version 2 header h records the identity of the file `sb` describes, on a file system
 * with sub-second times (with whole seconds, a rewrite in the same second keeps the times). */
static int same_identity(const uint8_t *h, const struct stat *sb) {
    if (sck_le32(h + 56) != 1 || (sb->st_mtim.tv_nsec == 0 && sb->st_ctim.tv_nsec == 0)) return 0;
    uint8_t now[32];
    put_identity(now, sb);
    return !memcmp(h + 24, now, sizeof now) && sck_le64(h + 8) == (uint64_t)sb->st_size;
}

int meta_side_open(const char *dir, uint8_t **wire, size_t *wire_len, uint8_t **meta, size_t *meta_len) {
    *wire = *meta = NULL;
    *wire_len = *meta_len = 0;
    char path[4200], mp[4200], saved[1024];
    snprintf(path, sizeof path, "%s/%s", dir, META_SIDE_NAME);
    snprintf(mp, sizeof mp, "%s/.metadata", dir);
    snprintf(saved, sizeof saved, "%s", sck_last_error());
    uint8_t *d = NULL;
    size_t n = 0, head = 0;
    struct stat sb;
    int have_st = io_lstat(mp, &sb) == 0 && S_ISREG(sb.st_mode); /* a link or FIFO: read (and refused) below */
    if (sck_read_file_own(path, &d, &n) == SCK_OK && n >= SIDE_HEAD_V1 && !memcmp(d, side_magic, 7)) {
        if (d[7] == 1) head = SIDE_HEAD_V1;
        else if (d[7] == 2 && n >= SIDE_HEAD && sck_le32(d + 60) == sck_crc32c(0, d, 60)) head = SIDE_HEAD;
        if (head && sck_le32(d + 20) != sck_crc32c(0, d + head, n - head)) head = 0;
    }
    sck_err_set_raw(saved); /* no cache (a torch checkpoint), or unreadable: not an error */
    if (!head) {
        sck_big_free(d);
        d = NULL;
    }
    if (!(head == SIDE_HEAD && have_st && same_identity(d, &sb))) {
        int rc = sck_read_file_own(mp, meta, meta_len);
        if (rc) {
            sck_big_free(d);
            return rc;
        }
        if (head && (sck_le64(d + 8) != (uint64_t)*meta_len || sck_le32(d + 16) != sck_crc32c(0, *meta, *meta_len))) head = 0;
    }
    if (!head) {
        sck_big_free(d);
        return SCK_OK;
    }
    memmove(d, d + head, n - head);
    *wire = d;
    *wire_len = n - head;
    return SCK_OK;
}

static int same_chunk(const ck_meta *a, const ck_chunk *x, const ck_meta *b, const ck_chunk *y) {
    if (x->offset != y->offset || x->length != y->length || x->raw != y->raw || x->transformed != y->transformed ||
        x->has_crc != y->has_crc || (x->has_crc && x->crc32c != y->crc32c))
        return 0;
    return x->file < a->nfiles && y->file < b->nfiles && !strcmp(a->files[x->file], b->files[y->file]);
}

int meta_same(const ck_meta *a, const ck_meta *b) {
    if (a->n != b->n) return 0;
    for (size_t i = 0; i < a->n; i++) {
        const ck_entry *x = &a->e[i], *y = &b->e[i];
        if (strcmp(x->key, y->key) || x->is_bytes != y->is_bytes || x->dtype != y->dtype || strcmp(x->dtype_name, y->dtype_name) ||
            x->ndim != y->ndim || x->nchunks != y->nchunks || memcmp(x->shape, y->shape, (size_t)x->ndim * sizeof *x->shape) ||
            !!x->path != !!y->path || (x->path && (x->path_len != y->path_len || memcmp(x->path, y->path, x->path_len))))
            return 0;
        /* Both entries have x->ndim dimensions: their dims arrays have the same length. */
        if (x->ndim && x->nchunks && memcmp(x->dims, y->dims, 2 * (size_t)x->ndim * x->nchunks * sizeof *x->dims)) return 0;
        for (size_t k = 0; k < x->nchunks; k++)
            if (!same_chunk(a, &x->chunks[k], b, &y->chunks[k])) return 0;
    }
    return 1;
}
