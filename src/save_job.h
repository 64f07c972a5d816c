/* save_job.h - one save split in three steps, so that sck_save runs them back to back and
 * sck_save_async runs the middle one (the file writing) on a background thread:
 *
 *   save_begin   collective 1 (plan exchange), the global plan, this rank's items encoded and, for an
 *                async save, its tensor data copied into the snapshot          (caller's thread)
 *   save_write   this rank's data file written                                (any thread; no comm)
 *   save_finish  collectives 2 and 3: offsets and checksums gathered, rank 0 writes `.metadata`
 *                and commits                                                   (caller's thread)
 *
 * Every rank runs the same collectives whatever fails locally: a failure in save_begin or save_write
 * is carried into save_finish's first collective, so no rank ever waits for another.
 */
#ifndef SCK_SAVE_JOB_H
#define SCK_SAVE_JOB_H

#include "commit.h"
#include "plan.h"

/* One item of this rank's data file: the archive's data.pkl and, for tensors, the payload. */
typedef struct save_src {
    sck_buf pkl;
    const uint8_t *payload;   /* caller's buffer, or inside the snapshot; NULL for bytes/values */
    uint64_t plen;
} save_src;

/* Memory that tensor data is copied into for an async save; kept by the sck_async handle so the
 * next save reuses it (faulting fresh memory in costs more than the copy itself). */
typedef struct save_snapshot {
    uint8_t *mem;
    size_t cap;
} save_snapshot;

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
    uint64_t *recs;           /* per item: offset, length, CRC-32C */
    /* Async saves build the plan on the background thread: the gathered plans wait here, and the
     * caller's state is replaced by a copy whose tensor data lives in the snapshot. */
    void *all;
    size_t *counts;
    sck_state *copy;
} save_job;

/* Flags and options checked by the caller.  async: keep a copy of the state (its tensor data copied
 * into snap, or referenced in place when snap is NULL) and leave the plan to save_write, so that the
 * caller's thread only pays for the plan exchange and the copy.  Returns the status agreed in
 * collective 1; on error the job holds nothing and every rank stops. */
int save_begin(save_job *j, sck_comm *comm, const char *dir, const sck_state *st, unsigned flags, unsigned staging_mib,
               int async, save_snapshot *snap);
/* Builds the plan if it was left for later, writes this rank's data file (no collectives); records the
 * outcome in j->local / j->local_msg. */
void save_write(save_job *j);
/* Releases what the job holds between save_begin and save_finish (for an abandoned async save). */
void save_abandon(save_job *j);
/* Collectives 2 and 3, commit, clean-up.  Returns the save's status, the same on every rank. */
int save_finish(save_job *j);

/* A rank that cannot start a save still takes part in all three collectives with `err` in the first. */
int save_fail_collectively(sck_comm *comm, int err);

/* save_write.c: items encoded; the file written; a state copied for an async save (tensor data into
 * snap, or left in place when snap is NULL). */
int save_prepare_items(save_job *j, const sck_state *st);
int save_copy_state(const sck_state *st, save_snapshot *snap, sck_state **out);
int save_write_file(save_job *j);
void save_free_items(save_job *j);

#endif
