/* save_job.h - one save split in three steps, so that sck_save runs them back to back and
 * sck_save_async runs the middle one (the file writing) on a background thread:
 *
 *   save_begin   collective 1 (status, rank 0's commit id, "my state has the structure of the plan I
 *                keep", and the local plan of a rank that keeps none); where some ranks keep a plan
 *                but not all the same, collective 1b (every rank's local plan); the global plan,
 *                this rank's items encoded or, for an async save, the state copied into the
 *                snapshot                                                    (caller's thread)
 *   save_write   the plan built (async), this rank's data file written     (any thread; no comm)
 *   save_finish  collectives 2 and 3: offsets and checksums gathered, rank 0 writes `.metadata`
 *                and commits                                                   (caller's thread)
 *
 * Every rank runs the same collectives whatever fails locally: an error in collective 1 or 1b is
 * agreed there and ends the save everywhere; a failure after them is carried into save_finish's
 * first collective, so no rank ever waits for another.
 */
#ifndef SCK_SAVE_JOB_H
#define SCK_SAVE_JOB_H

#include "core/commit.h"
#include "io/copy_par.h"
#include "core/plan.h"
#include "io/wstream.h"

/* One item of this rank's data file: the archive's data.pkl and, for tensors, the payload; or, for a
 * verbatim item, its bytes. */
typedef struct save_src {
    size_t pkl_off, pkl_len;  /* in save_job.pkls (items with equal data.pkl share one copy) */
    uint32_t pkl_crc;         /* its CRC-32 (zip's), computed once per copy */
    const uint8_t *payload;   /* caller's buffer, or inside the snapshot; NULL for bytes/values */
    uint64_t plen;
    int dev;                  /* payload is a device address (streamed through staging: save_device.c) */
    int verbatim;             /* the payload is the whole item (sck_state_add_item_bytes): no archive */
    const char *key;          /* the tensor's key, for the messages of device copies */
} save_src;

/* A few bytes of the data file rewritten once the file is written: the CRC-32 in the zip local header
 * of a device payload, known only after the payload has gone through staging. */
typedef struct save_patch {
    uint64_t off;
    uint32_t n;
    uint8_t b[28];
} save_patch;

/* Memory an async save copies the state into (tensor data, then the entry table, keys and blobs);
 * kept by the sck_async handle so the next save reuses it (faulting fresh memory in costs more than
 * the copy itself). */
typedef struct save_snapshot {
    uint8_t *mem;
    size_t cap;
    const sck_device_ops *ops; /* mem came from ops->host_alloc (pinned, for a state's device pieces), or NULL: mmap */
    void *ctx;
} save_snapshot;

/* Frees the snapshot's memory (save_write.c). */
void save_snapshot_free(save_snapshot *s);

/* Where a state copy goes in the snapshot (save_copy_measure), and whether the state has the
 * structure of the copy before. */
typedef struct copy_layout {
    size_t entries, pieces, keys, blobs, total;
    int same;
} copy_layout;

/* What an sck_async handle keeps from one save to the next.  A training loop saves the same
 * structure every time: when every rank's state matches its copy, the plan built last time is used
 * again, and neither the plans' exchange nor their checks are repeated. */
typedef struct save_keep {
    save_snapshot snap;
    ws_pool stage;            /* the data file's staging buffers, faulted in once */
    sck_state *copy;          /* the last save's state (flat, in snap); NULL after a failed copy */
    uint64_t copy_stamp;      /* the stamp of the state copy was taken of (0: none); while the state
                               * still has it, copy's structure, copy_layout and copy_ops hold: the
                               * next save copies only the bytes (save_copy_state) */
    copy_layout copy_layout;
    int copy_data;
    copy_op *copy_ops;        /* the tensor bytes' copies into snap (copy_data only) */
    size_t copy_nops;
    copy_op *dev_ops;         /* the device pieces' copies into snap, through the state's device ops */
    const char **dev_keys;    /* their keys (inside snap) */
    size_t dev_nops;
    save_plan plan;           /* built from the exchange of copy's structure ... */
    int plan_ok;
    int rank;                 /* ... for this rank ... */
    char exchange[16];        /* ... in the save whose commit id this is (the same on every rank) */
    int plan_fabric;          /* ... with or without SCK_SAVE_FABRIC */
} save_keep;

#define SAVE_REC 4 /* uint64s per item record (save_job.recs) */

