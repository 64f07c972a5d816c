/* cmd_verify.c - `shardckpt verify PATH`: reads every item in full and checks decoding, coverage and
 * checksums; exits 1 naming the first bad tensor and file. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "shardckpt.h"

int cmd_verify(int argc, char **argv) {
    if (argc != 2 || !strcmp(argv[1], "--help")) {
        fprintf(argc == 2 ? stdout : stderr,
                "usage: shardckpt verify PATH\n"
                "Reads every chunk of the checkpoint in full and checks that it decodes and matches the metadata's\n"
                "dtype and shape, that the chunks of each tensor cover it exactly once, and every recorded checksum:\n"
                "the CRC-32C shardckpt stores for each chunk, or, in a torch-written checkpoint (which has none),\n"
                "the zip CRC-32 of every record in each item's archive.\n"
                "Exits 0 if all is well, 1 naming the first bad tensor and file.\n");
        return argc == 2 ? 0 : 2;
    }
    sck_ckpt *ck;
    if (sck_ckpt_open(argv[1], &ck)) return cli_fail();
    sck_verify_stats st;
    int rc = sck_ckpt_verify(ck, &st);
    sck_ckpt_close(ck);
    if (rc) return cli_fail();
    printf("ok: %" PRIu64 " entries, %" PRIu64 " chunks (%" PRIu64 " with checksums), %" PRIu64 " bytes read\n", st.entries,
           st.chunks, st.checksummed, st.bytes);
    return 0;
}
