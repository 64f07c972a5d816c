/* save.c - sck_save: gather plans, write one data file per rank, commit `.metadata` on rank 0.
 *
 * Collectives (always in this order on every rank, whatever fails locally, so nobody hangs):
 *   1. gather local plans + status      -> everyone builds the same global plan
 *   2. gather item offsets + status     -> rank 0 writes .metadata
 *   3. agree on rank 0's commit status
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "fileio.h"
#include "plan.h"
#include "torch_item.h"
#include "zip.h"

#define ITEM_ALIGN 64   /* torch.save's record alignment; keeps payloads mmap-friendly */

/* Writes one torch.save archive (pkl + optional payload) at the writer's position. */
static int write_archive(fwriter *w, const sck_buf *pkl, const void *payload, uint64_t plen, uint64_t *off, uint64_t *len) {
    zip_entry ents[4];
    size_t n;
    uint32_t crc = payload ? sck_crc32(0, payload, plen) : 0;
    ti_entries(ents, &n, pkl, payload, plen, crc);
    zip_plan zp;
    int rc = zip_plan_build(&zp, ents, n, "archive", w->pos, ITEM_ALIGN);
    if (rc) {
        zip_plan_free(&zp);
        return sck_err(rc, "%s: cannot lay out an archive", w->path);
    }
    *off = w->pos;
    *len = zp.total;
    for (size_t s = 0; s < zp.nseg && !rc; s++) {
        const zip_segment *sg = &zp.seg[s];
        const void *src = sg->entry < 0 ? (const void *)(zp.hdr.data + sg->buf_off) : ents[sg->entry].data;
        rc = fw_write(w, src, sg->len);
    }
    zip_plan_free(&zp);
    return rc;
}

static int write_item(fwriter *w, const save_plan *p, const plan_item *it, const sck_state *st, uint64_t *off, uint64_t *len) {
    const ck_entry *e = &p->m.e[it->entry];
    const st_entry *se = state_find(st, e->key);
    if (!se) return sck_err(SCK_ERR_INVALID_ARG, "'%s': missing from the local state", e->key);
    sck_buf pkl;
    sck_buf_init(&pkl);
    int rc;
    if (!e->is_bytes) {
        const ck_chunk *c = &e->chunks[it->chunk];
        const st_piece *pc = &se->pieces[it->local_piece];
        uint64_t nbytes = box_numel(&c->box) * sck_dtype_size((sck_dtype)e->dtype);
        rc = ti_encode_tensor_pkl(&pkl, (sck_dtype)e->dtype, e->ndim, c->box.size);
        if (!rc) rc = write_archive(w, &pkl, pc->data, nbytes, off, len);
        else rc = sck_err(rc, "'%s': out of memory", e->key);
    } else if (se->kind == ENT_BLOB) {
        /* Blobs are stored as torch.save(bytes) so torch's DCP loader (torch.load per item) reads them too. */
        sck_value *b = sck_value_bytes(se->blob, se->blob_n);
        rc = b ? ti_encode_value_pkl(&pkl, b) : sck_err(SCK_ERR_NOMEM, "'%s': out of memory", e->key);
        sck_value_free(b);
        if (!rc) rc = write_archive(w, &pkl, NULL, 0, off, len);
    } else {
        rc = ti_encode_value_pkl(&pkl, se->value);
        if (!rc) rc = write_archive(w, &pkl, NULL, 0, off, len);
    }
    sck_buf_free(&pkl);
    return rc;
}

/* Writes this rank's data file; fills out[2*i], out[2*i+1] with each item's offset and length. */
static int write_rank_file(const char *dir, int rank, const save_plan *p, const sck_state *st, int do_fsync, uint64_t *out) {
    char path[4096];
    int k = snprintf(path, sizeof path, "%s/__%d_0.distcp", dir, rank);
    if (k < 0 || (size_t)k >= sizeof path) return sck_err(SCK_ERR_INVALID_ARG, "%s: path too long", dir);
    int rc = ensure_dir(dir);
    if (rc) return rc;
    fwriter w;
    if ((rc = fw_open(&w, path))) return rc;
    for (size_t i = 0; i < p->nitems[rank] && !rc; i++) rc = write_item(&w, p, &p->items[rank][i], st, &out[2 * i], &out[2 * i + 1]);
    if (rc) {
        fw_abort(&w);
        return rc;
    }
    return fw_close(&w, do_fsync);
}

