/* test_util_big.c - the large-array allocator (sck_big_*), the merge sort that uses it (sck_sort), and
 * thread ranks' gather (comm_threads_agree_gather): contents, order, stability, failures agreed. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "harness.h"
#include "base/util.h"

/* Sizes around the mapping threshold (256 KiB) and the 2 MiB page, grown and shrunk through
 * sck_big_realloc: what was written stays, whichever way the block is held. */
TEST(big_alloc_keeps_contents_through_every_growth) {
    static const size_t sizes[] = {0, 1, 100, 4096, (256u << 10) - 65, 256u << 10, (2u << 20) - 64, 2u << 20, (5u << 20) + 3, 1000, 9u << 20, 17};
    uint8_t *p = NULL, *ref = malloc(9u << 20);
    REQUIRE(ref != NULL);
    th_fill(ref, 9u << 20, 7);
    size_t have = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        size_t n = sizes[i];
        uint8_t *q = sck_big_realloc(p, n);
        REQUIRE(q != NULL);
        p = q;
        size_t keep = have < n ? have : n;
        CHECK(memcmp(p, ref, keep) == 0);
        CHECK(((uintptr_t)p & 15) == 0);
        memcpy(p, ref, n); /* every byte writable */
        have = n;
    }
    sck_big_free(p);
    sck_big_free(NULL);
    /* Blocks freed and taken again (kept mappings) are whole and independent. */
    uint8_t *a[6];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 6; i++) {
            size_t n = ((size_t)(i + 1) << 20) + (size_t)round;
            REQUIRE((a[i] = sck_big_alloc(n)) != NULL);
            memset(a[i], i + 1, n);
        }
        for (int i = 0; i < 6; i++) {
            size_t n = ((size_t)(i + 1) << 20) + (size_t)round;
            CHECK(a[i][0] == i + 1 && a[i][n / 2] == i + 1 && a[i][n - 1] == i + 1);
        }
        for (int i = 0; i < 6; i++) sck_big_free(a[i]);
    }
    free(ref);
}

typedef struct rec {
    uint32_t key;
    uint32_t seq;     /* position before sorting: stability */
    uint8_t pad[40];  /* an element of read_op's size class */
} rec;

static int cmp_rec(const void *a, const void *b) {
    const rec *x = a, *y = b;
    return x->key < y->key ? -1 : x->key > y->key;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Random, few distinct keys (ties), sorted, reversed and nearly sorted input of many lengths: the
 * result is sorted, a permutation of the input, and equal keys keep their order. */
/* A byte buffer appended to a few bytes at a time across the 1 MiB mark: from there its blocks are
 * 2 MiB-aligned whole huge pages (advised before the bytes move in), and nothing appended is lost. */
TEST(buf_grows_into_huge_page_blocks_keeping_its_bytes) {
    size_t total = (5u << 20) + 12345;
    uint8_t *ref = malloc(total);
    REQUIRE(ref != NULL);
    th_fill(ref, total, 9);
    sck_buf b;
    sck_buf_init(&b);
    for (size_t off = 0; off < total;) {
        size_t k = 1 + off % 777;
        if (k > total - off) k = total - off;
        REQUIRE_OK(sck_buf_append(&b, ref + off, k));
        off += k;
        if (b.cap >= (1u << 20)) CHECK(b.cap % (2u << 20) == 0 && ((uintptr_t)b.data & ((2u << 20) - 1)) == 0);
        else CHECK(b.cap >= off);
    }
    CHECK(b.len == total && b.cap >= total && b.cap < 2 * total + (2u << 20));
    CHECK(memcmp(b.data, ref, total) == 0);
    sck_buf_free(&b);
    CHECK(b.data == NULL && b.len == 0 && b.cap == 0);
    free(ref);
}

TEST(sort_orders_any_input_stably) {
    static const size_t lens[] = {0, 1, 2, 7, 8, 9, 16, 17, 100, 1023, 4096, 50001};
    uint64_t x = 88172645463325252ull;
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
        size_t n = lens[li];
        rec *v = malloc((n ? n : 1) * sizeof *v);
        REQUIRE(v != NULL);
        /* random, few keys, ascending, descending, nearly ascending; then a few ascending runs (sorted by
         * merging the runs themselves): a rotation, five runs with equal keys across them (stability),
         * and 33 runs (one more than that path takes) */
        for (int shape = 0; shape < 8; shape++) {
            uint64_t sum = 0;
            for (size_t i = 0; i < n; i++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                uint32_t k = shape == 0 ? (uint32_t)x : shape == 1 ? (uint32_t)(x % 5) : shape == 2 ? (uint32_t)i
                           : shape == 3 ? (uint32_t)(n - i) : shape == 4 ? (uint32_t)(i ^ (x % 4 == 0))
                           : shape == 5 ? (uint32_t)((i + n / 3) % (n ? n : 1)) : shape == 6 ? (uint32_t)(i % (n / 5 + 1))
                                                                                    : (uint32_t)(i % (n / 33 + 1));
                memset(&v[i], 0, sizeof v[i]);
                v[i].key = k, v[i].seq = (uint32_t)i;
                sum += k;
            }
            sck_sort(v, n, sizeof *v, cmp_rec);
            int ok = 1;
            for (size_t i = 1; i < n; i++)
                if (v[i - 1].key > v[i].key || (v[i - 1].key == v[i].key && v[i - 1].seq > v[i].seq)) ok = 0;
            for (size_t i = 0; i < n; i++) sum -= v[i].key;
            CHECK(ok);
            CHECK(sum == 0);
        }
        free(v);
    }
    /* Small elements, against qsort. */
    size_t n = 30000;
    uint64_t *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    REQUIRE(a && b);
    for (size_t i = 0; i < n; i++) x ^= x << 13, x ^= x >> 7, x ^= x << 17, a[i] = b[i] = x % 1000;
    sck_sort(a, n, sizeof *a, cmp_u64);
    qsort(b, n, sizeof *b, cmp_u64);
    CHECK(memcmp(a, b, n * sizeof *a) == 0);
    free(a);
    free(b);
}

