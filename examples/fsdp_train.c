/*
 * fsdp_train.c - a character-level language model trained ZeRO-3 / FSDP style, checkpointed with shardckpt.
 *
 * Model: the previous CTX characters -> embedding (V x EMB each) -> tanh layer (HID) with dropout -> logits over
 * V characters; cross-entropy on the next character; Adam.  About 30k parameters, real gradients.
 *
 * Sharding: the parameters are concatenated into one flat vector of P floats; rank r of n owns the contiguous
 * range [P*r/n, P*(r+1)/n) of it, and holds only that range of the parameters AND of both Adam moments.  Each step:
 *   all-gather the parameter shards -> full parameters;  forward + backward on this rank's slice of the batch;
 *   reduce-scatter the gradients (each owner sums the ranks' contributions in rank order, so runs are
 *   reproducible);  Adam on the owned range.
 * Transport: MPI when built with FSDP_WITH_MPI and started without --threads (run it under mpirun), otherwise
 * N threads of one process (--threads N) with shared-memory collectives; both give bit-identical results.
 *
 * Checkpoints (every --save-every steps, DIR/step-NNNNNN) hold, as flat shards of each parameter tensor:
 *   model.<param>, optimizer.<param>.exp_avg, optimizer.<param>.exp_avg_sq
 * and the values other.step, other.rng (dropout RNG state), other.data_pos (data cursor), other.config.
 * --resume CKPT continues from one, on any number of ranks: the same count reproduces an uninterrupted run
 * bit for bit; another count regroups the gradient sums, so it matches within float rounding.
 */
#define _POSIX_C_SOURCE 200809L /* pthread barriers under -std=c11 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <shardckpt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifdef FSDP_WITH_MPI
#include <mpi.h>
#include <shardckpt_mpi.h>
#endif

/* ---------------------------------------------------------------- model shape */

