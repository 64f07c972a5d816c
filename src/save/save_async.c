/* save_async.c - sck_save_async / sck_wait: save_begin (plan exchange, snapshot) in the caller's thread,
 * save_write on a background thread, save_finish (the remaining collectives and the commit) in
 * sck_wait.  The communicator is only ever used by the caller's thread (see save_job.h). */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "comm/comm.h"
#include "save/save_job.h"

struct sck_async {
    save_job job;
    save_keep keep;           /* snapshot memory, the last copy and its plan, for the next save */
    sck_comm *single;       /* our own one-rank communicator when the caller passed NULL */
    pthread_t th;
    int pending;            /* save_begin succeeded, sck_wait not called yet */
    int thread_running;
    int full_priority;      /* SCK_SAVE_FULL_PRIORITY: the writer keeps the caller's nice value */
};

sck_async *sck_async_new(void) { return calloc(1, sizeof(sck_async)); }

/* The background writer yields the CPU to the caller's threads: the training loop, and on a crowded
 * machine the thread ranks still copying their snapshot or waking from the plan exchange (8 ranks on
 * 2 CPUs: with the writers at the callers' priority the last rank returned up to 13 ms after the
 * exchange, behind the early ranks' writers).  Where a CPU is idle it runs at full speed anyway.  The
 * file writer thread it starts inherits all of it.  Linux only: there PRIO_PROCESS with 0 and
 * sched_setscheduler with 0 mean the calling thread, elsewhere the whole process.
 *
 * Three parts, because a new thread starts at its creator's priority and often runs at once, in
 * place of its creator or of a rank still copying: lower nice (its share of a busy CPU), SCHED_BATCH
 * (its wake-ups, from the disk, never preempt the caller's threads; same share), then the CPU handed
 * back.  8 thread ranks on 2 CPUs, 256 MiB: the stall over a memcpy, 6 rounds of 6 samples, 1.16 to
 * 1.43 (median 1.24) with nice alone, 0.91 to 1.16 (median 1.09) with all three. */
#define ASYNC_WRITER_NICE 10

static void lower_priority(void) {
#ifdef __linux__
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, 0);
    if (errno) return;
    (void)setpriority(PRIO_PROCESS, 0, nice + ASYNC_WRITER_NICE > 19 ? 19 : nice + ASYNC_WRITER_NICE); /* advice only */
#ifdef SCHED_BATCH
    struct sched_param sp = {0};
    (void)sched_setscheduler(0, SCHED_BATCH, &sp); /* advice only */
#endif
    (void)sched_yield();
#endif
}

static void *writer_thread(void *arg) {
    sck_async *a = arg;
    if (!a->full_priority) lower_priority();
    save_write(&a->job);
    return NULL;
}

/* Joins the background writer, if any. */
static void join_writer(sck_async *a) {
    if (a->thread_running) pthread_join(a->th, NULL);
    a->thread_running = 0;
}

void sck_async_free(sck_async *a) {
    if (!a) return;
    if (a->pending) {
        join_writer(a);
        save_abandon(&a->job); /* the temporary directory stays; the next save into dir removes it */
    }
    sck_comm_free(a->single);
    sck_state_free(a->keep.copy); /* before the snapshot it lives in */
    free(a->keep.copy_ops);
    free(a->keep.dev_ops);
    free(a->keep.dev_keys);
    plan_free(&a->keep.plan);
    save_snapshot_free(&a->keep.snap);
    ws_pool_free(&a->keep.stage);
    free(a);
}

#define ASYNC_FLAGS (SCK_SAVE_NO_FSYNC | SCK_SAVE_DIRECT_IO | SCK_SAVE_NO_COPY | SCK_SAVE_FULL_PRIORITY | SCK_SAVE_FABRIC)

int sck_save_async(sck_async *a, sck_comm *comm, const char *dir, const sck_state *st, const sck_save_opts *opts) {
    sck_err_clear();
    int bad = SCK_OK;
    unsigned flags = opts ? opts->flags : 0;
    if (!a || !dir || !*dir || !st) bad = sck_err(SCK_ERR_INVALID_ARG, "sck_save_async: NULL handle, directory or state, or empty directory");
    else if (flags & ~ASYNC_FLAGS) bad = sck_err(SCK_ERR_INVALID_ARG, "sck_save_async: unknown flags 0x%x", flags);
    else if (opts && sck_check_reserved("sck_save_async: sck_save_opts", opts->reserved, sizeof opts->reserved / sizeof opts->reserved[0]))
        bad = SCK_ERR_INVALID_ARG;
    else if (a->pending) bad = sck_err(SCK_ERR_INVALID_ARG, "sck_save_async: a save is already pending on this handle; call sck_wait first");
    if (bad) return comm ? save_fail_collectively(comm, bad) : bad;
    if (!comm) {
        if (!a->single && !(a->single = sck_comm_single())) return sck_err(SCK_ERR_NOMEM, "out of memory");
        comm = a->single;
    }
    int rc = save_begin(&a->job, comm, dir, st, flags, opts ? opts->staging_mib : 0, &a->keep);
    if (rc) return rc;
    a->pending = 1;
    a->full_priority = !!(flags & SCK_SAVE_FULL_PRIORITY);
    /* A thread that cannot start: write in the caller's thread instead (still correct, just not async). */
    if (!a->job.local && pthread_create(&a->th, NULL, writer_thread, a) == 0) a->thread_running = 1;
    else save_write(&a->job);
    return SCK_OK;
}

int sck_wait(sck_async *a) {
    sck_err_clear();
    if (!a || !a->pending) return SCK_OK;
    join_writer(a);
    a->pending = 0;
    return save_finish(&a->job);
}