typedef struct gjob {
    int fail_rank;       /* -1: none */
    int rc[4];
    char msg[4][256];
    int ok[4];
} gjob;

/* Each rank gives (rank + 1) * 100 000 bytes of its own pattern; every rank gets all of them in rank
 * order, or, when one rank fails, that rank's status and message. */
static int gather_rank(sck_comm *c, void *arg) {
    gjob *j = arg;
    int r = sck_comm_rank(c), n = sck_comm_size(c);
    size_t len = (size_t)(r + 1) * 100000;
    uint8_t *mine = malloc(len);
    if (!mine) return SCK_ERR_NOMEM;
    memset(mine, 'a' + r, len);
    int local = r == j->fail_rank ? sck_err(SCK_ERR_IO, "disk %d on fire", r) : SCK_OK;
    void *all = NULL;
    size_t counts[4] = {0};
    j->rc[r] = comm_agree_gather(c, local, mine, len, &all, counts);
    snprintf(j->msg[r], sizeof j->msg[r], "%s", sck_last_error());
    int ok = 1;
    if (!j->rc[r]) {
        const uint8_t *p = all;
        for (int q = 0; q < n; q++) {
            ok &= counts[q] == (size_t)(q + 1) * 100000;
            for (size_t i = 0; ok && i < counts[q]; i += 997) ok &= p[i] == 'a' + q;
            ok &= p[counts[q] - 1] == 'a' + q;
            p += counts[q];
        }
    }
    j->ok[r] = ok;
    comm_gather_free(c, all);
    free(mine);
    /* a plain agreement right after: the slots were left ready for it */
    return sck_comm_agree(c, SCK_OK);
}

TEST(threads_gather_every_rank_or_the_first_failure) {
    for (int fail = -1; fail < 4; fail++) {
        gjob j;
        memset(&j, 0, sizeof j);
        j.fail_rank = fail;
        REQUIRE_OK(sck_threads_run(4, gather_rank, &j));
        for (int r = 0; r < 4; r++) {
            if (fail < 0) {
                CHECK(j.rc[r] == SCK_OK && j.ok[r]);
            } else {
                char want[64];
                snprintf(want, sizeof want, "rank %d: disk %d on fire", fail, fail);
                CHECK(j.rc[r] == SCK_ERR_IO);
                CHECK(strstr(j.msg[r], want) == j.msg[r]);
            }
        }
    }
}

/* Gathers back to back, a rank keeping each round's bytes until after the next round: rounds do not
 * trample each other (the next collective refills the slots as soon as its ranks arrive), the ranks
 * of a round share one block, copied once, freed by the last to let go of it (ASan: no leak, no use
 * after free), and a round where one rank only agrees (it failed: no `all`) fails everywhere. */
#define BB_RANKS 6
#define BB_ROUNDS 200

typedef struct bbjob {
    const void *seen[BB_ROUNDS][BB_RANKS];
    int bad[BB_RANKS];
} bbjob;

static int back_to_back_rank(sck_comm *c, void *arg) {
    bbjob *j = arg;
    int r = sck_comm_rank(c);
    uint8_t mine[5000];
    void *prev = NULL;
    for (int k = 0; k < BB_ROUNDS; k++) {
        size_t len = (size_t)((r + k) % 5) * 1000;
        memset(mine, (r * 31 + k) & 0xff, len);
        void *all = NULL;
        size_t counts[BB_RANKS];
        int rc;
        if (k % 50 == 49 && r == k % BB_RANKS) rc = comm_agree(c, sck_err(SCK_ERR_IO, "round %d failed", k));
        else rc = comm_agree_gather(c, SCK_OK, mine, len, &all, counts);
        if (k % 50 == 49) {
            j->bad[r] += rc != SCK_ERR_IO || !strstr(sck_last_error(), "round");
            continue;
        }
        j->bad[r] += rc != SCK_OK;
        const uint8_t *p = all;
        for (int q = 0; !rc && q < BB_RANKS; p += counts[q], q++) {
            j->bad[r] += counts[q] != (size_t)((q + k) % 5) * 1000;
            for (size_t i = 0; i < counts[q]; i += 333) j->bad[r] += p[i] != ((q * 31 + k) & 0xff);
        }
        j->seen[k][r] = all;
        comm_gather_free(c, prev); /* the last round's, held across this one */
        prev = all;
    }
    comm_gather_free(c, prev);
    return SCK_OK;
}

TEST(threads_gathers_back_to_back_share_one_block) {
    static bbjob j;
    memset(&j, 0, sizeof j);
    REQUIRE_OK(sck_threads_run(BB_RANKS, back_to_back_rank, &j));
    for (int r = 0; r < BB_RANKS; r++) CHECK(j.bad[r] == 0);
    for (int k = 0; k < BB_ROUNDS; k++)
        for (int r = 1; r < BB_RANKS; r++) CHECK(j.seen[k][r] == j.seen[k][0]);
}