enum { V = 96, CTX = 8, EMB = 16, IN = CTX * EMB, HID = 128, NPARAM = 5 };
static const char *const pname[NPARAM] = {"embed.weight", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
static const int pndim[NPARAM] = {2, 2, 1, 2, 1};
static const int64_t pshape[NPARAM][2] = {{V, EMB}, {HID, IN}, {HID, 0}, {V, HID}, {V, 0}};
static int64_t poff[NPARAM + 1]; /* offsets in the flat vector; poff[NPARAM] = P */

static const float LR = 5e-3f, BETA1 = 0.9f, BETA2 = 0.999f, EPS = 1e-8f, DROPOUT = 0.1f;

static int64_t numel(int i) { return pndim[i] == 2 ? pshape[i][0] * pshape[i][1] : pshape[i][0]; }

static void layout(void) {
    for (int i = 0; i < NPARAM; i++) poff[i + 1] = poff[i] + numel(i);
}

/* ---------------------------------------------------------------- options */

typedef struct opts {
    int threads;           /* > 0: this many thread ranks; 0: MPI (or 1 rank without MPI) */
    long steps, save_every, log_every, batch;
    unsigned long long seed;
    const char *data, *ckpt_dir, *resume, *dump;
    uint8_t *text;         /* the training text as character ids */
    size_t ntext;
} opts;

/* ---------------------------------------------------------------- RNG (splitmix64) */

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static float rng_uniform(uint64_t *s) { return (float)(rng_next(s) >> 40) * (1.0f / 16777216.0f); }

/* ---------------------------------------------------------------- collectives */

/* Threads mode: every rank posts a pointer, waits, reads its peers' buffers, waits again. */
typedef struct shm_group {
    pthread_barrier_t bar;
    const void **ptr;
} shm_group;

typedef struct dist {
    int rank, size;
    int64_t *lo;            /* lo[r]..lo[r+1]: rank r's flat range */
    float *scratch;         /* size * (my count) floats for the reduce-scatter */
    shm_group *shm;         /* threads mode */
#ifdef FSDP_WITH_MPI
    MPI_Comm mpi;           /* MPI mode, else MPI_COMM_NULL */
    int *cnt, *dsp, *rcnt, *rdsp;
#endif
} dist;

static int64_t my_count(const dist *d) { return d->lo[d->rank + 1] - d->lo[d->rank]; }

static int is_mpi(const dist *d) {
#ifdef FSDP_WITH_MPI
    return d->mpi != MPI_COMM_NULL;
#else
    (void)d;
    return 0;
#endif
}

static void shm_post_and_wait(dist *d, const void *p) {
    d->shm->ptr[d->rank] = p;
    pthread_barrier_wait(&d->shm->bar);
}

/* full[lo[r]..lo[r+1]) = rank r's shard, for every r. */
static int all_gather(dist *d, const float *shard, float *full) {
#ifdef FSDP_WITH_MPI
    if (is_mpi(d)) {
        for (int r = 0; r < d->size; r++) d->cnt[r] = (int)(d->lo[r + 1] - d->lo[r]), d->dsp[r] = (int)d->lo[r];
        return MPI_Allgatherv(shard, d->cnt[d->rank], MPI_FLOAT, full, d->cnt, d->dsp, MPI_FLOAT, d->mpi) != MPI_SUCCESS;
    }
#endif
    shm_post_and_wait(d, shard);
    for (int r = 0; r < d->size; r++)
        memcpy(full + d->lo[r], d->shm->ptr[r], (size_t)(d->lo[r + 1] - d->lo[r]) * sizeof *full);
    pthread_barrier_wait(&d->shm->bar);
    return 0;
}

/* shard[i] = sum over ranks q, in rank order, of q's full[lo[me] + i]. */
static int reduce_scatter(dist *d, const float *full, float *shard) {
    int64_t n = my_count(d), lo = d->lo[d->rank];
#ifdef FSDP_WITH_MPI
    if (is_mpi(d)) {
        for (int q = 0; q < d->size; q++) {
            d->cnt[q] = (int)(d->lo[q + 1] - d->lo[q]);
            d->dsp[q] = (int)d->lo[q];
            d->rcnt[q] = (int)n;
            d->rdsp[q] = (int)(n * q);
        }
        if (MPI_Alltoallv(full, d->cnt, d->dsp, MPI_FLOAT, d->scratch, d->rcnt, d->rdsp, MPI_FLOAT, d->mpi) != MPI_SUCCESS) return 1;
        for (int64_t i = 0; i < n; i++) {
            float acc = d->scratch[i];
            for (int q = 1; q < d->size; q++) acc += d->scratch[n * q + i];
            shard[i] = acc;
        }
        return 0;
    }
#endif
    shm_post_and_wait(d, full);
    for (int64_t i = 0; i < n; i++) {
        float acc = ((const float *)d->shm->ptr[0])[lo + i];
        for (int q = 1; q < d->size; q++) acc += ((const float *)d->shm->ptr[q])[lo + i];
        shard[i] = acc;
    }
    pthread_barrier_wait(&d->shm->bar);
    return 0;
}

/* Sum of one double per rank, in rank order. */
static int sum_ranks(dist *d, double x, double *out) {
    double stack[64], *v = d->size <= 64 ? stack : malloc((size_t)d->size * sizeof *v);
    int rc = !v;
#ifdef FSDP_WITH_MPI
    if (!rc && is_mpi(d)) rc = MPI_Allgather(&x, 1, MPI_DOUBLE, v, 1, MPI_DOUBLE, d->mpi) != MPI_SUCCESS;
    else
#endif
    if (!rc) {
        shm_post_and_wait(d, &x);
        for (int r = 0; r < d->size; r++) v[r] = *(const double *)d->shm->ptr[r];
        pthread_barrier_wait(&d->shm->bar);
    }
    double s = 0;
    for (int r = 0; !rc && r < d->size; r++) s += v[r];
    *out = s;
    if (v != stack) free(v);
    return rc;
}

/* ---------------------------------------------------------------- training state */

typedef struct trainer {
    dist d;
    const opts *o;
    int64_t n;                   /* owned flat elements */
    float *p, *m, *v, *g;        /* owned shards: params, exp_avg, exp_avg_sq, reduced grads */
    float *full, *gfull;         /* gathered params, this rank's gradient contribution (P each) */
    long step;
    uint64_t rng;
    int64_t data_pos;
} trainer;

static sck_value *config_value(const opts *o) {
    sck_value *c = sck_value_dict();
    const char *k[] = {"vocab", "context", "embed", "hidden", "batch"};
    long val[] = {V, CTX, EMB, HID, o->batch};
    for (int i = 0; i < 5 && c; i++)
        if (sck_value_dict_set(c, k[i], sck_value_int(val[i]))) sck_value_free(c), c = NULL;
    return c;
}

/* The checkpoint's entries for this rank: its piece of every tensor, plus the replicated values
 * (given when saving, requested with NULL when loading). */
static int build_state(trainer *t, sck_state *st, int for_save) {
    int64_t lo = t->d.lo[t->d.rank], hi = t->d.lo[t->d.rank + 1];
    char key[128];
    for (int i = 0; i < NPARAM; i++) {
        int64_t b = lo > poff[i] ? lo : poff[i], e = hi < poff[i + 1] ? hi : poff[i + 1];
        if (b >= e) continue; /* this rank owns none of tensor i */
        float *bufs[3] = {t->p, t->m, t->v};
        const char *fmt[3] = {"model.%s", "optimizer.%s.exp_avg", "optimizer.%s.exp_avg_sq"};
        for (int k = 0; k < 3; k++) {
            snprintf(key, sizeof key, fmt[k], pname[i]);
            int rc = sck_state_add_flat(st, key, SCK_F32, pndim[i], pshape[i], b - poff[i], e - b, bufs[k] + (b - lo));
            if (rc) return rc;
        }
    }
    int rc = sck_state_add_value(st, "other.step", for_save ? sck_value_int(t->step) : NULL);
    if (!rc) rc = sck_state_add_value(st, "other.rng", for_save ? sck_value_int((int64_t)t->rng) : NULL);
    if (!rc) rc = sck_state_add_value(st, "other.data_pos", for_save ? sck_value_int(t->data_pos) : NULL);
    if (!rc) rc = sck_state_add_value(st, "other.config", for_save ? config_value(t->o) : NULL);
    return rc;
}

static int save_ckpt(trainer *t, sck_comm *comm) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/step-%06ld", t->o->ckpt_dir, t->step);
    sck_state *st = sck_state_new();
    int rc = st ? build_state(t, st, 1) : SCK_ERR_NOMEM;
    /* A local failure must not skip the collective save: agree on it first. */
    rc = sck_comm_agree(comm, rc);
    if (!rc) rc = sck_save(comm, dir, st, NULL);
    sck_state_free(st);
    if (!rc && t->d.rank == 0) printf("saved %s\n", dir);
    return rc;
}

