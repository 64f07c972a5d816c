/* fuzz_safetensors.c - libFuzzer target: st_parse_header over arbitrary bytes taken as a whole file.
 * Build: make fuzz (see the Makefile); run: build/fuzz/fuzz_safetensors -max_total_time=60 -max_len=4096
 *   fuzz/corpus/safetensors
 * Successful parses are rebuilt with st_build_header and parsed again, which must give the same tensors. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Any disagreement between parse -> build -> parse is a bug: crash so the fuzzer keeps the input. */
static void check_round_trip(const st_header *h) {
    sck_buf b;
    sck_buf_init(&b);
    st_tensor *copy = malloc((h->n ? h->n : 1) * sizeof *copy);
    if (!copy) return;
    if (h->n) memcpy(copy, h->t, h->n * sizeof *copy); /* h->t is NULL for a values-only header */
    if (st_build_header(copy, h->n, h->metadata, &b) == SCK_OK) {
        uint64_t data_len = h->n ? h->t[h->n - 1].end : 0;
        if (sck_buf_zero(&b, (size_t)data_len) == SCK_OK) {
            st_header h2;
            if (st_parse_header(b.data, b.len, b.len, "rebuilt", &h2, NULL) != SCK_OK || h2.n != h->n) __builtin_trap();
            for (size_t i = 0; i < h->n; i++)
                if (strcmp(h2.t[i].name, h->t[i].name) || h2.t[i].begin != h->t[i].begin ||
                    h2.t[i].end != h->t[i].end || h2.t[i].dtype != h->t[i].dtype)
                    __builtin_trap();
            if ((h->metadata != NULL) != (h2.metadata != NULL) || (h->metadata && !sck_value_equal(h->metadata, h2.metadata)))
                __builtin_trap();
            st_header_free(&h2);
        }
    }
    free(copy);
    sck_buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_header h;
    uint64_t need = 0;
    int rc = st_parse_header(data, size, size, "fuzz", &h, &need);
    if (rc == SCK_OK) {
        check_round_trip(&h);
        st_header_free(&h);
    } else if (rc == 1) {
        __builtin_trap();  /* the whole file was given: asking for more is wrong */
    }
    return 0;
}
