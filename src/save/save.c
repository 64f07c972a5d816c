/* save.c - sck_save: gather plans, write one data file per rank into a temporary directory, and let
 * rank 0 commit `.metadata` and swap the directory into place (src/commit.c).  The steps are shared
 * with sck_save_async (src/save_async.c); see src/save_job.h.
 *
 * Collectives (always in this order on every rank, whatever fails locally, so nobody hangs):
 *   1. gather status, rank 0's commit id (the temporary directory it created) and whether each rank
 *      keeps a plan for its state's structure (an sck_async handle used again)
 *   1b. unless every rank does: gather the local plans -> every rank checks them identically
 *                                          (rank 0 also builds the model).
 *      An error agreed in 1 or 1b ends the save on every rank.
 *   2. gather item offsets, lengths, CRC-32Cs + status  -> rank 0 writes .metadata and commits
 *   3. agree on rank 0's commit status
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "io/copy_par.h"
#include "io/fileio.h"
#include "format/meta_pt.h"
#include "format/meta_side.h"
#include "save/save_job.h"

/* Collective 2 carries, per item, its offset (as the distance from the end of the item before,
 * zigzag varint: items are written back to back, so usually 0), its length (varint), its CRC-32C
 * (le32) and where its payload starts in it (varint, 0: none): a few bytes instead of 32 per item,
 * sent to every rank. */
#define ITEM_REC_MAX (10 + 10 + 4 + 10)
#define ID_REC 16       /* in collective 1: rank 0's commit id, then 1 when the rank keeps a plan for its */
#define REC1 (2 * ID_REC + 1) /* state's structure and rank, then the id of the exchange that plan came from */

/* This rank's item records for collective 2 (recs: offset, length, CRC-32C, payload per item). */
static size_t encode_recs(const uint64_t *recs, size_t n, uint8_t *out) {
    uint8_t *q = out;
    uint64_t next = 0;
    for (size_t i = 0; i < n; i++, recs += SAVE_REC) {
        uint64_t d = recs[0] - next; /* two's complement; zigzag keeps a small backward step small */
        q = sck_put_varint(q, (d << 1) ^ (uint64_t)((int64_t)d >> 63));
        q = sck_put_varint(q, recs[1]);
        for (int k = 0; k < 4; k++) *q++ = (uint8_t)(recs[2] >> (8 * k));
        q = sck_put_varint(q, recs[3]);
        next = recs[0] + recs[1];
    }
    return (size_t)(q - out);
}

/* Fills in every chunk's offset, length and checksum from the gathered per-rank records. */
static int apply_offsets(save_plan *p, const uint8_t *all, const size_t *counts) {
    const uint8_t *q = all;
    for (int r = 0; r < p->nranks; r++) {
        const uint8_t *end = q + counts[r];
        uint64_t next = 0;
        for (size_t i = 0; i < p->nitems[r]; i++) {
            const plan_item *it = &p->items[r][i];
            ck_chunk *c = &p->m.e[it->entry].chunks[it->chunk];
            uint64_t z, len, payload;
            if (!sck_get_varint(&q, end, &z) || !sck_get_varint(&q, end, &len) || end - q < 4)
                return sck_err(SCK_ERR_FORMAT, "rank %d's record of item %zu is truncated", r, i);
            c->offset = next + ((z >> 1) ^ (~(z & 1) + 1));
            c->length = len;
            c->crc32c = sck_le32(q);
            c->has_crc = 1;
            q += 4;
            if (!sck_get_varint(&q, end, &payload) || payload >= len)
                return sck_err(SCK_ERR_FORMAT, "rank %d's record of item %zu is truncated or its payload lies outside it", r, i);
            c->payload = payload;
            next = c->offset + c->length;
        }
        if (q != end) return sck_err(SCK_ERR_FORMAT, "rank %d reported %zu bytes of item records, more than its %zu items", r, counts[r], p->nitems[r]);
    }
    return SCK_OK;
}

/* Collective 1's records: REC1 bytes from every rank, then its local plan unless it keeps one for its
 * state (its flag byte 1).  Gives rank 0's commit id; *reuse: every rank keeps a plan from one and the
 * same exchange (the same ranks, the same structures: the same plan again); *plans: every rank sent
 * its plan (none keeps one), so no second exchange is needed. */