static int load_ckpt(trainer *t, sck_comm *comm) {
    sck_state *st = sck_state_new();
    int rc = st ? build_state(t, st, 0) : SCK_ERR_NOMEM;
    rc = sck_comm_agree(comm, rc);
    if (!rc) rc = sck_load(comm, t->o->resume, st, NULL);
    if (!rc) {
        sck_value *want = config_value(t->o);
        if (!want || !sck_value_equal(want, sck_state_value(st, "other.config"))) {
            char *a = want ? sck_value_to_json(want) : NULL, *b = sck_value_to_json(sck_state_value(st, "other.config"));
            fprintf(stderr, "rank %d: %s: model config %s does not match this run's %s\n", t->d.rank, t->o->resume,
                    b ? b : "?", a ? a : "?");
            free(a);
            free(b);
            rc = SCK_ERR_MISMATCH;
        }
        sck_value_free(want);
        t->step = (long)sck_value_get_int(sck_state_value(st, "other.step"));
        t->rng = (uint64_t)sck_value_get_int(sck_state_value(st, "other.rng"));
        t->data_pos = sck_value_get_int(sck_state_value(st, "other.data_pos"));
    }
    sck_state_free(st);
    return rc;
}

/* Fresh start: every rank draws the whole initial vector from the seed and keeps its range, so the
 * initialization does not depend on the number of ranks. */
