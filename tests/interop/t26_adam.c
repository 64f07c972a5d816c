/*
 * t26_adam.c - a C trainer that resumes torch 2.6's Adam state (tests/interop/t26_adam.py saves and checks it).
 *
 * usage: t26_adam IN_DIR OUT_DIR NRANKS
 *
 * IN_DIR is dcp.save of {"model", "optimizer"} from torch's get_state_dict for nn.Sequential(nn.Linear(4, 3))
 * and Adam, plus "data": {"x": [2, 5, 4] float32}, the next two batches.  NRANKS thread ranks each hold a
 * contiguous 1/NRANKS flat range (ZeRO style) of every parameter and of its exp_avg and exp_avg_sq; the step
 * counters, the batches and the param_groups values are replicated.  Each of 2 steps: the ranks gather the
 * full parameters, every rank computes the full gradient of sum((W x + b)^2), and updates its own range
 * as torch 2.6's _single_tensor_adam does on CPU (float32 tensors, Python-float scalars).  OUT_DIR gets
 * the new state under torch's keys and planner_data paths, sharded the same way, so torch's dcp.load +
 * set_state_dict restores it.
 */
#include <math.h>
#include <shardckpt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { IN = 4, OUT = 3, BATCH = 5, STEPS = 2, NP = 2, MAXN = OUT * IN, MAXKEYS = 64 };
static const char *const fqn[NP] = {"0.weight", "0.bias"};
static const int pndim[NP] = {2, 1};
static const int64_t pshape[NP][2] = {{OUT, IN}, {OUT, 0}};
static const int64_t pnumel[NP] = {OUT * IN, OUT};
static const int64_t xshape[3] = {STEPS, BATCH, IN};
static const char *const moment[2] = {"exp_avg", "exp_avg_sq"};
#define GROUP "optimizer.param_groups.0."

/* What every rank shares: the arguments, the source checkpoint's entries (keys and nested-dict paths) and
 * the gathered parameters (each rank writes its own range; sck_comm_agree fences the reads and writes). */
typedef struct job {
    const char *in, *out;
    int nranks;
    size_t nkeys;
    char *key[MAXKEYS];
    sck_value *path[MAXKEYS];
    float full[NP][MAXN];
} job;

/* This rank's part: flat range [begin, begin+count) of each parameter, with its moments. */
typedef struct shard {
    int64_t begin[NP], count[NP];
    float p[NP][MAXN], m[NP][2][MAXN];
    float step[NP];
    float x[STEPS][BATCH][IN];
    double lr, beta1, beta2, eps, wd;
} shard;

static int fail(int rc, const char *what) {
    fprintf(stderr, "t26_adam: %s: %s: %s\n", what, sck_status_name(rc), sck_last_error());
    return rc;
}

/* Reads the source checkpoint's keys and paths, so the output keeps torch's (planner_data) paths. */
static int read_entries(job *j) {
    sck_ckpt *ck;
    int rc = sck_ckpt_open(j->in, &ck);
    if (rc) return fail(rc, j->in);
    for (size_t i = 0; i < sck_ckpt_count(ck) && !rc; i++) {
        sck_entry_info e;
        if (j->nkeys == MAXKEYS) {
            fprintf(stderr, "t26_adam: %s: more than %d entries\n", j->in, MAXKEYS);
            rc = SCK_ERR_UNSUPPORTED;
        } else if ((rc = sck_ckpt_entry(ck, i, &e)) || (rc = sck_ckpt_entry_path(ck, i, &j->path[j->nkeys]))) {
            fail(rc, j->in);
        } else {
            size_t len = strlen(e.key) + 1; /* strdup is not C11 */
            if ((j->key[j->nkeys] = malloc(len))) memcpy(j->key[j->nkeys], e.key, len);
            else {
                fprintf(stderr, "t26_adam: out of memory\n");
                rc = SCK_ERR_NOMEM;
            }
            j->nkeys++; /* main frees the path, and the key if there is one */
        }
    }
    sck_ckpt_close(ck);
    return rc;
}

