/* fuzz_meta_wire.c - libFuzzer target for the checkpoint model rank 0 broadcasts on a collective load
 * (src/format/meta_wire.h): any input must decode or fail cleanly, and what decodes must encode back to the
 * very same bytes (the encoding is canonical, so the decoder accepted nothing it would not write).
 * An input that is not model bytes is taken as a `.metadata` pickle, decoded and sent through the
 * model bytes the same way.  Seeds (fuzz/corpus/meta_wire) are the models of the fuzz/corpus/pickle
 * `.metadata` files.
 * Build: make fuzz (see the Makefile); run: build/fuzz/fuzz_meta_wire -max_total_time=60 fuzz/corpus/meta_wire */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/dcp_meta.h"
#include "format/meta_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void round_trip(const uint8_t *data, size_t size) {
    ck_meta m;
    if (meta_wire_decode(data, size, "fuzz", &m) != SCK_OK) return;
    sck_buf b;
    sck_buf_init(&b);
    if (meta_wire_encode(&m, &b) == SCK_OK && (b.len != size || memcmp(b.data, data, size) != 0)) {
        fprintf(stderr, "decoded model bytes re-encode differently (%zu -> %zu bytes)\n", size, b.len);
        abort();
    }
    sck_buf_free(&b);
    ck_meta_free(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size >= 5 && !memcmp(data, "SCKMW", 5)) {
        round_trip(data, size);
        return 0;
    }
    ck_meta m;
    if (dcp_meta_decode(data, size, "fuzz", &m) != SCK_OK) return 0;
    sck_buf b;
    sck_buf_init(&b);
    if (meta_wire_encode(&m, &b) == SCK_OK) round_trip(b.data, b.len);
    sck_buf_free(&b);
    ck_meta_free(&m);
    return 0;
}