static void init_params(trainer *t) {
    uint64_t s = t->o->seed;
    int64_t lo = t->d.lo[t->d.rank];
    for (int i = 0; i < NPARAM; i++) {
        float a = i == 0 ? 1.0f : (pndim[i] == 1 ? 0.0f : 1.0f / sqrtf((float)pshape[i][1]));
        for (int64_t j = poff[i]; j < poff[i + 1]; j++) {
            float x = (2.0f * rng_uniform(&s) - 1.0f) * a;
            if (j >= lo && j < lo + t->n) t->p[j - lo] = x;
        }
    }
    t->rng = rng_next(&s); /* the dropout stream starts where initialization ended */
    t->step = 0;
    t->data_pos = 0;
}

/* ---------------------------------------------------------------- forward / backward */

/* One sample: context ids ctx[0..CTX), target id y.  Adds d(loss)/B to gfull, returns the loss. */
static double sample_grad(trainer *t, const uint8_t *ctx, int y, const uint8_t *keep, float inv_b) {
    const float *emb = t->full + poff[0], *w1 = t->full + poff[1], *b1 = t->full + poff[2];
    const float *w2 = t->full + poff[3], *b2 = t->full + poff[4];
    float *gemb = t->gfull + poff[0], *gw1 = t->gfull + poff[1], *gb1 = t->gfull + poff[2];
    float *gw2 = t->gfull + poff[3], *gb2 = t->gfull + poff[4];
    float x[IN], h[HID], hd[HID], logit[V], dh[HID], dx[IN];
    const float scale = 1.0f / (1.0f - DROPOUT);
    for (int c = 0; c < CTX; c++) memcpy(x + c * EMB, emb + ctx[c] * EMB, EMB * sizeof *x);
    for (int k = 0; k < HID; k++) {
        float a = b1[k];
        for (int i = 0; i < IN; i++) a += w1[k * IN + i] * x[i];
        h[k] = tanhf(a);
        hd[k] = keep[k] ? h[k] * scale : 0.0f;
    }
    float mx = -INFINITY;
    for (int o = 0; o < V; o++) {
        float a = b2[o];
        for (int k = 0; k < HID; k++) a += w2[o * HID + k] * hd[k];
        logit[o] = a;
        if (a > mx) mx = a;
    }
    float sum = 0;
    for (int o = 0; o < V; o++) sum += (logit[o] = expf(logit[o] - mx));
    double loss = -log((double)logit[y] / sum);
    memset(dh, 0, sizeof dh);
    for (int o = 0; o < V; o++) {
        float dl = (logit[o] / sum - (o == y ? 1.0f : 0.0f)) * inv_b;
        gb2[o] += dl;
        for (int k = 0; k < HID; k++) {
            gw2[o * HID + k] += dl * hd[k];
            dh[k] += dl * w2[o * HID + k];
        }
    }
    memset(dx, 0, sizeof dx);
    for (int k = 0; k < HID; k++) {
        float dpre = keep[k] ? dh[k] * scale * (1.0f - h[k] * h[k]) : 0.0f;
        gb1[k] += dpre;
        for (int i = 0; i < IN; i++) {
            gw1[k * IN + i] += dpre * x[i];
            dx[i] += dpre * w1[k * IN + i];
        }
    }
    for (int c = 0; c < CTX; c++)
        for (int e = 0; e < EMB; e++) gemb[ctx[c] * EMB + e] += dx[c * EMB + e];
    return loss;
}

/* Forward and backward for this rank's slice [j0, j1) of the global batch; returns the summed loss.
 * Sample j reads the window at (data_pos + j * stream gap): B parallel streams through the text. */
