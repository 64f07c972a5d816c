/* test_async_reuse.c - saves through the same sck_async handles, as a training loop does: the plan
 * kept from the save before is used again while every rank's structure is unchanged, and exchanged
 * again as soon as one rank's changes or a save fails.  Every save must load back its own data and
 * write the `.metadata` a plain sck_save of the same state writes. */
#include <stdio.h>
#include <stdlib.h>

#include "comm/comm.h"
#include "harness.h"

#define R 3
#define ROWS 12
#define COLS 5

typedef struct loop {
    sck_async *h[R];
    const char *dir, *ref;     /* async saves; sck_save of the same states */
    int layout;                /* 0, 1: two valid splits of "a"; 2: a hole at row 8 */
    int step;
    unsigned flags;
    int fail_allgather;        /* failing_rank: the save's first allgather fails on every rank */
    float a[ROWS * COLS];
    double rep[7];
    int rc[R], rc_ref[R];
    char msg[R][512];
} loop;

static const int64_t cuts[3][R + 1] = {{0, 4, 8, 12}, {0, 3, 9, 12}, {0, 3, 8, 12}};

static sck_state *loop_state(loop *L, int r) {
    sck_state *st = sck_state_new();
    const int64_t *c = cuts[L->layout];
    int64_t lo = c[r], hi = L->layout == 2 && r == 2 ? 12 : c[r + 1];
    if (L->layout == 2 && r == 2) lo = 9;
    int64_t sh[2] = {ROWS, COLS}, off[2] = {lo, 0}, sz[2] = {hi - lo, COLS}, rs[1] = {7};
    char blob[16];
    int bn = snprintf(blob, sizeof blob, "step %d", L->step);
    /* rank 2 adds its keys in reverse order */
    for (int k = 0; k < 4; k++) {
        switch (r == 2 ? 3 - k : k) {
        case 0: sck_state_add_box(st, "model.a", SCK_F32, 2, sh, off, sz, L->a + lo * COLS); break;
        case 1: sck_state_add_replicated(st, "model.rep", SCK_F64, 1, rs, L->rep); break;
        case 2: sck_state_add_blob(st, "extra.blob", r == 1 ? blob : NULL, r == 1 ? (size_t)bn : 0); break;
        default: sck_state_add_value(st, "extra.step", r == 0 ? sck_value_int(L->step) : NULL); break;
        }
    }
    return st;
}

static int loop_rank(sck_comm *c, void *arg) {
    loop *L = arg;
    int r = sck_comm_rank(c);
    sck_state *st = loop_state(L, r);
    sck_save_opts o = {L->flags | SCK_SAVE_NO_FSYNC, 0, {0}};
    int rc = sck_save_async(L->h[r], c, L->dir, st, &o);
    if (!rc) rc = sck_wait(L->h[r]);
    L->rc[r] = rc;
    snprintf(L->msg[r], sizeof L->msg[r], "%s", sck_last_error());
    sck_save_opts so = {SCK_SAVE_NO_FSYNC, 0, {0}};
    L->rc_ref[r] = sck_save(c, L->ref, st, &so);
    sck_state_free(st);
    return rc;
}

