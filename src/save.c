/* save.c - sck_save: gather plans, write one data file per rank into a temporary directory, and let
 * rank 0 commit `.metadata` and swap the directory into place (src/commit.c).
 *
 * Collectives (always in this order on every rank, whatever fails locally, so nobody hangs):
 *   1. gather local plans + status      -> everyone builds the same global plan; rank 0's part also
 *                                          carries the id of the temporary directory it created
 *   2. gather item offsets, lengths, CRC-32Cs + status  -> rank 0 writes .metadata and commits
 *   3. agree on rank 0's commit status
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "commit.h"
#include "crc32c.h"
#include "fileio.h"
#include "plan.h"
#include "torch_item.h"
#include "zip.h"

#define ITEM_ALIGN 64   /* torch.save's record alignment; keeps payloads mmap-friendly */
#define ITEM_REC 24     /* per item in collective 2: offset, length, CRC-32C (le64 each) */
#define ID_REC 16       /* ahead of every rank's plan in collective 1: rank 0's commit id */

/* Writes one torch.save archive (pkl + optional payload) at the writer's position; *item_crc receives the
 * CRC-32C of all its bytes. */
static int write_archive(fwriter *w, const sck_buf *pkl, const void *payload, uint64_t plen, uint64_t *off, uint64_t *len,
                         uint64_t *item_crc) {
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
    uint32_t c = 0;
    for (size_t s = 0; s < zp.nseg && !rc; s++) {
        const zip_segment *sg = &zp.seg[s];
        const void *src = sg->entry < 0 ? (const void *)(zp.hdr.data + sg->buf_off) : ents[sg->entry].data;
        c = sck_crc32c(c, src, sg->len);
        rc = fw_write(w, src, sg->len);
    }
    *item_crc = c;
    zip_plan_free(&zp);
    return rc;
}

static int write_item(fwriter *w, const save_plan *p, const plan_item *it, const sck_state *st, uint64_t *rec) {
    uint64_t *off = &rec[0], *len = &rec[1], *crc = &rec[2];
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
        if (!rc) rc = write_archive(w, &pkl, pc->data, nbytes, off, len, crc);
        else rc = sck_err(rc, "'%s': out of memory", e->key);
    } else if (se->kind == ENT_BLOB) {
        /* Blobs are stored as torch.save(bytes) so torch's DCP loader (torch.load per item) reads them too. */
        sck_value *b = sck_value_bytes(se->blob, se->blob_n);
        rc = b ? ti_encode_value_pkl(&pkl, b) : sck_err(SCK_ERR_NOMEM, "'%s': out of memory", e->key);
        sck_value_free(b);
        if (!rc) rc = write_archive(w, &pkl, NULL, 0, off, len, crc);
    } else {
        rc = ti_encode_value_pkl(&pkl, se->value);
        if (!rc) rc = write_archive(w, &pkl, NULL, 0, off, len, crc);
    }
    sck_buf_free(&pkl);
    return rc;
}

/* Writes this rank's data file into directory `dir`; fills out[3*i..3*i+2] with item i's offset,
 * length and CRC-32C. */
static int write_rank_file(const char *dir, int rank, const save_plan *p, const sck_state *st, int do_fsync, uint64_t *out) {
    char path[4096];
    int k = snprintf(path, sizeof path, "%s/__%d_0.distcp", dir, rank);
    if (k < 0 || (size_t)k >= sizeof path) return sck_err(SCK_ERR_INVALID_ARG, "%s: path too long", dir);
    fwriter w;
    int rc = fw_open(&w, path);
    if (rc) return rc;
    for (size_t i = 0; i < p->nitems[rank] && !rc; i++) rc = write_item(&w, p, &p->items[rank][i], st, &out[3 * i]);
    if (rc) {
        fw_abort(&w);
        return rc;
    }
    return fw_close(&w, do_fsync);
}

/* Fills in every chunk's offset, length and checksum from the gathered per-rank records. */
static int apply_offsets(save_plan *p, const uint8_t *all, const size_t *counts) {
    const uint8_t *q = all;
    for (int r = 0; r < p->nranks; r++) {
        if (counts[r] != p->nitems[r] * ITEM_REC)
            return sck_err(SCK_ERR_FORMAT, "rank %d reported %zu bytes of item records, expected %zu", r, counts[r],
                           p->nitems[r] * ITEM_REC);
        for (size_t i = 0; i < p->nitems[r]; i++) {
            const plan_item *it = &p->items[r][i];
            ck_chunk *c = &p->m.e[it->entry].chunks[it->chunk];
            uint64_t crc;
            memcpy(&c->offset, q + ITEM_REC * i, 8);
            memcpy(&c->length, q + ITEM_REC * i + 8, 8);
            memcpy(&crc, q + ITEM_REC * i + 16, 8);
            c->crc32c = (uint32_t)crc;
            c->has_crc = 1;
        }
        q += counts[r];
    }
    return SCK_OK;
}

/* Takes rank 0's commit id out of the gathered plans and closes the gaps the id records leave, so
 * plan_build sees plain concatenated plans. */