static double batch_grad(trainer *t, uint8_t *keep) {
    long B = t->o->batch;
    int64_t starts = (int64_t)t->o->ntext - CTX, gap = starts / B;
    long j0 = B * t->d.rank / t->d.size, j1 = B * (t->d.rank + 1) / t->d.size;
    /* Every rank draws the whole batch's dropout masks so the RNG advances the same everywhere. */
    for (long j = 0; j < B; j++)
        for (int k = 0; k < HID; k++) {
            int kept = rng_uniform(&t->rng) >= DROPOUT;
            if (j >= j0 && j < j1) keep[(j - j0) * HID + k] = (uint8_t)kept;
        }
    memset(t->gfull, 0, (size_t)poff[NPARAM] * sizeof *t->gfull);
    double loss = 0;
    for (long j = j0; j < j1; j++) {
        int64_t s = (t->data_pos + j * gap) % starts;
        loss += sample_grad(t, t->o->text + s, t->o->text[s + CTX], keep + (j - j0) * HID, 1.0f / (float)B);
    }
    t->data_pos = (t->data_pos + CTX + 1) % starts;
    return loss;
}

static void adam(trainer *t) {
    float c1 = 1.0f - powf(BETA1, (float)t->step), c2 = 1.0f - powf(BETA2, (float)t->step);
    for (int64_t i = 0; i < t->n; i++) {
        float g = t->g[i];
        t->m[i] = BETA1 * t->m[i] + (1.0f - BETA1) * g;
        t->v[i] = BETA2 * t->v[i] + (1.0f - BETA2) * g * g;
        t->p[i] -= LR * (t->m[i] / c1) / (sqrtf(t->v[i] / c2) + EPS);
    }
}

/* Rank 0 writes the gathered parameters, exp_avg and exp_avg_sq (3 x P float32) for the tests. */
static int dump(trainer *t) {
    int64_t P = poff[NPARAM];
    FILE *f = NULL;
    int rc = 0;
    float *shards[3] = {t->p, t->m, t->v};
    for (int k = 0; k < 3 && !rc; k++) {
        rc = all_gather(&t->d, shards[k], t->full);
        if (rc || t->d.rank != 0) continue;
        if (!f && !(f = fopen(t->o->dump, "wb"))) {
            fprintf(stderr, "%s: %s\n", t->o->dump, strerror(errno));
            rc = 1;
        } else if (fwrite(t->full, sizeof *t->full, (size_t)P, f) != (size_t)P) {
            rc = 1;
        }
    }
    if (f && fclose(f) != 0) rc = 1;
    return rc;
}

/* ---------------------------------------------------------------- one rank */

static int bar(char *out, size_t cap, double loss) {
    size_t n = loss > 0 ? (size_t)(loss * 12.0 + 0.5) : 0;
    if (n >= cap) n = cap - 1;
    memset(out, '#', n);
    out[n] = 0;
    return 0;
}

static int train_rank(sck_comm *comm, dist *d, const opts *o) {
    trainer t;
    memset(&t, 0, sizeof t);
    t.d = *d;
    t.o = o;
    t.n = my_count(d);
    int64_t P = poff[NPARAM];
    size_t nb = (size_t)(t.n ? t.n : 1) * sizeof(float);
    t.p = calloc(1, nb), t.m = calloc(1, nb), t.v = calloc(1, nb), t.g = calloc(1, nb);
    t.full = malloc((size_t)P * sizeof(float));
    t.gfull = malloc((size_t)P * sizeof(float));
    t.d.scratch = malloc(nb * (size_t)d->size);
    uint8_t *keep = malloc((size_t)(o->batch / d->size + 1) * HID);
    int rc = t.p && t.m && t.v && t.g && t.full && t.gfull && t.d.scratch && keep ? 0 : SCK_ERR_NOMEM;
    if (rc) fprintf(stderr, "rank %d: out of memory\n", d->rank);
    rc = sck_comm_agree(comm, rc);
    if (!rc) {
        if (o->resume) {
            rc = load_ckpt(&t, comm);
            if (!rc && d->rank == 0) printf("resumed from %s at step %ld on %d ranks\n", o->resume, t.step, d->size);
        } else {
            init_params(&t);
        }
        rc = sck_comm_agree(comm, rc);
    }
    if (!rc && d->rank == 0)
        printf("fsdp_train: %d ranks (%s), %lld parameters flat-sharded, batch %ld, steps %ld..%ld\n", d->size,
               is_mpi(d) ? "MPI" : "threads", (long long)P, o->batch, t.step + 1, o->steps);
    double window = 0;
    long in_window = 0;
    while (!rc && t.step < o->steps) {
        double local = 0, loss = 0;
        if (all_gather(&t.d, t.p, t.full)) rc = SCK_ERR_COMM;
        if (!rc) local = batch_grad(&t, keep);
        if (!rc && reduce_scatter(&t.d, t.gfull, t.g)) rc = SCK_ERR_COMM;
        if (!rc && sum_ranks(&t.d, local, &loss)) rc = SCK_ERR_COMM;
        if (rc) break;
        t.step++;
        adam(&t);
        window += loss / (double)o->batch;
        in_window++;
        if (d->rank == 0 && (t.step % o->log_every == 0 || t.step == o->steps)) {
            char b[100];
            bar(b, sizeof b, window / (double)in_window);
            printf("step %5ld  loss %.4f  %s\n", t.step, window / (double)in_window, b);
            fflush(stdout);
        }
        if (t.step % o->log_every == 0) window = 0, in_window = 0;
        if (o->ckpt_dir && o->save_every > 0 && t.step % o->save_every == 0) rc = save_ckpt(&t, comm);
    }
    if (!rc && o->dump && dump(&t)) rc = SCK_ERR_IO;
    if (rc && d->rank == 0) fprintf(stderr, "fsdp_train: %s (%s)\n", sck_last_error(), sck_status_name(rc));
    free(t.p), free(t.m), free(t.v), free(t.g), free(t.full), free(t.gfull), free(t.d.scratch), free(keep);
    return rc;
}