typedef struct save_job {
    sck_comm *comm;
    int rank;
    int do_fsync, direct;
    uint64_t stage_bytes;     /* per staging buffer of the writer */
    commit cm;
    int tmp_made;             /* rank 0 created the temporary directory */
    save_plan plan;
    int agreed;               /* error agreed in collective 1 (identical on every rank) */
    int local;                /* this rank's error since then (carried into collective 2) */
    char local_msg[1024];     /* its message, kept across threads */
    save_src *src;            /* plan.nitems[rank] items */
    sck_buf pkls;             /* their data.pkl, back to back */
    uint64_t *recs;           /* SAVE_REC per item: offset, length, CRC-32C, payload offset in the item (0: none) */
    /* Async saves build the plan on the background thread: the gathered plans wait here (NULL when
     * the kept plan is used again), and the caller's state is replaced by keep->copy. */
    void *all;
    size_t *counts;
    size_t skip;              /* bytes before each rank's plan in `all` (its collective 1 record) */
    save_keep *keep;          /* async saves only */
    char exchange[16];        /* the commit id of the save whose exchange the plan comes from */
    dcp_meta_early meta;      /* rank 0: .metadata encoded while its file was being written */
    int meta_early;           /* meta holds it (else .metadata is encoded whole at the end) */
    int fabric;               /* SCK_SAVE_FABRIC: rank 0 writes meta.pt, the plan leaves its entries out */
    sck_buf meta_pt;          /* rank 0, fabric: meta.pt's bytes, encoded from the state in save_begin */
    const sck_device_ops *dev_ops; /* the state's, for its device pieces (save_src.dev) */
    void *dev_ctx;
    ws_pool *dev_stage;       /* the state's pinned staging buffers */
    save_patch *patches;      /* the data file's bytes to rewrite once written (device payloads' CRCs) */
    size_t npatches, patch_cap;
} save_job;

/* Flags and options checked by the caller.  keep (async saves): copy the state into keep (tensor
 * data too unless SCK_SAVE_NO_COPY) and leave the plan to save_write, so that the caller's thread
 * only pays for the exchange and the copy.  Returns the status agreed in collective 1 or 1b; on error
 * the job holds nothing and every rank stops. */
int save_begin(save_job *j, sck_comm *comm, const char *dir, const sck_state *st, unsigned flags, unsigned staging_mib,
               save_keep *keep);
/* Builds the plan if it was left for later, writes this rank's data file (no collectives); records the
 * outcome in j->local / j->local_msg. */
void save_write(save_job *j);
/* Releases what the job holds between save_begin and save_finish (for an abandoned async save). */
void save_abandon(save_job *j);
/* Collectives 2 and 3, commit, clean-up.  Returns the save's status, the same on every rank. */
int save_finish(save_job *j);

/* A rank that cannot start a save still takes part in all three collectives with `err` in the first. */
int save_fail_collectively(sck_comm *comm, int err);

/* save_write.c: items encoded; the file written; a state copied for an async save: measured (and
 * compared with old, the copy before; NULL for none), then copied into snap (tensor data too when
 * copy_data, split over `threads` threads: copy_par.h), replacing *io (the copy before, freed). */
int save_prepare_items(save_job *j, const sck_state *st);
void save_copy_measure(const sck_state *st, const sck_state *old, int copy_data, copy_layout *L);
/* Copies st into keep->snap (keep->copy, made anew; keep->copy_ops) laid out as L, or, when
 * `unchanged` (st still has keep->copy_stamp), only its tensor bytes into the copy there is.  Sets
 * keep->copy_stamp.  Errors: SCK_ERR_NOMEM. */
int save_copy_state(const sck_state *st, const copy_layout *L, int copy_data, int threads, int unchanged, save_keep *keep);
int save_write_file(save_job *j);
void save_free_items(save_job *j);

/* save_device.c: a device payload of n bytes at `dev` appended to w through its staging buffers, block
 * by block (copy to host, then checksums, then the block goes to the writer), with its zip CRC-32 and
 * CRC-32C.  Errors: the ops' (naming key and byte offset), the stream's. */
int save_dev_payload(const save_job *j, wstream *w, const char *path, const char *key, const uint8_t *dev, uint64_t n,
                     uint32_t *crc, uint32_t *crc_c);
/* Records that the n (<= 28) bytes at p go to file offset off once the file is written. */
int save_add_patch(save_job *j, uint64_t off, const uint8_t *p, size_t n);
/* Rewrites the patched bytes of the closed file at `path` (and fsyncs it where the save does). */
int save_apply_patches(save_job *j, const char *path);
/* Copies the device pieces of an async save's state into the snapshot (keep->dev_ops), waiting for
 * every copy.  Errors: the ops', naming the tensor. */
int save_dev_snapshot(const sck_state *st, const save_keep *keep);

#endif