static int read_rec1(const uint8_t *all, const size_t *counts, int nranks, char *id, int *reuse, int *plans) {
    *reuse = 1;
    *plans = 1;
    const uint8_t *rec = all;
    for (int k = 0; k < nranks; rec += counts[k], k++) {
        int keeps = counts[k] >= REC1 && rec[ID_REC] == 1;
        if (counts[k] < REC1 || (keeps && counts[k] != REC1))
            return sck_err(SCK_ERR_FORMAT, "rank %d sent a %zu-byte save header, expected %d%s", k, counts[k], REC1, keeps ? "" : " or more");
        if (k == 0) {
            memcpy(id, rec, COMMIT_ID_LEN);
            id[COMMIT_ID_LEN] = 0;
        }
        if (!keeps || memcmp(rec + ID_REC + 1, all + ID_REC + 1, ID_REC)) *reuse = 0;
        if (keeps) *plans = 0;
    }
    return SCK_OK;
}

/* Rank 0 writes `.metadata`, so it builds the whole model and every rank's items; the others only
 * check the plans (the same checks, so the same errors) and keep their own items. */
static int plan_rank(const save_job *j) { return j->rank == 0 ? -1 : j->rank; }

/* A rank that cannot start takes part in collective 1 with its error: every peer then gets that error
 * from collective 1 and stops there too. */
int save_fail_collectively(sck_comm *comm, int err) { return comm_agree(comm, err); }

/* meta.pt: a dict of st's present entries that go there (plan_in_meta_pt; a blob as Python bytes), in
 * state order. */
static int encode_meta_pt(const sck_state *st, sck_buf *out) {
    sck_value *d = sck_value_dict();
    int rc = d ? SCK_OK : SCK_ERR_NOMEM;
    for (size_t i = 0; i < st->n && !rc; i++) {
        const st_entry *e = &st->e[i];
        if (!e->present || !plan_in_meta_pt(e)) continue;
        sck_value *v = e->kind == ENT_BLOB ? sck_value_bytes(e->blob, e->blob_n) : sck_value_clone(e->value);
        rc = v ? sck_value_dict_set(d, e->key, v) : SCK_ERR_NOMEM;
    }
    if (!rc) rc = meta_pt_encode(d, out);
    sck_value_free(d);
    return rc ? sck_err(SCK_ERR_NOMEM, "%s: out of memory encoding it", META_PT_NAME) : SCK_OK;
}