static int is_group_key(const char *k) { return strncmp(k, GROUP, strlen(GROUP)) == 0; }

/* The tensors of this rank's shard, for the load (with data.x) or the save (without). */
static int add_tensors(sck_state *st, shard *s, int for_load) {
    char key[256];
    int rc = SCK_OK;
    for (int i = 0; i < NP && !rc; i++) {
        snprintf(key, sizeof key, "model.%s", fqn[i]);
        rc = sck_state_add_flat(st, key, SCK_F32, pndim[i], pshape[i], s->begin[i], s->count[i], s->p[i]);
        for (int k = 0; k < 2 && !rc; k++) {
            snprintf(key, sizeof key, "optimizer.state.%s.%s", fqn[i], moment[k]);
            rc = sck_state_add_flat(st, key, SCK_F32, pndim[i], pshape[i], s->begin[i], s->count[i], s->m[i][k]);
        }
        /* torch keeps Adam's step as a 0-d float32 tensor per parameter, the same on every rank */
        snprintf(key, sizeof key, "optimizer.state.%s.step", fqn[i]);
        if (!rc) rc = sck_state_add_replicated(st, key, SCK_F32, 0, NULL, &s->step[i]);
    }
    if (!rc && for_load) rc = sck_state_add_replicated(st, "data.x", SCK_F32, 3, xshape, s->x);
    return rc;
}

static int number(const sck_state *st, const char *name, double *out, int say) {
    char key[256];
    snprintf(key, sizeof key, GROUP "%s", name);
    const sck_value *v = sck_state_value(st, key);
    sck_value_kind k = v ? sck_value_kind_of(v) : SCK_VAL_NULL;
    if (k != SCK_VAL_FLOAT && k != SCK_VAL_INT) {
        if (say) fprintf(stderr, "t26_adam: %s is not a number\n", key);
        return SCK_ERR_MISMATCH;
    }
    *out = sck_value_get_float(v);
    return SCK_OK;
}

/* lr, betas, eps, weight_decay as Python floats; the variants this trainer does not follow are refused.
 * Every rank holds the same values, so only rank 0 (say) prints why. */
static int hyper(const sck_state *st, shard *s, int say) {
    int rc = number(st, "lr", &s->lr, say);
    if (!rc) rc = number(st, "eps", &s->eps, say);
    if (!rc) rc = number(st, "weight_decay", &s->wd, say);
    if (rc) return rc;
    const sck_value *b = sck_state_value(st, GROUP "betas"), *pl = sck_state_value(st, GROUP "params");
    sck_value_kind bk = b ? sck_value_kind_of(b) : SCK_VAL_NULL;
    int pair = (bk == SCK_VAL_TUPLE || bk == SCK_VAL_LIST) && sck_value_len(b) == 2;
    for (size_t i = 0; pair && i < 2; i++) {
        sck_value_kind ik = sck_value_kind_of(sck_value_at(b, i));
        pair = ik == SCK_VAL_FLOAT || ik == SCK_VAL_INT;
    }
    if (!pair) {
        if (say) fprintf(stderr, "t26_adam: " GROUP "betas is not a pair of numbers\n");
        return SCK_ERR_MISMATCH;
    }
    s->beta1 = sck_value_get_float(sck_value_at(b, 0));
    s->beta2 = sck_value_get_float(sck_value_at(b, 1));
    static const char *const off[] = {"amsgrad", "maximize", "capturable", "differentiable"};
    for (size_t i = 0; i < sizeof off / sizeof *off; i++) {
        char key[256];
        snprintf(key, sizeof key, GROUP "%s", off[i]);
        const sck_value *v = sck_state_value(st, key);
        if (!v || sck_value_kind_of(v) != SCK_VAL_BOOL || sck_value_get_bool(v)) {
            if (say) fprintf(stderr, "t26_adam: %s must be False\n", key);
            return SCK_ERR_UNSUPPORTED;
        }
    }
    /* the group's parameters, in order, must be the ones this trainer's model has */
    int ok = pl && sck_value_len(pl) == NP;
    for (size_t i = 0; ok && i < NP; i++) {
        const char *f = sck_value_get_string(sck_value_at(pl, i), NULL);
        ok = f && strcmp(f, fqn[i]) == 0;
    }
    if (!ok) {
        if (say) fprintf(stderr, "t26_adam: " GROUP "params is not [\"0.weight\", \"0.bias\"]\n");
        return SCK_ERR_MISMATCH;
    }
    return SCK_OK;
}

