/* test_shared_model.c - one decoded model read by several sck_ckpt (the thread-ranks of one load):
 * every close order, and references dropped for ranks that never got the model, leave nothing behind
 * and nothing used after it is freed (the ASan run checks both). */
#include <stdlib.h>
#include <string.h>

#include "load/ckpt.h"
#include "ckpt_fixture.h"
#include "harness.h"

/* Reads all of entry "model.w" (2-d f32) through ck and compares with what `ref` read. */
static int same_read(sck_ckpt *ck, const float *ref, size_t n) {
    long i = sck_ckpt_find(ck, "model.w");
    sck_entry_info info;
    if (i < 0 || sck_ckpt_entry(ck, (size_t)i, &info) || info.ndim != 2) return 0;
    int64_t off[2] = {0, 0};
    float *got = malloc(n * sizeof *got);
    int ok = got && sck_ckpt_read_box(ck, (size_t)i, off, info.shape, got) == SCK_OK && !memcmp(got, ref, n * sizeof *got);
    free(got);
    return ok;
}

TEST(shared_model_survives_every_close_order) {
    const char *dir = th_tmpdir();
    REQUIRE_OK(fx_save(dir, 2, 0, 0, NULL, NULL));
    sck_ckpt *ck;
    REQUIRE_OK(sck_ckpt_open(dir, &ck));
    long i = sck_ckpt_find(ck, "model.w");
    sck_entry_info info;
    REQUIRE(i >= 0 && sck_ckpt_entry(ck, (size_t)i, &info) == SCK_OK && info.ndim == 2);
    size_t n = (size_t)(info.shape[0] * info.shape[1]);
    float *ref = malloc(n * sizeof *ref);
    REQUIRE(ref);
    int64_t off[2] = {0, 0};
    REQUIRE_OK(sck_ckpt_read_box(ck, (size_t)i, off, info.shape, ref));
    sck_ckpt_close(ck);

    for (int order = 0; order < 3; order++) { /* which of the three is closed first, second */
        REQUIRE_OK(sck_ckpt_open(dir, &ck));
        ck_shared *s = NULL;
        REQUIRE_OK(ckpt_share(ck, 2, &s));
        sck_ckpt *a = NULL, *b = NULL;
        REQUIRE_OK(ckpt_from_shared(dir, s, &a));
        REQUIRE_OK(ckpt_from_shared(dir, s, &b));
        CHECK(a->m.e == ck->m.e && b->m.e == ck->m.e); /* one model, not three */
        sck_ckpt *all[3] = {ck, a, b};
        for (int k = 0; k < 3; k++) {
            sck_ckpt *c = all[(order + k) % 3];
            CHECK(same_read(c, ref, n));
            sck_ckpt_close(c);
            for (int j = k + 1; j < 3; j++) CHECK(same_read(all[(order + j) % 3], ref, n));
        }
    }

    /* Four ranks, two of which never got the model: the holder drops their references. */
    REQUIRE_OK(sck_ckpt_open(dir, &ck));
    ck_shared *s = NULL;
    REQUIRE_OK(ckpt_share(ck, 3, &s));
    sck_ckpt *a = NULL;
    REQUIRE_OK(ckpt_from_shared(dir, s, &a));
    ckpt_shared_release(s, 2);
    sck_ckpt_close(ck);
    CHECK(same_read(a, ref, n));
    sck_ckpt_close(a);
    free(ref);
}

/* A thread-rank load shares rank 0's model; each rank still reads its own, different box. */
TEST(shared_model_thread_ranks_load_resharded) {
    const char *dir = th_tmpdir();
    REQUIRE_OK(fx_save(dir, 2, 1, 0, NULL, NULL));
    for (int n = 2; n <= 5; n++) CHECK_OK(fx_load_resharded(dir, n, 0));
    CHECK(fx_load_version(dir, 0) == 1);
}
