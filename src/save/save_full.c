/* save_full.c - sck_save_full: one consolidated safetensors file (or HF shards) from a sharded state,
 * with no rank ever holding another rank's tensor data.
 *
 * Collectives (the same sequence on every rank; an agreed error ends the call everywhere at once):
 *   1. gather local plans           -> everyone builds the same global plan (coverage checked)
 *   2. gather blob/value text         -> everyone builds the same layout: files, headers, offsets
 *   3. agree on rank 0 creating the temporary files (headers written, sizes set)
 *   4. agree on every rank writing its boxes in place (pwrite of row-major runs) and syncing
 *   5. agree on rank 0's commit (fsync, rename, HF index)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "io/fileio.h"
#include "core/plan.h"
#include "format/torch_item.h"
#include "save/save_full.h"
#include "format/st_meta.h"
#include "format/st_out.h"
#include "io/storage.h"

save_full_fault_fn save_full_fault;

static int fault(int rank, const char *stage) {
    if (save_full_fault && save_full_fault(rank, stage))
        return sck_err(SCK_ERR_IO, "injected fault at %s", stage);
    return SCK_OK;
}

/* ---- blobs and values: __metadata__ text (st_meta.h) ---- */

/* Records for the bytes entries this rank writes: u32 keylen, key, u8 is_json, u32 textlen, text. */
static int encode_values(const save_plan *p, int rank, const sck_state *st, sck_buf *out) {
    for (size_t i = 0; i < p->nitems[rank]; i++) {
        const ck_entry *e = &p->m.e[p->items[rank][i].entry];
        if (!e->is_bytes) continue;
        const st_entry *se = state_find(st, e->key);
        if (!se) return sck_err(SCK_ERR_INVALID_ARG, "'%s': missing from the local state", e->key);
        sck_value *blob = NULL;
        int rc = SCK_OK;
        if (se->kind == ENT_BLOB && se->verbatim) rc = ti_archive_value(se->blob, se->blob_n, e->key, &blob); /* torch's item: its value */
        else if (se->kind == ENT_BLOB && !(blob = sck_value_bytes(se->blob, se->blob_n))) rc = sck_err(SCK_ERR_NOMEM, "'%s': out of memory", e->key);
        if (rc) return rc;
        char *text;
        size_t tl;
        int is_json;
        rc = st_meta_text(blob ? blob : se->value, e->key, &text, &tl, &is_json);
        sck_value_free(blob);
        if (rc) return rc;
        size_t kl = strlen(e->key);
        rc = sck_buf_put_le32(out, (uint32_t)kl) || sck_buf_append(out, e->key, kl) || sck_buf_put_u8(out, (uint8_t)is_json) ||
             sck_buf_put_le32(out, (uint32_t)tl) || sck_buf_append(out, text, tl);
        free(text);
        if (rc) return sck_err(SCK_ERR_NOMEM, "'%s': out of memory", e->key);
    }
    return SCK_OK;
}

/* One record of encode_values at *q (advanced past it), or 0 when the bytes left do not hold one. */
static int next_record(const uint8_t **q, const uint8_t *end, const char **key, uint32_t *kl, int *is_json,
                       const char **text, uint32_t *tl) {
    const uint8_t *r = *q;
    if (end - r < 4 || (*kl = sck_le32(r), (size_t)(end - r - 4) < (size_t)*kl + 5)) return 0;
    *key = (const char *)r + 4;
    r += 4 + *kl;
    *is_json = *r++ != 0;
    if (end - r < 4 || (*tl = sck_le32(r), (size_t)(end - r - 4) < *tl)) return 0;
    *text = (const char *)r + 4;
    *q = r + 4 + *tl;
    return 1;
}