/* Full gradient of sum((W x + b)^2) over the batch: y = W x + b, dy = 2 y, dW = sum dy x^T, db = sum dy. */
static void gradient(const job *j, const float x[BATCH][IN], float g[NP][MAXN]) {
    const float *w = j->full[0], *bias = j->full[1];
    memset(g, 0, sizeof(float) * NP * MAXN);
    for (int b = 0; b < BATCH; b++)
        for (int o = 0; o < OUT; o++) {
            float y = bias[o];
            for (int i = 0; i < IN; i++) y += w[o * IN + i] * x[b][i];
            float dy = 2.0f * y;
            for (int i = 0; i < IN; i++) g[0][o * IN + i] += dy * x[b][i];
            g[1][o] += dy;
        }
}

/* _single_tensor_adam on the owned range: the tensor ops round to float32 with their Python-float scalars
 * cast to float; the bias corrections are Python (double) arithmetic on step.item(). */
static void adam(shard *s, int i, const float *grad) {
    float *p = s->p[i], *m = s->m[i][0], *v = s->m[i][1];
    s->step[i] += 1.0f;
    double step = s->step[i];
    double bc1 = 1.0 - pow(s->beta1, step), bc2 = 1.0 - pow(s->beta2, step);
    double step_size = s->lr / bc1, bc2_sqrt = pow(bc2, 0.5);
    const float w1 = (float)(1.0 - s->beta1), b2 = (float)s->beta2, c2 = (float)(1.0 - s->beta2);
    const float wd = (float)s->wd, div = (float)bc2_sqrt, eps = (float)s->eps, neg = (float)-step_size;
    for (int64_t k = 0; k < s->count[i]; k++) {
        float g = grad[s->begin[i] + k];
        if (s->wd != 0) g = g + wd * p[k];
        /* exp_avg.lerp_(grad, 1 - beta1): torch's two formulas, chosen by the weight */
        m[k] = fabsf(w1) < 0.5f ? m[k] + w1 * (g - m[k]) : g - (g - m[k]) * (1.0f - w1);
        v[k] = v[k] * b2;
        v[k] = v[k] + c2 * g * g;             /* addcmul_(grad, grad, value=1-beta2) */
        float denom = sqrtf(v[k]) / div + eps;
        p[k] = p[k] + neg * m[k] / denom;     /* addcdiv_(exp_avg, denom, value=-step_size) */
    }
}

/* Collective: the ranks' parameter ranges into the shared full copy, then everyone sees all of it. */
static int gather(sck_comm *comm, job *j, const shard *s) {
    for (int i = 0; i < NP; i++) memcpy(j->full[i] + s->begin[i], s->p[i], sizeof(float) * (size_t)s->count[i]);
    return sck_comm_agree(comm, SCK_OK);
}

static int train(sck_comm *comm, job *j, shard *s) {
    float g[NP][MAXN];
    for (int t = 0; t < STEPS; t++) {
        int rc = gather(comm, j, s);
        if (rc) return rc;
        gradient(j, s->x[t], g);
        rc = sck_comm_agree(comm, SCK_OK); /* all have read the full copy before anyone rewrites it */
        if (rc) return rc;
        for (int i = 0; i < NP; i++) adam(s, i, g[i]);
    }
    return SCK_OK;
}

/* Every key of st gets the path the source checkpoint recorded for it. */
static int set_paths(sck_state *st, const job *j) {
    for (size_t n = 0; n < sck_state_count(st); n++) {
        const char *k = sck_state_key(st, n);
        size_t e = 0;
        while (e < j->nkeys && strcmp(j->key[e], k)) e++;
        if (e == j->nkeys) {
            fprintf(stderr, "t26_adam: %s is not in %s\n", k, j->in);
            return SCK_ERR_MISSING_KEY;
        }
        int rc = sck_state_set_path(st, k, j->path[e]);
        if (rc) return fail(rc, k);
    }
    return SCK_OK;
}