/* Rank r of n owns [P*r/n, P*(r+1)/n). */
static int64_t *split(int n) {
    int64_t *lo = malloc((size_t)(n + 1) * sizeof *lo);
    for (int r = 0; lo && r <= n; r++) lo[r] = poff[NPARAM] * r / n;
    return lo;
}

/* ---------------------------------------------------------------- threads mode */

typedef struct threads_arg {
    const opts *o;
    shm_group g;
    int64_t *lo;
} threads_arg;

static int thread_main(sck_comm *comm, void *varg) {
    threads_arg *a = varg;
    dist d;
    memset(&d, 0, sizeof d);
    d.rank = sck_comm_rank(comm);
    d.size = sck_comm_size(comm);
    d.lo = a->lo;
    d.shm = &a->g;
#ifdef FSDP_WITH_MPI
    d.mpi = MPI_COMM_NULL;
#endif
    return train_rank(comm, &d, a->o);
}

static int run_threads(const opts *o, int n) {
    threads_arg a;
    memset(&a, 0, sizeof a);
    a.o = o;
    a.lo = split(n);
    a.g.ptr = calloc((size_t)n, sizeof *a.g.ptr);
    if (!a.lo || !a.g.ptr || pthread_barrier_init(&a.g.bar, NULL, (unsigned)n)) {
        fprintf(stderr, "fsdp_train: cannot set up %d thread ranks\n", n);
        free(a.lo), free(a.g.ptr);
        return 1;
    }
    int rc = sck_threads_run(n, thread_main, &a);
    pthread_barrier_destroy(&a.g.bar);
    free(a.lo), free(a.g.ptr);
    return rc != 0;
}

/* ---------------------------------------------------------------- MPI mode */

#ifdef FSDP_WITH_MPI
static int run_mpi(const opts *o) {
    sck_comm *comm = sck_comm_mpi(MPI_COMM_WORLD);
    if (!comm) {
        fprintf(stderr, "fsdp_train: %s\n", sck_last_error());
        return 1;
    }
    dist d;
    memset(&d, 0, sizeof d);
    d.rank = sck_comm_rank(comm);
    d.size = sck_comm_size(comm);
    d.mpi = MPI_COMM_WORLD;
    d.lo = split(d.size);
    size_t n = (size_t)d.size;
    d.cnt = malloc(n * sizeof(int)), d.dsp = malloc(n * sizeof(int)), d.rcnt = malloc(n * sizeof(int)), d.rdsp = malloc(n * sizeof(int));
    int rc = d.lo && d.cnt && d.dsp && d.rcnt && d.rdsp ? SCK_OK : SCK_ERR_NOMEM;
    rc = sck_comm_agree(comm, rc);
    if (!rc && (long)d.size > o->batch) rc = SCK_ERR_INVALID_ARG;
    if (rc == SCK_ERR_INVALID_ARG && d.rank == 0) fprintf(stderr, "fsdp_train: %d ranks but a batch of %ld\n", d.size, o->batch);
    if (!rc) rc = train_rank(comm, &d, o);
    free(d.lo), free(d.cnt), free(d.dsp), free(d.rcnt), free(d.rdsp);
    sck_comm_free(comm);
    return rc != 0;
}
#endif