/* Every rank's records -> the __metadata__ dict of strings, in the plan's (sorted) key order. */
static int decode_values(const save_plan *p, const uint8_t *all, size_t total, sck_value **out) {
    sck_value *got = sck_value_dict(), *md = sck_value_dict(), *json = sck_value_list();
    int rc = got && md && json ? SCK_OK : sck_err(SCK_ERR_NOMEM, "out of memory");
    const uint8_t *q = all, *end = all + total;
    while (!rc && q < end) {
        const char *k, *text;
        uint32_t kl, tl;
        int is_json;
        if (!next_record(&q, end, &k, &kl, &is_json, &text, &tl)) {
            rc = sck_err(SCK_ERR_FORMAT, "value records are corrupt");
            break;
        }
        /* the record itself, by key: [is_json byte][text] */
        char *key = sck_strndup(k, kl);
        sck_value *rec = sck_value_bytes(text - 5, (size_t)tl + 5);
        if (!key || !rec || sck_value_dict_set(got, key, rec)) rc = sck_err(SCK_ERR_NOMEM, "out of memory");
        free(key);
    }
    for (size_t i = 0; i < p->m.n && !rc; i++) {
        if (!p->m.e[i].is_bytes) continue;
        const char *key = p->m.e[i].key;
        size_t n = 0;
        const uint8_t *r = (const uint8_t *)sck_value_get_string(sck_value_dict_get(got, key), &n);
        if (!r) rc = sck_err(SCK_ERR_FORMAT, "'%s': no rank sent its value", key);
        else rc = st_meta_put(md, json, key, (const char *)r + 5, n - 5, r[0] != 0);
    }
    if (!rc) rc = st_meta_finish(md, json);
    sck_value_free(got);
    sck_value_free(json);
    if (rc) {
        sck_value_free(md);
        return rc;
    }
    *out = md;
    return SCK_OK;
}

/* ---- layout ---- */

/* Tensors in key order; tix[entry] = tensor index (or SIZE_MAX for bytes entries). */
static int build_layout(const save_plan *p, const sck_value *values, const char *path, const sck_full_opts *o,
                        size_t *tix, st_layout *L) {
    st_tensor *t = calloc(p->m.n ? p->m.n : 1, sizeof *t);
    if (!t) return sck_err(SCK_ERR_NOMEM, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < p->m.n; i++) {
        const ck_entry *e = &p->m.e[i];
        tix[i] = SIZE_MAX;
        if (e->is_bytes) continue;
        t[n].name = e->key;
        t[n].dtype = (sck_dtype)e->dtype;
        t[n].ndim = e->ndim;
        memcpy(t[n].shape, e->shape, sizeof t[n].shape);
        tix[i] = n++;
    }
    int rc = st_layout_build(t, n, values, o->format == SCK_FULL_HF_SHARDED,
                             o->max_shard_bytes, path, L);
    free(t);
    return rc;
}

/* ---- writing this rank's boxes in place ---- */

typedef struct run_ctx {
    int fd;
    const char *path;
    const uint8_t *src;
    uint64_t base;
} run_ctx;

static int write_run(void *vctx, uint64_t src_off, uint64_t dst_off, uint64_t nbytes) {
    run_ctx *r = vctx;
    return sck_pwrite_full(r->fd, r->src + src_off, nbytes, r->base + dst_off, r->path);
}

static int write_boxes(const save_plan *p, int rank, const sck_state *st, const st_layout *L, const size_t *tix,
                       int do_fsync) {
    int *fds = malloc((L->nfiles ? L->nfiles : 1) * sizeof *fds);
    if (!fds) return sck_err(SCK_ERR_NOMEM, "rank %d: out of memory", rank);
    for (size_t f = 0; f < L->nfiles; f++) fds[f] = -1;
    int rc = SCK_OK;
    char path[4096];
    for (size_t i = 0; i < p->nitems[rank] && !rc; i++) {
        const plan_item *it = &p->items[rank][i];
        const ck_entry *e = &p->m.e[it->entry];
        if (e->is_bytes) continue;
        const st_entry *se = state_find(st, e->key);
        if (!se || it->local_piece >= se->npieces) {
            rc = sck_err(SCK_ERR_INVALID_ARG, "'%s': missing from the local state", e->key);
            break;
        }
        size_t ti = tix[it->entry];
        uint32_t fi = L->file_of[ti];
        if ((rc = st_out_path(L, fi, 1, path, sizeof path))) break;
        if (fds[fi] < 0 && (rc = st_out_open(L, fi, &fds[fi]))) break;
        const st_piece *pc = &se->pieces[it->local_piece];
        sck_box full;
        memset(&full, 0, sizeof full);
        full.ndim = e->ndim;
        memcpy(full.size, e->shape, sizeof full.size);
        run_ctx rx = {fds[fi], path, pc->data, L->data_off[ti]};
        sck_box cbox;
        ck_chunk_box(e, it->chunk, &cbox);
        rc = box_runs(&pc->box, NULL, &full, &cbox, sck_dtype_size((sck_dtype)e->dtype), write_run, &rx);
        if (rc) sck_err_wrap(rc, "'%s'", e->key);
    }
    for (size_t f = 0; f < L->nfiles; f++) {
        if (fds[f] < 0) continue;
        st_out_path(L, f, 1, path, sizeof path);
        if (!rc && do_fsync && io_fsync(fds[f], path) != 0) {
            rc = sck_err_errno(SCK_ERR_IO, errno, "%s: fsync failed", path);
        }
        if (io_close(fds[f], path) != 0 && !rc) {
            rc = sck_err_errno(SCK_ERR_IO, errno, "%s: close failed", path);
        }
    }
    free(fds);
    return rc;
}

