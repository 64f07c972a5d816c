/* copy_par.c - many memcpys split over a few threads (see copy_par.h). */
#include "io/copy_par.h"

#include <pthread.h>
#include <sched.h>
#include <string.h>

/* Bytes [skip, skip + bytes) of the concatenation of op[0..]. */
typedef struct copy_part {
    const copy_op *op;
    size_t skip;
    uint64_t bytes;
} copy_part;

static void run_part(const copy_part *p) {
    uint64_t left = p->bytes;
    size_t skip = p->skip;
    for (const copy_op *o = p->op; left; o++, skip = 0) {
        size_t k = o->n - skip;
        if (k > left) k = (size_t)left;
        if (k) memcpy(o->dst + skip, o->src + skip, k);
        left -= k;
    }
}

static void *part_main(void *arg) {
    run_part(arg);
    return NULL;
}

void copy_parallel(const copy_op *op, size_t n, int threads) {
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) total += op[i].n;
    if (threads > COPY_THREADS_MAX) threads = COPY_THREADS_MAX;
    if (threads < 2 || total < COPY_SPLIT_MIN) {
        for (size_t i = 0; i < n; i++)
            if (op[i].n) memcpy(op[i].dst, op[i].src, op[i].n);
        return;
    }
    copy_part part[COPY_THREADS_MAX];
    size_t k = 0, skip = 0;
    for (int t = 0; t < threads; t++) { /* equal shares, cutting copies where a share ends */
        uint64_t want = total * (uint64_t)(t + 1) / (uint64_t)threads - total * (uint64_t)t / (uint64_t)threads;
        part[t] = (copy_part){op + k, skip, want};
        while (want && k < n) {
            size_t avail = op[k].n - skip;
            if (avail > want) {
                skip += (size_t)want;
                want = 0;
            } else {
                want -= avail;
                k++;
                skip = 0;
            }
        }
    }
    pthread_t th[COPY_THREADS_MAX];
    int started[COPY_THREADS_MAX] = {0};
    for (int t = 1; t < threads; t++) started[t] = pthread_create(&th[t], NULL, part_main, &part[t]) == 0;
    run_part(&part[0]);
    for (int t = 1; t < threads; t++) {
        if (started[t]) pthread_join(th[t], NULL);
        else run_part(&part[t]);
    }
}

int copy_threads(int ranks_here) {
    cpu_set_t set;
    int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    int t = cpus / (ranks_here > 0 ? ranks_here : 1);
    return t < 1 ? 1 : t > COPY_THREADS_MAX ? COPY_THREADS_MAX : t;
}