int save_begin(save_job *j, sck_comm *comm, const char *dir, const sck_state *st, unsigned flags, unsigned staging_mib,
               save_keep *keep) {
    memset(j, 0, sizeof *j);
    j->comm = comm;
    j->rank = comm->rank;
    j->do_fsync = !(flags & SCK_SAVE_NO_FSYNC);
    j->direct = !!(flags & SCK_SAVE_DIRECT_IO);
    j->stage_bytes = (uint64_t)(staging_mib ? staging_mib : 64) << 20;
    j->keep = keep;
    j->fabric = !!(flags & SCK_SAVE_FABRIC);
    sck_buf_init(&j->meta_pt);
    int rank = comm->rank, local = SCK_OK, copy_data = !(flags & SCK_SAVE_NO_COPY);
    /* Rank 0 settles the directory (recovery, leftovers, the temporary directory) before anyone writes. */
    if (rank == 0) {
        local = commit_init(&j->cm, dir, NULL);
        if (!local) local = commit_prepare(&j->cm);
        j->tmp_made = !local;
        /* meta.pt is the state's values as they are now: an async save's snapshot of them */
        if (!local && j->fabric) local = encode_meta_pt(st, &j->meta_pt);
    }
    copy_layout L;
    memset(&L, 0, sizeof L);
    /* Nothing added to or loaded into the state since its copy: the same structure and layout. */
    int unchanged = keep && keep->copy && keep->copy_stamp == st->stamp && keep->copy_data == copy_data;
    if (unchanged) {
        L = keep->copy_layout;
        L.same = 1;
    } else if (keep) {
        save_copy_measure(st, keep->copy, copy_data, &L);
    }
    uint8_t rec[REC1] = {0};
    if (rank == 0 && j->cm.dir) memcpy(rec, j->cm.id, COMMIT_ID_LEN);
    if (keep && keep->plan_ok && L.same && keep->rank == rank && keep->plan.nranks == comm->size && keep->plan_fabric == j->fabric) {
        rec[ID_REC] = 1;
        memcpy(rec + ID_REC + 1, keep->exchange, ID_REC);
    }
    /* An async save snapshots the state before the first collective: thread ranks reach it tens of
     * ms apart on a busy machine, and the early ones copy meanwhile.  Its copy replaces the one the
     * kept plan was made from, so a changed structure makes that plan stale now, whatever comes of
     * this save. */
    if (keep && !local) {
        if (!L.same) keep->plan_ok = 0;
        local = save_copy_state(st, &L, copy_data, copy_threads(comm_one_node(comm) ? comm->size : 1), unchanged, keep);
    }
    size_t counts_stack[1];
    size_t *counts = comm->size == 1 ? counts_stack : calloc((size_t)comm->size, sizeof *counts);
    if (!counts && !local) local = sck_err(SCK_ERR_NOMEM, "rank %d: out of memory", rank);
    /* A rank that keeps no plan for its state sends its local plan with its record: where none keeps
     * one (every sck_save, an async save's first), that is the whole exchange. */
    sck_buf mine;
    sck_buf_init(&mine);
    if (!local && sck_buf_append(&mine, rec, sizeof rec)) local = sck_err(SCK_ERR_NOMEM, "rank %d: out of memory", rank);
    if (!local && rec[ID_REC] != 1) local = plan_encode_local(st, j->fabric, &mine);
    void *all = NULL;
    int rc = counts ? comm_agree_gather(comm, local, mine.data, mine.len, &all, counts) : save_fail_collectively(comm, local);
    sck_buf_free(&mine);
    /* From here on every rank sees the same bytes, so takes the same branches. */
    char id[COMMIT_ID_LEN + 1];
    int reuse = 0, plans = 0;
    size_t skip = REC1; /* the plans in `all` follow each rank's record */
    if (!rc) rc = read_rec1(all, counts, comm->size, id, &reuse, &plans);
    if (rc || reuse || !plans) {
        comm_gather_free(comm, all);
        all = NULL;
    }
    if (!rc && !reuse && !plans) { /* some ranks keep a plan, not all the same: collective 1b */
        sck_buf_init(&mine);
        int enc = plan_encode_local(st, j->fabric, &mine);
        rc = comm_agree_gather(comm, enc, mine.data, mine.len, &all, counts);
        sck_buf_free(&mine);
        skip = 0;
    }
    if (!rc && keep) { /* the kept plan is used again, or it is stale */
        if (reuse) {
            j->plan = keep->plan;
            memset(&keep->plan, 0, sizeof keep->plan);
        }
        memcpy(j->exchange, reuse ? keep->exchange : (const char *)id, ID_REC);
        plan_free(&keep->plan);
        keep->plan_ok = 0;
    }
    /* The plan is checked identically everywhere; a local failure from here on (out of memory) is
     * carried into collective 2 so that a rank failing alone cannot strand the others. */
    if (!rc) {
        if (rank != 0) local = commit_init(&j->cm, dir, id);
        if (!local && keep) { /* the plan is built by save_write, on the background thread */
            if (all && counts == counts_stack) { /* the one-rank counts live on our stack: move them */
                if (!(counts = malloc(sizeof *counts))) local = sck_err(SCK_ERR_NOMEM, "out of memory");
                else counts[0] = counts_stack[0];
            }
            if (!local && all) {
                j->all = all, j->counts = counts, j->skip = skip;
                all = NULL, counts = counts_stack;
            }
        } else if (!local) {
            local = plan_build_ex(all, counts, skip, comm->size, plan_rank(j), &j->plan);
            if (!local) local = save_prepare_items(j, st);
        }
        if (local) {
            j->local = local;
            snprintf(j->local_msg, sizeof j->local_msg, "%s", sck_last_error());
        }
    }
    comm_gather_free(comm, all);
    if (counts != counts_stack) free(counts);
    if (rc) {
        j->agreed = rc;
        if (j->tmp_made) commit_abort(&j->cm); /* nobody writes: every rank stops here */
        sck_buf_free(&j->meta_pt);
        save_free_items(j);
        plan_free(&j->plan);
        commit_free(&j->cm);
    }
    return rc;
}

void save_write(save_job *j) {
    if (!j->local && j->all) j->local = plan_build_ex(j->all, j->counts, j->skip, j->comm->size, plan_rank(j), &j->plan);
    if (!j->local && j->keep) j->local = save_prepare_items(j, j->keep->copy);
    comm_gather_free(j->comm, j->all);
    free(j->counts);
    j->all = NULL;
    j->counts = NULL;
    if (!j->local) j->local = save_write_file(j);
    if (j->local) snprintf(j->local_msg, sizeof j->local_msg, "%s", sck_last_error());
}

void save_abandon(save_job *j) {
    dcp_meta_early_free(&j->meta);
    sck_buf_free(&j->meta_pt);
    comm_gather_free(j->comm, j->all);
    free(j->counts);
    j->all = NULL;
    j->counts = NULL;
    save_free_items(j);
    plan_free(&j->plan);
    commit_free(&j->cm);
}

