/* verify.c - sck_ckpt_verify: read every item of a checkpoint in full and check everything that can be
 * checked without the caller's data: decoding, coverage and checksums (CRC-32C, or the zip CRC-32s of
 * torch-written items). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "load/ckpt.h"
#include "format/meta_pt.h"
#include "format/meta_side.h"
#include "io/storage.h"

/* Chunks of a tensor must cover it exactly once: no overlap (also refused at open), no hole. */
static int check_cover(const sck_ckpt *ck, const ck_entry *e, sck_box *scratch) {
    for (size_t c = 0; c < e->nchunks; c++) ck_chunk_box(e, c, &scratch[c]);
    long a, b;
    if (box_cover_exact(e->ndim, e->shape, scratch, e->nchunks, &a, &b)) return SCK_OK;
    const char *file = e->nchunks ? ck->m.files[e->chunks[a >= 0 ? a : 0].file] : "(no chunks)";
    if (a >= 0 && b >= 0)
        return sck_err(SCK_ERR_COVERAGE, "%s/%s: tensor '%s': saved chunks %ld and %ld overlap", ck->dir, file, e->key, a, b);
    if (a >= 0) return sck_err(SCK_ERR_COVERAGE, "%s/%s: tensor '%s': saved chunk %ld lies outside the tensor", ck->dir, file, e->key, a);
    return sck_err(SCK_ERR_COVERAGE, "%s/%s: tensor '%s': saved chunks leave holes (not every element is stored)", ck->dir, file,
                   e->key);
}

static int check_entry(sck_ckpt *ck, size_t i, sck_box *scratch, sck_verify_stats *st) {
    const ck_entry *e = &ck->m.e[i];
    int rc;
    if (!e->is_bytes) {
        if (e->dtype < 0)
            return sck_err(SCK_ERR_UNSUPPORTED, "%s: tensor '%s': stored dtype %s is not supported", ck->dir, e->key, e->dtype_name);
        if ((rc = check_cover(ck, e, scratch))) return rc;
    }
    for (size_t c = 0; c < e->nchunks; c++) {
        ck_res *r;
        /* Bytes first, so a flipped bit reads as a checksum mismatch rather than as whatever it broke:
         * the item's CRC-32C, or without one (torch-written) the zip CRC-32 of each of its records. */
        const ck_chunk *ch = &e->chunks[c];
        int summed = ch->has_crc;
        if (!ch->has_crc && !ch->raw) rc = ckpt_check_zip_item(ck, i, c, &summed);
        else rc = ckpt_check_item(ck, i, c, NULL, 0, 0);
        if (rc) return rc;
        if (!e->is_bytes && (rc = ckpt_resolve_chunk(ck, i, c, &r))) return rc;
        st->chunks++;
        st->checksummed += summed != 0;
        st->bytes += e->chunks[c].length;
    }
    if (e->is_bytes) {
        /* A byte item must decode as what it claims to be (a torch.save archive, or raw bytes). */
        void *data = NULL;
        size_t n = 0;
        sck_value *v = NULL;
        int saved = ck->verify;
        ck->verify = 0; /* just checked */
        rc = sck_ckpt_read_bytes(ck, i, &data, &n, &v);
        ck->verify = saved;
        free(data);
        sck_value_free(v);
        if (rc) return rc;
    }
    st->entries++;
    return SCK_OK;
}

/* The model came from .metadata.sck: the pickle, which torch reads, must say the same. */
static int check_side(const sck_ckpt *ck) {
    char mp[4200];
    snprintf(mp, sizeof mp, "%s/.metadata", ck->dir);
    uint8_t *data = NULL;
    size_t n = 0;
    ck_meta m;
    int rc = sck_read_file_big(mp, &data, &n);
    if (!rc) rc = dcp_meta_decode(data, n, mp, &m);
    sck_big_free(data);
    if (rc) return rc;
    int same = meta_same(&m, &ck->m);
    ck_meta_free(&m);
    return same ? SCK_OK : sck_err(SCK_ERR_FORMAT, "%s/%s: describes another checkpoint than %s", ck->dir, META_SIDE_NAME, mp);
}

/* meta.pt is read again (its data.pkl's zip CRC-32 checked, the pickle decoded): it must still hold
 * what the open read. */
static int check_meta_pt(const sck_ckpt *ck, sck_verify_stats *st) {
    sck_value *d = NULL;
    int rc = meta_pt_read(ck->dir, &d);
    if (!rc && !sck_value_equal(d, ck->meta_pt))
        rc = sck_err(SCK_ERR_FORMAT, "%s/%s: changed since the checkpoint was opened", ck->dir, META_PT_NAME);
    sck_value_free(d);
    if (rc) return rc;
    for (size_t k = 0; k < ck->n_meta; k++) st->bytes += ck->meta_nbytes[k];
    st->entries += ck->n_meta;
    st->chunks++;
    return SCK_OK;
}

int sck_ckpt_verify(sck_ckpt *ck, sck_verify_stats *stats) {
    if (!ck) return sck_err(SCK_ERR_INVALID_ARG, "sck_ckpt_verify: NULL checkpoint");
    sck_verify_stats st;
    memset(&st, 0, sizeof st);
    size_t most = 1;
    for (size_t i = 0; i < ck->m.n; i++)
        if (ck->m.e[i].nchunks > most) most = ck->m.e[i].nchunks;
    sck_box *scratch = malloc(most * sizeof *scratch);
    if (!scratch) return sck_err(SCK_ERR_NOMEM, "%s: out of memory", ck->dir);
    int rc = ck->from_side ? check_side(ck) : SCK_OK;
    /* Every archive is parsed, and where the model cache says a payload lies is checked: chunks an
     * earlier read resolved from the cache alone are resolved again. */
    ck->full_resolve = 1;
    for (size_t i = 0; i < ck->m.n; i++)
        for (size_t c = 0; ck->res[i] && c < ck->m.e[i].nchunks; c++) ck->res[i][c].done = 0;
    for (size_t i = 0; i < ck->m.n && !rc; i++) rc = check_entry(ck, i, scratch, &st);
    free(scratch);
    if (!rc && ck->n_meta) rc = check_meta_pt(ck, &st);
    if (stats) *stats = st;
    return rc;
}
