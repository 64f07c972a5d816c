/* shardckpt - command-line tool for checkpoints in PyTorch DCP, safetensors and Hugging Face formats.
 *   shardckpt inspect PATH [--json | --flat] [--depth N]
 *   shardckpt diff A B [--atol X] [-q | -v]
 *   shardckpt convert SRC DST --to dcp|safetensors|hf [--ranks N] [--max-shard-size SIZE]
 *   shardckpt verify PATH
 * Exit status: 0 on success, 1 on error (one line on stderr) or, for diff, a difference, 2 on bad
 * usage.  Each command's --help and docs/CLI.md say more.  A new command is one line in COMMANDS. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "shardckpt.h"

typedef struct command {
    const char *name, *args, *summary;
    int (*run)(int argc, char **argv);
} command;

static const command COMMANDS[] = {
    {"inspect", "PATH", "what a checkpoint holds: a tree of keys, dtypes, shapes, sizes (--json)", cmd_inspect},
    {"diff", "A B", "entries added, removed and changed between two checkpoints", cmd_diff},
    {"convert", "SRC DST --to FMT", "convert between DCP, safetensors and Hugging Face sharded", cmd_convert},
    {"verify", "PATH", "read every chunk, check coverage and checksums (CRC-32C, or zip CRC-32)", cmd_verify},
};

static void usage(FILE *f) {
    fprintf(f, "usage: shardckpt <command> [args]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++) {
        char head[64];
        snprintf(head, sizeof head, "%s %s", COMMANDS[i].name, COMMANDS[i].args);
        fprintf(f, "  %-26s %s\n", head, COMMANDS[i].summary);
    }
    fprintf(f, "\nPATH, A, B and SRC may be a DCP directory, a .safetensors file or a Hugging Face directory.\n"
               "Run 'shardckpt <command> --help' for details, or see docs/CLI.md.\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("shardckpt %s\n", sck_version());
        return 0;
    }
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) return COMMANDS[i].run(argc - 1, argv + 1);
    fprintf(stderr, "shardckpt: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