int save_finish(save_job *j) {
    sck_comm *comm = j->comm;
    int rank = j->rank;
    if (j->local) sck_err_set_raw(j->local_msg);
    /* Collective 2: share where each item landed and its checksum. */
    size_t counts_stack[1];
    size_t *counts = comm->size == 1 ? counts_stack : calloc((size_t)comm->size, sizeof *counts);
    int local = j->local;
    if (!counts && !local) local = sck_err(SCK_ERR_NOMEM, "rank %d: out of memory", rank);
    void *all = NULL;
    size_t n = 0, nitems = !local && j->recs ? j->plan.nitems[rank] : 0;
    uint8_t *recs = nitems ? malloc(nitems * ITEM_REC_MAX) : NULL;
    if (nitems && !recs && !local) local = sck_err(SCK_ERR_NOMEM, "rank %d: out of memory", rank);
    if (recs) n = encode_recs(j->recs, nitems, recs);
    int rc = counts ? comm_agree_gather(comm, local, recs, n, &all, counts) : comm_agree(comm, local);
    free(recs);
    save_free_items(j);

    /* Collective 3: rank 0 writes .metadata last and swaps the directory into place. */
    local = SCK_OK;
    if (!rc && rank == 0) {
        local = apply_offsets(&j->plan, all, counts);
        sck_buf meta;
        sck_buf_init(&meta);
        if (!local) local = j->meta_early ? dcp_meta_encode_late(&j->meta, &j->plan.m, &meta) : dcp_meta_encode(&j->plan.m, &meta);
        /* .metadata, then the model cache, which records that file's identity (src/meta_side.h),
         * encoded while the disk writes .metadata; nothing is visible before commit_publish swaps
         * the directory in. */
        /* meta.pt before .metadata, the commit marker */
        if (!local && j->fabric) local = write_file(j->cm.tmp, META_PT_NAME, j->meta_pt.data, j->meta_pt.len, j->do_fsync);
        fwriter mw;
        if (!local && !(local = write_file_begin(j->cm.tmp, ".metadata", meta.data, meta.len, j->do_fsync, &mw))) {
            local = meta_side_write(j->cm.tmp, &j->plan.m, meta.data, meta.len);
            if (local) fw_abort(&mw);
            else local = fw_close(&mw, j->do_fsync);
        }
        if (!local) local = commit_publish(&j->cm, j->do_fsync);
        sck_buf_free(&meta);
    }
    comm_gather_free(comm, all);
    if (counts != counts_stack) free(counts);
    dcp_meta_early_free(&j->meta);
    sck_buf_free(&j->meta_pt);
    if (j->keep && j->plan.nitems) { /* valid for this structure, whatever became of the save */
        j->keep->plan = j->plan;
        j->keep->plan_ok = 1;
        j->keep->rank = j->rank;
        j->keep->plan_fabric = j->fabric;
        memcpy(j->keep->exchange, j->exchange, sizeof j->exchange);
        memset(&j->plan, 0, sizeof j->plan);
    }
    plan_free(&j->plan);
    /* An error agreed in collective 2 is already identical everywhere; still take part in the last
     * collective (contributing OK, which leaves that message intact). */
    int rc3 = comm_agree(comm, local);
    rc = rc ? rc : rc3;
    /* Every rank has stopped writing: a failed save leaves no temporary directory behind, a
     * successful one no previous checkpoint (each rank removes its own file of it). */
    if (rc && j->tmp_made) commit_abort(&j->cm);
    if (!rc && rank != 0) commit_remove_own(&j->cm, rank);
    if (!rc && rank == 0) commit_remove_prev(&j->cm);
    commit_free(&j->cm);
    return rc;
}

/* Flags sck_save and sck_save_async accept. */
#define SAVE_FLAGS (SCK_SAVE_NO_FSYNC | SCK_SAVE_DIRECT_IO | SCK_SAVE_FABRIC)

int sck_save(sck_comm *comm, const char *dir, const sck_state *st, const sck_save_opts *opts) {
    sck_err_clear();
    int bad = SCK_OK;
    if (!dir || !*dir || !st) bad = sck_err(SCK_ERR_INVALID_ARG, "sck_save: NULL or empty directory or state");
    else if (opts && opts->flags & ~SAVE_FLAGS) bad = sck_err(SCK_ERR_INVALID_ARG, "sck_save: unknown flags 0x%x", opts->flags);
    else if (opts) bad = sck_check_reserved("sck_save: sck_save_opts", opts->reserved, sizeof opts->reserved / sizeof opts->reserved[0]);
    if (bad) return comm ? save_fail_collectively(comm, bad) : bad;
    sck_comm *single = NULL;
    if (!comm && !(comm = single = sck_comm_single())) return sck_err(SCK_ERR_NOMEM, "out of memory");
    save_job j;
    int rc = save_begin(&j, comm, dir, st, opts ? opts->flags : 0, opts ? opts->staging_mib : 0, NULL);
    if (!rc) {
        save_write(&j);
        rc = save_finish(&j);
    }
    sck_comm_free(single);
    return rc;
}