/* ---------------------------------------------------------------- main */

static int load_text(opts *o) {
    FILE *f = fopen(o->data, "rb");
    if (!f) return fprintf(stderr, "fsdp_train: %s: %s\n", o->data, strerror(errno)), 1;
    size_t cap = 1 << 16, n = 0, k;
    uint8_t *t = malloc(cap);
    while (t && (k = fread(t + n, 1, cap - n, f)) > 0)
        if ((n += k) == cap) {
            uint8_t *bigger = realloc(t, cap *= 2);
            if (!bigger) free(t);
            t = bigger;
        }
    fclose(f);
    if (!t) return fprintf(stderr, "fsdp_train: out of memory reading %s\n", o->data), 1;
    /* Printable ASCII 32..126 -> 0..94, newline -> 95, anything else -> space. */
    for (size_t i = 0; i < n; i++) t[i] = t[i] == '\n' ? 95 : (t[i] >= 32 && t[i] <= 126 ? (uint8_t)(t[i] - 32) : 0);
    if (n < (size_t)(CTX + 1) + (size_t)o->batch) {
        free(t);
        return fprintf(stderr, "fsdp_train: %s: %zu characters are too few\n", o->data, n), 1;
    }
    o->text = t;
    o->ntext = n;
    return 0;
}

static void usage(void) {
    fprintf(stderr,
            "usage: fsdp_train [--threads N] [--steps S] [--batch B] [--seed X] [--data FILE]\n"
            "                  [--ckpt-dir DIR --save-every K] [--resume CKPT] [--log-every N] [--dump FILE]\n"
            "Runs under mpirun (one rank per process) when built with MPI, else (or with --threads N) as N threads.\n");
}

int main(int argc, char **argv) {
    opts o = {0, 200, 0, 10, 32, 1234, "examples/data/gpl-3.txt", NULL, NULL, NULL, NULL, 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return usage(), 2;
        i++;
        if (!strcmp(a, "--threads")) o.threads = atoi(v);
        else if (!strcmp(a, "--steps")) o.steps = atol(v);
        else if (!strcmp(a, "--batch")) o.batch = atol(v);
        else if (!strcmp(a, "--seed")) o.seed = strtoull(v, NULL, 0);
        else if (!strcmp(a, "--data")) o.data = v;
        else if (!strcmp(a, "--ckpt-dir")) o.ckpt_dir = v;
        else if (!strcmp(a, "--save-every")) o.save_every = atol(v);
        else if (!strcmp(a, "--resume")) o.resume = v;
        else if (!strcmp(a, "--log-every")) o.log_every = atol(v);
        else if (!strcmp(a, "--dump")) o.dump = v;
        else return usage(), 2;
    }
    if (o.threads < 0 || o.steps < 0 || o.batch < 1 || o.log_every < 1 || o.save_every < 0 || o.threads > o.batch)
        return usage(), 2;
    layout();
    if (load_text(&o)) return 1;
    if (o.ckpt_dir && mkdir(o.ckpt_dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "fsdp_train: %s: %s\n", o.ckpt_dir, strerror(errno));
        return 1;
    }
    int rc;
#ifdef FSDP_WITH_MPI
    if (o.threads == 0) {
        MPI_Init(&argc, &argv);
        rc = run_mpi(&o);
        MPI_Finalize();
    } else
#endif
        rc = run_threads(&o, o.threads > 0 ? o.threads : 1);
    free(o.text);
    return rc;
}