static int strip_ids(uint8_t *all, size_t *counts, int nranks, char *id) {
    size_t w = 0, r = 0;
    for (int k = 0; k < nranks; k++) {
        if (counts[k] < ID_REC) return sck_err(SCK_ERR_FORMAT, "rank %d sent a plan without its header", k);
        if (k == 0) {
            memcpy(id, all, COMMIT_ID_LEN);
            id[COMMIT_ID_LEN] = 0;
        }
        memmove(all + w, all + r + ID_REC, counts[k] - ID_REC);
        w += counts[k] - ID_REC;
        r += counts[k];
        counts[k] -= ID_REC;
    }
    return SCK_OK;
}

/* A rank that cannot even start still takes part in the three collectives of save_collective, so its
 * peers learn the error instead of waiting forever.  Only the first carries the error: the others
 * contribute OK, which leaves the agreed message intact. */
static int fail_collectively(sck_comm *comm, int err) {
    int rc = comm_agree(comm, err);
    comm_agree(comm, SCK_OK);
    comm_agree(comm, SCK_OK);
    return rc;
}

static int save_collective(sck_comm *comm, const char *dir, const sck_state *st, int do_fsync) {
    int rank = comm->rank;
    int local = SCK_OK, tmp_made = 0;
    commit cm;
    memset(&cm, 0, sizeof cm);
    /* Rank 0 settles the directory (recovery, leftovers, the temporary directory) before anyone writes. */
    if (rank == 0) {
        local = commit_init(&cm, dir, NULL);
        if (!local) local = commit_prepare(&cm);
        tmp_made = !local;
    }
    sck_buf mine;
    sck_buf_init(&mine);
    uint8_t idrec[ID_REC] = {0};
    if (rank == 0 && cm.dir) memcpy(idrec, cm.id, COMMIT_ID_LEN);
    if (!local && sck_buf_append(&mine, idrec, sizeof idrec)) local = sck_err(SCK_ERR_NOMEM, "rank %d: out of memory", rank);
    if (!local) local = plan_encode_local(st, &mine);
    void *all = NULL;
    size_t counts_stack[1];
    size_t *counts = comm->size == 1 ? counts_stack : calloc((size_t)comm->size, sizeof *counts);
    if (!counts) {
        /* Take part in all three collectives regardless, so peers never hang. */
        sck_buf_free(&mine);
        int rc = fail_collectively(comm, sck_err(SCK_ERR_NOMEM, "rank %d: out of memory", rank));
        if (tmp_made) commit_abort(&cm);
        commit_free(&cm);
        return rc;
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
    local = SCK_OK;
    if (!agreed) {
        char id[COMMIT_ID_LEN + 1];
        local = strip_ids(all, counts, comm->size, id);
        if (!local && rank != 0) local = commit_init(&cm, dir, id);
        if (!local) local = plan_build(all, counts, comm->size, &plan);
    }
    free(all);
    all = NULL;

    /* Collective 2: write, then share where each item landed and its checksum. */
    uint64_t *recs = NULL;
    if (!agreed && !local) {
        recs = calloc(plan.nitems[rank] * 3 + 1, sizeof *recs);
        local = recs ? write_rank_file(cm.tmp, rank, &plan, st, do_fsync, recs) : sck_err(SCK_ERR_NOMEM, "out of memory");
    }
    rc = comm_agree_gather(comm, local, recs, recs ? plan.nitems[rank] * ITEM_REC : 0, &all, counts);
    free(recs);
    if (agreed) rc = agreed;

    /* Collective 3: rank 0 writes .metadata last and swaps the directory into place. */
    local = SCK_OK;
    if (!rc && rank == 0) {
        local = apply_offsets(&plan, all, counts);
        sck_buf meta;
        sck_buf_init(&meta);
        if (!local) local = dcp_meta_encode(&plan.m, &meta);
        if (!local) local = write_file(cm.tmp, ".metadata", meta.data, meta.len, do_fsync);
        if (!local) local = commit_publish(&cm, do_fsync);
        sck_buf_free(&meta);
    }
    free(all);
    if (counts != counts_stack) free(counts);
    plan_free(&plan);
    /* An error agreed in collective 2 is already identical everywhere; still take part in the last
     * collective (contributing OK, which leaves that message intact). */
    int rc3 = comm_agree(comm, local);
    rc = rc ? rc : rc3;
    /* Every rank has stopped writing: a failed save leaves no temporary directory behind. */
    if (rc && tmp_made) commit_abort(&cm);
    commit_free(&cm);
    return rc;
}

int sck_save(sck_comm *comm, const char *dir, const sck_state *st, const sck_save_opts *opts) {
    sck_err_clear();
    int bad = SCK_OK;
    if (!dir || !*dir || !st) bad = sck_err(SCK_ERR_INVALID_ARG, "sck_save: NULL or empty directory or state");
    else if (opts && opts->flags & ~SCK_SAVE_NO_FSYNC) bad = sck_err(SCK_ERR_INVALID_ARG, "sck_save: unknown flags 0x%x", opts->flags);
    if (bad) return comm ? fail_collectively(comm, bad) : bad;
    int do_fsync = !(opts && (opts->flags & SCK_SAVE_NO_FSYNC));
    if (comm) return save_collective(comm, dir, st, do_fsync);
    sck_comm *single = sck_comm_single();
    if (!single) return sck_err(SCK_ERR_NOMEM, "out of memory");
    int rc = save_collective(single, dir, st, do_fsync);
    sck_comm_free(single);
    return rc;
}