static int file_equal(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        int x = fgetc(fa), y = fgetc(fb);
        if (x != y) same = 0;
        if (x == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

/* The checkpoint holds step's data and the reference save's `.metadata`. */
static void check_step(loop *L) {
    float a[ROWS * COLS];
    double rep[7];
    sck_state *st = sck_state_new();
    int64_t sh[2] = {ROWS, COLS}, z[2] = {0, 0}, rs[1] = {7};
    sck_state_add_box(st, "model.a", SCK_F32, 2, sh, z, sh, a);
    sck_state_add_replicated(st, "model.rep", SCK_F64, 1, rs, rep);
    sck_state_add_blob(st, "extra.blob", NULL, 0);
    sck_state_add_value(st, "extra.step", NULL);
    CHECK_OK(sck_load(NULL, L->dir, st, NULL));
    CHECK(!memcmp(a, L->a, sizeof a));
    CHECK(!memcmp(rep, L->rep, sizeof rep));
    const void *b;
    size_t n;
    char want[16];
    snprintf(want, sizeof want, "step %d", L->step);
    CHECK(sck_state_blob(st, "extra.blob", &b, &n) == SCK_OK && n == strlen(want) && !memcmp(b, want, n));
    const sck_value *v = sck_state_value(st, "extra.step");
    CHECK(v && sck_value_get_int(v) == L->step);
    sck_state_free(st);
    char m1[4200], m2[4200];
    snprintf(m1, sizeof m1, "%s/.metadata", L->dir);
    snprintf(m2, sizeof m2, "%s/.metadata", L->ref);
    CHECK(file_equal(m1, m2));
}

TEST(async_saves_through_one_handle_reuse_the_plan_until_the_structure_changes) {
    loop L;
    memset(&L, 0, sizeof L);
    char dir[4096], ref[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    snprintf(ref, sizeof ref, "%s/ref", th_tmpdir());
    L.dir = dir, L.ref = ref;
    for (int r = 0; r < R; r++) REQUIRE(L.h[r] = sck_async_new());
    /* layout per step: same, same (kept plan), changed, same, a hole (error), same again, no-copy */
    static const int layouts[] = {0, 0, 1, 1, 2, 1, 1, 0};
    for (int s = 0; s < (int)(sizeof layouts / sizeof layouts[0]); s++) {
        L.step = s;
        L.layout = layouts[s];
        L.flags = s == 6 ? SCK_SAVE_NO_COPY : 0;
        th_fill(L.a, sizeof L.a, 100 + (uint64_t)s);
        th_fill(L.rep, sizeof L.rep, 200 + (uint64_t)s);
        int rc = sck_threads_run(R, loop_rank, &L);
        if (L.layout == 2) {
            CHECK(rc == SCK_ERR_COVERAGE);
            for (int r = 0; r < R; r++) {
                CHECK(L.rc[r] == SCK_ERR_COVERAGE && L.rc_ref[r] == SCK_ERR_COVERAGE);
                CHECK(strstr(L.msg[r], "'model.a': the shards of all ranks do not cover the whole tensor") != NULL);
                CHECK(!strcmp(L.msg[r], L.msg[0]));
            }
            continue;
        }
        CHECK_OK(rc);
        for (int r = 0; r < R; r++) CHECK(L.rc[r] == SCK_OK && L.rc_ref[r] == SCK_OK);
        check_step(&L);
    }
    for (int r = 0; r < R; r++) sck_async_free(L.h[r]);
}

/* One rank alone changes its structure (a key more) while the others keep theirs: everyone exchanges
 * plans again, and the new key's mismatch is found identically on every rank. */
typedef struct odd {
    sck_async *h[R];
    const char *dir;
    int step;
    int rc[R];
    char msg[R][512];
} odd;

static int odd_rank(sck_comm *c, void *arg) {
    odd *o = arg;
    int r = sck_comm_rank(c);
    static double w[8]; /* room for the F64 one */
    int64_t sh[1] = {8}, off[1] = {0}, sz[1] = {8};
    sck_state *st = sck_state_new();
    sck_state_add_replicated(st, "w", SCK_F32, 1, sh, w);
    if (o->step == 1 && r == 2) sck_state_add_box(st, "late", SCK_F32, 1, sh, off, sz, w);
    if (o->step == 1 && r == 0) sck_state_add_box(st, "late", SCK_F64, 1, sh, off, sz, w);
    sck_save_opts so = {SCK_SAVE_NO_FSYNC, 0, {0}};
    int rc = sck_save_async(o->h[r], c, o->dir, st, &so);
    if (!rc) rc = sck_wait(o->h[r]);
    o->rc[r] = rc;
    snprintf(o->msg[r], sizeof o->msg[r], "%s", sck_last_error());
    sck_state_free(st);
    return rc;
}

TEST(async_reuse_notices_a_change_on_one_rank) {
    odd o;
    memset(&o, 0, sizeof o);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    o.dir = dir;
    for (int r = 0; r < R; r++) REQUIRE(o.h[r] = sck_async_new());
    for (o.step = 0; o.step < 3; o.step++) {
        int rc = sck_threads_run(R, odd_rank, &o);
        if (o.step != 1) {
            CHECK_OK(rc);
            continue;
        }
        for (int r = 0; r < R; r++) {
            CHECK(o.rc[r] == SCK_ERR_MISMATCH);
            CHECK(strstr(o.msg[r], "'late': rank 0 and rank 2 disagree on dtype or global shape") != NULL);
        }
    }
    for (int r = 0; r < R; r++) sck_async_free(o.h[r]);
}

/* Handles passed to other ranks: every rank's structure is the same (replicated tensors only) and
 * every handle keeps a plan from the same exchange, but each plan was built for another rank. */
typedef struct swap {
    sck_async *h[R];
    const char *dir;
    int rot;
    float x[6][10];
} swap;

static int swap_rank(sck_comm *c, void *arg) {
    swap *s = arg;
    int r = sck_comm_rank(c);
    int64_t sh[1] = {10};
    sck_state *st = sck_state_new();
    for (int k = 0; k < 6; k++) {
        char key[16];
        snprintf(key, sizeof key, "x%d", k);
        sck_state_add_replicated(st, key, SCK_F32, 1, sh, s->x[k]);
    }
    sck_save_opts so = {SCK_SAVE_NO_FSYNC, 0, {0}};
    sck_async *h = s->h[(r + s->rot) % R];
    int rc = sck_save_async(h, c, s->dir, st, &so);
    if (!rc) rc = sck_wait(h);
    sck_state_free(st);
    return rc;
}

TEST(async_handles_used_by_other_ranks_do_not_reuse_their_plans) {
    swap s;
    memset(&s, 0, sizeof s);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    s.dir = dir;
    for (int r = 0; r < R; r++) REQUIRE(s.h[r] = sck_async_new());
    for (s.rot = 0; s.rot < 3; s.rot++) {
        th_fill(s.x, sizeof s.x, 300 + (uint64_t)s.rot);
        REQUIRE_OK(sck_threads_run(R, swap_rank, &s));
        float got[6][10];
        int64_t sh[1] = {10};
        sck_state *st = sck_state_new();
        for (int k = 0; k < 6; k++) {
            char key[16];
            snprintf(key, sizeof key, "x%d", k);
            sck_state_add_replicated(st, key, SCK_F32, 1, sh, got[k]);
        }
        CHECK_OK(sck_load(NULL, dir, st, NULL));
        CHECK(!memcmp(got, s.x, sizeof got));
        sck_state_free(st);
    }
    for (int r = 0; r < R; r++) sck_async_free(s.h[r]);
}

/* A communicator whose next allgather fails on every rank: the first collective of an async save
 * then fails after every rank took its snapshot. */
typedef struct failing {
    sck_comm *inner;
    int fail_next;
    int calls;              /* the collectives that reached it (allgathers, broadcasts, barriers) */
} failing;

static int fl_allgatherv(void *ctx, const void *send, size_t n, void **recv, size_t *counts) {
    failing *f = ctx;
    f->calls++;
    if (f->fail_next) {
        f->fail_next = 0;
        return SCK_ERR_COMM;
    }
    return f->inner->ops->allgatherv(f->inner->ctx, send, n, recv, counts);
}
static int fl_bcast(void *ctx, void **buf, size_t *n, int root) {
    failing *f = ctx;
    f->calls++;
    return f->inner->ops->bcast(f->inner->ctx, buf, n, root);
}
static int fl_barrier(void *ctx) {
    failing *f = ctx;
    f->calls++;
    return f->inner->ops->barrier(f->inner->ctx);
}
static const sck_comm_ops failing_ops = {fl_allgatherv, fl_bcast, fl_barrier, NULL};

static int failing_rank(sck_comm *c, void *arg) {
    loop *L = arg;
    failing f = {c, L->fail_allgather, 0};
    sck_comm *fc = sck_comm_create(&failing_ops, &f, sck_comm_rank(c), sck_comm_size(c));
    int rc = sck_comm_agree(c, fc ? SCK_OK : SCK_ERR_NOMEM);
    if (!rc) rc = loop_rank(fc, L);
    sck_comm_free(fc);
    return rc;
}

/* A save that fails in its first collective after the structure changed: its snapshot already
 * replaced the copy the kept plan was made from, so the next save of the new structure must exchange
 * plans again, not reuse the old plan (layouts 0 and 1 split "a" differently: layout 0's plan would
 * write the wrong boxes).  Also when rank 0 alone fails there (it cannot make the directory). */
TEST(async_failed_first_collective_after_a_change_does_not_keep_the_old_plan) {
    loop L;
    memset(&L, 0, sizeof L);
    char dir[4096], ref[4096], bad[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    snprintf(ref, sizeof ref, "%s/ref", th_tmpdir());
    snprintf(bad, sizeof bad, "%s/no/such/parent/ck", th_tmpdir());
    L.ref = ref;
    for (int r = 0; r < R; r++) REQUIRE(L.h[r] = sck_async_new());
    /* per step: layout, and how the save fails (0 it does not, 1 the allgather, 2 rank 0's directory) */
    static const int steps[][2] = {{0, 0}, {0, 0}, {1, 1}, {1, 0}, {0, 2}, {0, 0}};
    for (int s = 0; s < (int)(sizeof steps / sizeof steps[0]); s++) {
        L.step = s;
        L.layout = steps[s][0];
        L.dir = steps[s][1] == 2 ? bad : dir;
        L.fail_allgather = steps[s][1] == 1;
        th_fill(L.a, sizeof L.a, 500 + (uint64_t)s);
        th_fill(L.rep, sizeof L.rep, 600 + (uint64_t)s);
        int rc = sck_threads_run(R, failing_rank, &L);
        if (steps[s][1]) {
            CHECK(rc != SCK_OK);
            for (int r = 0; r < R; r++) CHECK(L.rc[r] != SCK_OK && L.rc[r] == L.rc[0]);
            continue;
        }
        CHECK_OK(rc);
        for (int r = 0; r < R; r++) CHECK(L.rc[r] == SCK_OK && L.rc_ref[r] == SCK_OK);
        check_step(&L);
    }
    for (int r = 0; r < R; r++) sck_async_free(L.h[r]);
}

/* One state object per rank, kept from save to save as a training loop keeps it.  Between saves one
 * rank adds a key, a load fills blobs the other ranks had only requested, and a rank adds a box to a
 * key it has: each save must write what a plain sck_save of the state writes then, not what the plan
 * kept from before the change would (at step 3 rank 0 holds the blob and writes it; before, rank 1
 * did; at step 5 the boxes overlap). */
typedef struct kept {
    sck_async *h[R];
    sck_state *st[R];
    const char *dir, *ref;
    int step;
    float a[ROWS * COLS], b[4];
    int rc[R];
} kept;

static int kept_rank(sck_comm *c, void *arg) {
    kept *K = arg;
    int r = sck_comm_rank(c), rc = SCK_OK;
    sck_state *st = K->st[r];
    if (!st) {
        st = K->st[r] = sck_state_new();
        int64_t sh[2] = {ROWS, COLS}, off[2] = {4 * r, 0}, sz[2] = {4, COLS};
        rc = st ? sck_state_add_box(st, "model.a", SCK_F32, 2, sh, off, sz, K->a + 4 * r * COLS) : SCK_ERR_NOMEM;
        if (!rc) rc = sck_state_add_blob(st, "extra.blob", r == 1 ? "from rank 1" : NULL, r == 1 ? 11 : 0);
        if (!rc) rc = sck_state_add_value(st, "extra.name", r == 0 ? sck_value_string("run 7") : NULL);
    }
    if (!rc && K->step == 2 && r == 2) {
        int64_t sh[1] = {4}, off[1] = {0};
        rc = sck_state_add_box(st, "model.b", SCK_F32, 1, sh, off, sh, K->b);
    }
    if (!rc && K->step == 5 && r == 2) {
        int64_t sh[1] = {4}, off[1] = {0}, sz[1] = {2};
        rc = sck_state_add_box(st, "model.b", SCK_F32, 1, sh, off, sz, K->b);
    }
    if (K->step == 3) rc = sck_comm_agree(c, rc ? rc : sck_load(c, K->ref, st, NULL));
    sck_save_opts so = {SCK_SAVE_NO_FSYNC, 0, {0}};
    if (!rc) rc = sck_save_async(K->h[r], c, K->dir, st, &so);
    if (!rc) rc = sck_wait(K->h[r]);
    K->rc[r] = rc; /* the async save's own outcome */
    if (!rc) rc = sck_save(c, K->ref, st, &so);
    return rc;
}

TEST(async_reuse_of_one_state_object_notices_keys_added_and_blobs_loaded) {
    kept K;
    memset(&K, 0, sizeof K);
    char dir[4096], ref[4096], m1[4200], m2[4200];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    snprintf(ref, sizeof ref, "%s/ref", th_tmpdir());
    snprintf(m1, sizeof m1, "%s/.metadata", dir);
    snprintf(m2, sizeof m2, "%s/.metadata", ref);
    K.dir = dir, K.ref = ref;
    for (int r = 0; r < R; r++) REQUIRE(K.h[r] = sck_async_new());
    /* steps: 0 first save, 1 unchanged, 2 rank 2 adds "model.b", 3 a load fills ranks 0 and 2's
     * blobs, 4 unchanged, 5 rank 2 adds a second box of "model.b" over the first */
    for (K.step = 0; K.step < 6; K.step++) {
        if (K.step != 3) { /* step 3's load brings step 2's data back */
            th_fill(K.a, sizeof K.a, 700 + (uint64_t)K.step);
            th_fill(K.b, sizeof K.b, 800 + (uint64_t)K.step);
        }
        int rc = sck_threads_run(R, kept_rank, &K);
        if (K.step == 5) {
            CHECK(rc == SCK_ERR_COVERAGE);
            for (int r = 0; r < R; r++) CHECK(K.rc[r] == SCK_ERR_COVERAGE);
            CHECK(strstr(sck_last_error(), "'model.b': shards overlap") != NULL);
            break;
        }
        REQUIRE_OK(rc);
        CHECK(file_equal(m1, m2));
        float a[ROWS * COLS], b[4];
        int64_t sh[2] = {ROWS, COLS}, z[2] = {0, 0}, bs[1] = {4}, bz[1] = {0};
        sck_state *st = sck_state_new();
        sck_state_add_box(st, "model.a", SCK_F32, 2, sh, z, sh, a);
        sck_state_add_blob(st, "extra.blob", NULL, 0);
        sck_state_add_value(st, "extra.name", NULL);
        if (K.step >= 2) sck_state_add_box(st, "model.b", SCK_F32, 1, bs, bz, bs, b);
        CHECK_OK(sck_load(NULL, dir, st, NULL));
        CHECK(!memcmp(a, K.a, sizeof a));
        CHECK(K.step < 2 || !memcmp(b, K.b, sizeof b));
        const void *blob;
        size_t n;
        CHECK(sck_state_blob(st, "extra.blob", &blob, &n) == SCK_OK && n == 11 && !memcmp(blob, "from rank 1", 11));
        const sck_value *v = sck_state_value(st, "extra.name");
        const char *name = v ? sck_value_get_string(v, &n) : NULL;
        CHECK(name && n == 5 && !memcmp(name, "run 7", 5));
        sck_state_free(st);
        for (int r = 0; r < R; r++) {
            const void *mine;
            int held = sck_state_blob(K.st[r], "extra.blob", &mine, &n) == SCK_OK;
            CHECK(K.step < 3 && r != 1 ? !held : held && n == 11 && !memcmp(mine, "from rank 1", 11));
        }
    }
    /* The kept plans named rank 1 as the blob's writer until step 3; now rank 0 has it. */
    sck_ckpt *ck;
    REQUIRE_OK(sck_ckpt_open(dir, &ck));
    sck_entry_info info;
    long i = sck_ckpt_find(ck, "extra.blob");
    REQUIRE(i >= 0);
    CHECK_OK(sck_ckpt_entry(ck, (size_t)i, &info));
    CHECK(strstr(info.file, "__0_0.distcp") != NULL);
    sck_ckpt_close(ck);
    for (int r = 0; r < R; r++) {
        sck_async_free(K.h[r]);
        sck_state_free(K.st[r]);
    }
}

/* The collectives a save takes, counted through the failing communicator with nothing to fail.  A
 * plain sck_save, and an async save where no rank keeps a plan, send each rank's local plan with its
 * first record: three collectives (records and plans, the items' places, the commit).  A save that
 * uses the kept plan again sends the records alone: three.  Where one rank's structure changed and
 * the others keep their plans, the plans follow in a collective of their own: four. */
typedef struct tally {
    sck_async *h[R];
    const char *dir;
    int step;
    float w[8], late[8];
    int calls[R], rc[R];
} tally;

static int tally_rank(sck_comm *c, void *arg) {
    tally *t = arg;
    int r = sck_comm_rank(c);
    failing k = {c, 0, 0};
    sck_comm *kc = sck_comm_create(&failing_ops, &k, r, sck_comm_size(c));
    sck_state *st = sck_state_new();
    int64_t sh[1] = {8}, off[1] = {0};
    int rc = kc && st ? sck_state_add_replicated(st, "w", SCK_F32, 1, sh, t->w) : SCK_ERR_NOMEM;
    if (!rc && t->step >= 3 && r == 2) rc = sck_state_add_box(st, "late", SCK_F32, 1, sh, off, sh, t->late);
    rc = sck_comm_agree(c, rc);
    sck_save_opts so = {SCK_SAVE_NO_FSYNC, 0, {0}};
    if (!rc && t->step == 0) {
        rc = sck_save(kc, t->dir, st, &so);
    } else if (!rc) {
        rc = sck_save_async(t->h[r], kc, t->dir, st, &so);
        if (!rc) rc = sck_wait(t->h[r]);
    }
    t->calls[r] = k.calls;
    t->rc[r] = rc;
    sck_state_free(st);
    sck_comm_free(kc);
    return rc;
}

TEST(saves_send_their_plans_with_the_first_record) {
    tally t;
    memset(&t, 0, sizeof t);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    t.dir = dir;
    for (int r = 0; r < R; r++) REQUIRE(t.h[r] = sck_async_new());
    /* step 0: sck_save; 1: the handles' first save; 2: the same again; 3: rank 2 adds a key; 4: again */
    static const int want[] = {3, 3, 3, 4, 3};
    for (t.step = 0; t.step < 5; t.step++) {
        th_fill(t.w, sizeof t.w, 700 + (uint64_t)t.step);
        th_fill(t.late, sizeof t.late, 800 + (uint64_t)t.step);
        CHECK_OK(sck_threads_run(R, tally_rank, &t));
        for (int r = 0; r < R; r++) CHECK(t.rc[r] == SCK_OK && t.calls[r] == want[t.step]);
        float w[8], late[8];
        sck_state *st = sck_state_new();
        int64_t sh[1] = {8};
        sck_state_add_replicated(st, "w", SCK_F32, 1, sh, w);
        if (t.step >= 3) sck_state_add_replicated(st, "late", SCK_F32, 1, sh, late);
        CHECK_OK(sck_load(NULL, dir, st, NULL));
        CHECK(!memcmp(w, t.w, sizeof w));
        CHECK(t.step < 3 || !memcmp(late, t.late, sizeof late));
        sck_state_free(st);
    }
    for (int r = 0; r < R; r++) sck_async_free(t.h[r]);
}
