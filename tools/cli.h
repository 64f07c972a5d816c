/* cli.h - the shardckpt subcommands; each returns the process exit status. */
#ifndef SCK_CLI_H
#define SCK_CLI_H

int cmd_inspect(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_verify(int argc, char **argv);

/* Prints "shardckpt: error: <sck_last_error()>" and returns 1. */
int cli_fail(void);

#endif