/* Local failures print where they happen and are then agreed on; a collective's failure is the same on
 * every rank, so rank 0 prints it. */
static int rank_main(sck_comm *comm, void *arg) {
    job *j = arg;
    int r = sck_comm_rank(comm), n = sck_comm_size(comm);
    shard *s = calloc(1, sizeof *s);
    sck_state *in = sck_state_new(), *out = sck_state_new();
    int rc = s && in && out ? SCK_OK : SCK_ERR_NOMEM;
    if (rc) fprintf(stderr, "t26_adam: rank %d: out of memory\n", r);
    for (int i = 0; i < NP && s; i++) {
        s->begin[i] = pnumel[i] * r / n;
        s->count[i] = pnumel[i] * (r + 1) / n - s->begin[i];
    }
    /* load: the tensors, plus every param_groups value (requested with NULL) to read and carry over */
    if (!rc && (rc = add_tensors(in, s, 1))) fail(rc, "load request");
    for (size_t e = 0; e < j->nkeys && !rc; e++)
        if (is_group_key(j->key[e]) && (rc = sck_state_add_value(in, j->key[e], NULL))) fail(rc, j->key[e]);
    rc = sck_comm_agree(comm, rc); /* a local failure must not leave the others waiting in sck_load */
    /* anything else in the checkpoint would be lost in the re-save: refuse it */
    sck_load_opts lo = {.flags = SCK_LOAD_REJECT_UNEXPECTED};
    if (!rc && (rc = sck_load(comm, j->in, in, &lo)) && r == 0) fail(rc, j->in);
    if (!rc) rc = sck_comm_agree(comm, hyper(in, s, r == 0));
    if (!rc && (rc = train(comm, j, s)) && r == 0) fail(rc, "barrier");
    /* save: the same tensors and the param_groups values as read, under torch's keys and paths */
    if (!rc) {
        int lrc = add_tensors(out, s, 0);
        if (lrc) fail(lrc, "save request");
        for (size_t e = 0; e < j->nkeys && !lrc; e++) {
            if (!is_group_key(j->key[e])) continue;
            sck_value *v = sck_value_clone(sck_state_value(in, j->key[e]));
            if (!v) fprintf(stderr, "t26_adam: rank %d: out of memory\n", r);
            if ((lrc = v ? sck_state_add_value(out, j->key[e], v) : SCK_ERR_NOMEM) && v) fail(lrc, j->key[e]);
        }
        if (!lrc) lrc = set_paths(out, j);
        rc = sck_comm_agree(comm, lrc);
    }
    if (!rc && (rc = sck_save(comm, j->out, out, NULL)) && r == 0) fail(rc, j->out);
    if (!rc && r == 0)
        printf("t26_adam: %s -> %s on %d ranks: %d Adam steps (lr %g, betas (%g, %g), eps %g), step %g\n", j->in,
               j->out, n, STEPS, s->lr, s->beta1, s->beta2, s->eps, (double)s->step[0]);
    sck_state_free(in);
    sck_state_free(out);
    free(s);
    return rc;
}

int main(int argc, char **argv) {
    if (argc != 4 || atoi(argv[3]) < 1) {
        fprintf(stderr, "usage: t26_adam IN_DIR OUT_DIR NRANKS\n");
        return 2;
    }
    job *j = calloc(1, sizeof *j);
    if (!j) return 1;
    j->in = argv[1];
    j->out = argv[2];
    j->nranks = atoi(argv[3]);
    int rc = read_entries(j);
    if (!rc) rc = sck_threads_run(j->nranks, rank_main, j);
    if (rc) fprintf(stderr, "t26_adam: failed (%s)\n", sck_status_name(rc));
    for (size_t e = 0; e < j->nkeys; e++) {
        free(j->key[e]);
        sck_value_free(j->path[e]);
    }
    free(j);
    return rc ? 1 : 0;
}
