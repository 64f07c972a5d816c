/* cmd_inspect.c - `shardckpt inspect PATH`: one line per entry. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "shardckpt.h"

int cli_fail(void) {
    fprintf(stderr, "shardckpt: error: %s\n", sck_last_error());
    return 1;
}

static void human(uint64_t n, char *buf, size_t cap) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    int i = 0;
    while (v >= 1024 && i < 4) {
        v /= 1024;
        i++;
    }
    if (i == 0) snprintf(buf, cap, "%" PRIu64 " B", n);
    else snprintf(buf, cap, "%.1f %s", v, u[i]);
}

int cmd_inspect(int argc, char **argv) {
    if (argc != 2 || !strcmp(argv[1], "--help")) {
        fprintf(argc == 2 ? stdout : stderr,
                "usage: shardckpt inspect PATH\n"
                "Lists every entry: key, kind, dtype, global shape, number of chunks, bytes, data file.\n");
        return argc == 2 ? 0 : 2;
    }
    sck_ckpt *ck;
    if (sck_ckpt_open(argv[1], &ck)) return cli_fail();
    size_t n = sck_ckpt_count(ck);
    uint64_t total = 0;
    printf("%-48s %-6s %-9s %-20s %6s %12s  %s\n", "KEY", "KIND", "DTYPE", "SHAPE", "CHUNKS", "BYTES", "FILE");
    for (size_t i = 0; i < n; i++) {
        sck_entry_info e;
        sck_ckpt_entry(ck, i, &e);
        char shape[256] = "-";
        if (e.kind == SCK_ENTRY_TENSOR) {
            size_t k = (size_t)snprintf(shape, sizeof shape, "[");
            for (int d = 0; d < e.ndim && k < sizeof shape; d++)
                k += (size_t)snprintf(shape + k, sizeof shape - k, d ? ",%" PRId64 : "%" PRId64, e.shape[d]);
            if (k < sizeof shape) snprintf(shape + k, sizeof shape - k, "]");
        }
        char bytes[32];
        human(e.nbytes, bytes, sizeof bytes);
        total += e.nbytes;
        printf("%-48s %-6s %-9s %-20s %6zu %12s  %s%s\n", e.key, e.kind == SCK_ENTRY_TENSOR ? "tensor" : "bytes",
               e.kind == SCK_ENTRY_TENSOR ? sck_dtype_name(e.dtype) : "-", shape, e.nchunks, bytes, e.file,
               e.nchunks > 1 ? " ..." : "");
    }
    char t[32];
    human(total, t, sizeof t);
    printf("%zu entries, %s\n", n, t);
    sck_ckpt_close(ck);
    return 0;
}