/* ---- the collective ---- */

static int save_full_collective(sck_comm *comm, const char *path, const sck_state *st, const sck_full_opts *o) {
    int rank = comm->rank, do_fsync = !(o->flags & SCK_SAVE_NO_FSYNC);
    size_t *counts = calloc((size_t)comm->size, sizeof *counts);
    save_plan plan;
    memset(&plan, 0, sizeof plan);
    st_layout L;
    memset(&L, 0, sizeof L);
    sck_value *values = NULL;
    size_t *tix = NULL;
    void *all = NULL;
    sck_buf mine;
    sck_buf_init(&mine);
    int began = 0;

    /* 1: plans */
    int local = counts ? fault(rank, "plan") : sck_err(SCK_ERR_NOMEM, "rank %d: out of memory", rank);
    if (!local && st->ndev) /* its writes go straight from the boxes to their places: none staged */
        local = sck_err(SCK_ERR_UNSUPPORTED, "rank %d: sck_save_full: device pieces are not supported; use sck_save", rank);
    if (!local) local = plan_encode_local(st, 0, &mine);
    int rc = counts ? comm_agree_gather(comm, local, mine.data, mine.len, &all, counts) : comm_agree(comm, local);
    if (rc) goto out;
    local = plan_build(all, counts, comm->size, &plan);
    comm_gather_free(comm, all);
    all = NULL;

    /* 2: blob/value __metadata__ text from whichever rank the plan picked for each */
    mine.len = 0;
    if (!local) local = encode_values(&plan, rank, st, &mine);
    rc = comm_agree_gather(comm, local, mine.data, mine.len, &all, counts);
    if (rc) goto out;
    size_t total = 0;
    for (int r = 0; r < comm->size; r++) total += counts[r];
    local = decode_values(&plan, all, total, &values);
    tix = calloc(plan.m.n ? plan.m.n : 1, sizeof *tix);
    if (!local && !tix) local = sck_err(SCK_ERR_NOMEM, "rank %d: out of memory", rank);
    if (!local) local = build_layout(&plan, values, path, o, tix, &L);

    /* 3: rank 0 creates the temporary files */
    if (!local && rank == 0) {
        local = st_out_begin(&L);
        began = !local;
        if (!local) local = fault(rank, "create");
    }
    if ((rc = comm_agree(comm, local))) goto out;

    /* 4: everyone writes its own boxes in place */
    local = write_boxes(&plan, rank, st, &L, tix, do_fsync);
    if (!local) local = fault(rank, "write");
    if ((rc = comm_agree(comm, local))) goto out;

    /* 5: rank 0 commits */
    local = SCK_OK;
    if (rank == 0) {
        local = fault(rank, "commit");
        if (!local) local = st_out_commit(&L, do_fsync);
        began = 0; /* st_out_commit cleans up after itself */
        if (local) st_out_abort(&L);
    }
    rc = comm_agree(comm, local);
out:
    if (rc && began) st_out_abort(&L);
    comm_gather_free(comm, all);
    free(counts);
    free(tix);
    sck_buf_free(&mine);
    sck_value_free(values);
    st_layout_free(&L);
    plan_free(&plan);
    return rc;
}

int sck_save_full(sck_comm *comm, const char *path, const sck_state *st, const sck_full_opts *opts) {
    sck_err_clear();
    sck_full_opts o;
    memset(&o, 0, sizeof o);
    if (opts) o = *opts;
    if (!path || !*path || !st) return sck_err(SCK_ERR_INVALID_ARG, "sck_save_full: NULL or empty path or state");
    if (o.format != SCK_FULL_SAFETENSORS && o.format != SCK_FULL_HF_SHARDED)
        return sck_err(SCK_ERR_INVALID_ARG, "sck_save_full: unknown format %d", (int)o.format);
    if (o.flags & ~SCK_SAVE_NO_FSYNC) return sck_err(SCK_ERR_INVALID_ARG, "sck_save_full: unknown flags 0x%x", o.flags);
    int bad = sck_check_reserved("sck_save_full: sck_full_opts", o.reserved, sizeof o.reserved / sizeof o.reserved[0]);
    if (bad) return bad;
    if (comm) return save_full_collective(comm, path, st, &o);
    sck_comm *single = sck_comm_single();
    if (!single) return sck_err(SCK_ERR_NOMEM, "out of memory");
    int rc = save_full_collective(single, path, st, &o);
    sck_comm_free(single);
    return rc;
}
