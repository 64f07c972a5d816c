/* ckpt_meta_pt.c - a Fabric checkpoint's meta.pt entries as entries of an open checkpoint: they
 * follow the model's (src/ckpt.h), read once at open. */
#include <stdlib.h>
#include <string.h>

#include "load/ckpt.h"
#include "format/meta_pt.h"
#include "format/torch_item.h"

/* Sorted with its key beside it: qsort has no context argument, and thread ranks open at once. */
typedef struct keyed {
    const char *key;
    size_t index;
} keyed;

static int cmp_keyed(const void *a, const void *b) { return strcmp(((const keyed *)a)->key, ((const keyed *)b)->key); }

const char *ckpt_key(const sck_ckpt *ck, size_t i) {
    return i < ck->m.n ? ck->m.e[i].key : sck_value_key_at(ck->meta_pt, ck->meta_order[i - ck->m.n]);
}

const sck_value *ckpt_meta_value(const sck_ckpt *ck, size_t i) { return sck_value_at(ck->meta_pt, ck->meta_order[i - ck->m.n]); }

long ckpt_meta_find(const sck_ckpt *ck, const char *key) {
    size_t lo = 0, hi = ck->n_meta;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(key, sck_value_key_at(ck->meta_pt, ck->meta_order[mid]));
        if (!c) return (long)(ck->m.n + mid);
        if (c < 0) hi = mid;
        else lo = mid + 1;
    }
    return -1;
}

int ckpt_attach_meta_pt(sck_ckpt *ck) {
    sck_value *d;
    int rc = meta_pt_read(ck->dir, &d);
    if (rc || !d) return rc;
    size_t n = sck_value_len(d);
    size_t *order = malloc((n ? n : 1) * sizeof *order);
    uint64_t *nbytes = malloc((n ? n : 1) * sizeof *nbytes);
    sck_buf b;
    sck_buf_init(&b);
    if (!order || !nbytes) rc = sck_err(SCK_ERR_NOMEM, "%s/%s: out of memory", ck->dir, META_PT_NAME);
    for (size_t k = 0; k < n && !rc; k++) {
        order[k] = k;
        b.len = 0;
        if ((rc = ti_encode_value_pkl(&b, sck_value_at(d, k)))) rc = sck_err(rc, "%s/%s: out of memory", ck->dir, META_PT_NAME);
        nbytes[k] = b.len;
        if (!rc && ck_meta_find(&ck->m, sck_value_key_at(d, k)) >= 0)
            rc = sck_err(SCK_ERR_FORMAT, "%s/%s: key '%s' is in .metadata too", ck->dir, META_PT_NAME, sck_value_key_at(d, k));
    }
    sck_buf_free(&b);
    keyed *ks = rc ? NULL : malloc((n ? n : 1) * sizeof *ks);
    if (!rc && !ks) rc = sck_err(SCK_ERR_NOMEM, "%s/%s: out of memory", ck->dir, META_PT_NAME);
    for (size_t k = 0; ks && k < n; k++) ks[k] = (keyed){sck_value_key_at(d, k), k};
    if (ks) qsort(ks, n, sizeof *ks, cmp_keyed);
    for (size_t k = 0; ks && k < n; k++) order[k] = ks[k].index;
    free(ks);
    if (rc) {
        free(order);
        free(nbytes);
        sck_value_free(d);
        return rc;
    }
    ck->meta_pt = d;
    ck->n_meta = n;
    ck->meta_order = order;
    ck->meta_nbytes = nbytes;
    return SCK_OK;
}