/* Fills in every chunk's offset/length from the gathered per-rank results. */
static int apply_offsets(save_plan *p, const uint8_t *all, const size_t *counts) {
    const uint8_t *q = all;
    for (int r = 0; r < p->nranks; r++) {
        if (counts[r] != p->nitems[r] * 16) return sck_err(SCK_ERR_FORMAT, "rank %d reported %zu bytes of offsets, expected %zu", r, counts[r], p->nitems[r] * 16);
        for (size_t i = 0; i < p->nitems[r]; i++) {
            const plan_item *it = &p->items[r][i];
            ck_chunk *c = &p->m.e[it->entry].chunks[it->chunk];
            memcpy(&c->offset, q + 16 * i, 8);
            memcpy(&c->length, q + 16 * i + 8, 8);
        }
        q += counts[r];
    }
    return SCK_OK;
}

static int save_collective(sck_comm *comm, const char *dir, const sck_state *st, int do_fsync) {
    int rank = comm->rank;
    int local = SCK_OK;
    /* Rank 0 prepares the directory and retires an old commit marker before anyone writes data,
     * so a crash mid-save never leaves an old .metadata pointing into new data files. */
    if (rank == 0) {
        local = ensure_dir(dir);
        if (!local) {
            char mp[4096];
            snprintf(mp, sizeof mp, "%s/.metadata", dir);
            if (unlink(mp) != 0 && errno != ENOENT) local = sck_err_errno(SCK_ERR_IO, errno, "%s: cannot remove old commit marker", mp);
            else if (do_fsync) local = fsync_dir(dir);
        }
    }
    sck_buf mine;
    sck_buf_init(&mine);
    if (!local) local = plan_encode_local(st, &mine);
    void *all = NULL;
    size_t counts_stack[1];
    size_t *counts = comm->size == 1 ? counts_stack : calloc((size_t)comm->size, sizeof *counts);
    if (!counts) {
        /* Take part in all three collectives regardless, so peers never hang. */
        sck_buf_free(&mine);
        local = sck_err(SCK_ERR_NOMEM, "rank %d: out of memory", rank);
        int rc = comm_agree(comm, local);
        rc = comm_agree(comm, rc ? rc : local);
        return comm_agree(comm, rc ? rc : local);
    }
    int rc = comm_agree_gather(comm, local, mine.data, mine.len, &all, counts);
    sck_buf_free(&mine);
    save_plan plan;
    memset(&plan, 0, sizeof plan);
    /* The plan is computed identically everywhere; an error here is still passed through the next
     * collectives so that a rank failing alone (out of memory) cannot strand the others. */
    /* An error agreed in collective 1 is already identical everywhere: keep it, and contribute OK to
     * the remaining collectives so its message is not wrapped again. */
    int agreed = rc;
    local = agreed ? SCK_OK : plan_build(all, counts, comm->size, &plan);
    free(all);
    all = NULL;

    /* Collective 2: write, then share where each item landed. */
    uint64_t *offs = NULL;
    if (!agreed && !local) {
        offs = calloc(plan.nitems[rank] * 2 + 1, sizeof *offs);
        local = offs ? write_rank_file(dir, rank, &plan, st, do_fsync, offs) : sck_err(SCK_ERR_NOMEM, "out of memory");
    }
    rc = comm_agree_gather(comm, local, offs, offs ? plan.nitems[rank] * 16 : 0, &all, counts);
    free(offs);
    if (agreed) rc = agreed;

    /* Collective 3: rank 0 commits. */
    local = SCK_OK;
    if (!rc && rank == 0) {
        local = apply_offsets(&plan, all, counts);
        sck_buf meta;
        sck_buf_init(&meta);
        if (!local) local = dcp_meta_encode(&plan.m, &meta);
        if (!local) local = write_file_atomic(dir, ".metadata", meta.data, meta.len, do_fsync);
        sck_buf_free(&meta);
    }
    free(all);
    if (counts != counts_stack) free(counts);
    plan_free(&plan);
    /* An error agreed in collective 2 is already identical everywhere; still take part in the last
     * collective (contributing OK, which leaves that message intact). */
    int rc3 = comm_agree(comm, local);
    return rc ? rc : rc3;
}

int sck_save(sck_comm *comm, const char *dir, const sck_state *st, const sck_save_opts *opts) {
    sck_err_clear();
    if (!dir || !*dir || !st) return sck_err(SCK_ERR_INVALID_ARG, "sck_save: NULL or empty directory or state");
    if (opts && opts->flags & ~SCK_SAVE_NO_FSYNC) return sck_err(SCK_ERR_INVALID_ARG, "sck_save: unknown flags 0x%x", opts->flags);
    int do_fsync = !(opts && (opts->flags & SCK_SAVE_NO_FSYNC));
    if (comm) return save_collective(comm, dir, st, do_fsync);
    sck_comm *single = sck_comm_single();
    if (!single) return sck_err(SCK_ERR_NOMEM, "out of memory");
    int rc = save_collective(single, dir, st, do_fsync);
    sck_comm_free(single);
    return rc;
}
