/* shardckpt - command-line tool: inspect and convert checkpoints.
 *   shardckpt inspect PATH
 *   shardckpt convert SRC DST --to dcp [--ranks N]
 *   shardckpt convert SRC DST --to safetensors
 * Exit status: 0 on success, 1 on error (one line on stderr), 2 on bad usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "shardckpt.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: shardckpt <command> [args]\n"
            "\n"
            "commands:\n"
            "  inspect PATH                         list every entry of a checkpoint (DCP dir, .safetensors, HF dir)\n"
            "  convert SRC DST --to dcp [--ranks N] write SRC as a DCP directory saved by N ranks (default 1),\n"
            "                                       each tensor split along dim 0\n"
            "  convert SRC DST --to safetensors     write SRC as one consolidated safetensors file\n"
            "  verify PATH                          read every chunk, check coverage and CRC-32C checksums\n"
            "\n"
            "Run 'shardckpt <command> --help' for details.\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("shardckpt %d.%d.%d\n", SCK_VERSION_MAJOR, SCK_VERSION_MINOR, SCK_VERSION_PATCH);
        return 0;
    }
    if (!strcmp(argv[1], "inspect")) return cmd_inspect(argc - 1, argv + 1);
    if (!strcmp(argv[1], "convert")) return cmd_convert(argc - 1, argv + 1);
    if (!strcmp(argv[1], "verify")) return cmd_verify(argc - 1, argv + 1);
    fprintf(stderr, "shardckpt: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
