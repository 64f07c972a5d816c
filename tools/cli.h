/* cli.h - the shardckpt subcommands and what they share.  Each cmd_* gets argv from the command
 * name on and returns the process exit status (0 ok, 1 error or "different", 2 usage). */
#ifndef SCK_CLI_H
#define SCK_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The CLI is built from the public API only: shardckpt.h and the advanced tier (docs/DESIGN.md). */
#define SCK_ADVANCED_API
#include "shardckpt.h"
#include "shardckpt_advanced.h"

int cmd_inspect(int argc, char **argv);
int cmd_diff(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_verify(int argc, char **argv);   /* tools/cmd_verify.c */

/* Prints "shardckpt: error: <sck_last_error()>" to stderr and returns 1. */
int cli_fail(void);
/* Prints "shardckpt: <cmd>: <message>" and "Try 'shardckpt <cmd> --help'." to stderr; returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* sck_err with ": <strerror(errnum)>" after the message (what the library's I/O errors look like). */
int cli_err_errno(int status, int errnum, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Puts "<prefix>: " before the last error's message and returns status. */
int cli_err_wrap(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Writes `s` as a JSON string (escaped as sck_value_to_json escapes it).  Returns 0, or SCK_ERR_NOMEM. */
int cli_json_string(FILE *f, const char *s);
/* 1 if any argument is --help or -h. */
int cli_wants_help(int argc, char **argv);

/* "1.5 KiB", "12 B", "3.0 GiB". */
void cli_human(uint64_t n, char *buf, size_t cap);
/* "[8, 6]" ("[]" for a scalar). */
void cli_shape(int ndim, const int64_t *shape, char *buf, size_t cap);

/* ---- a checkpoint in any format, as one sorted list of entries ---- */

typedef enum cli_kind { CLI_TENSOR, CLI_BYTES, CLI_VALUE } cli_kind;

typedef struct cli_entry {
    const char *key;
    cli_kind kind;             /* CLI_BYTES: a DCP byte item; CLI_VALUE: a safetensors __metadata__ value */
    size_t index;              /* tensors and byte items: index in the sck_ckpt */
    const sck_value *value;    /* CLI_VALUE (borrowed) */
    sck_entry_info info;       /* tensors and byte items */
} cli_entry;

typedef struct cli_src {
    const char *path;
    const char *format;        /* "dcp", "safetensors" or "hf" */
    sck_ckpt *ck;
    sck_value *values;         /* __metadata__ values (safetensors, hf), else NULL */
    cli_entry *e;              /* sorted by key (strcmp) */
    size_t n;
    size_t nfiles;             /* distinct data files */
} cli_src;

/* Opens `path` (DCP directory, .safetensors file or HF directory).  Errors as sck_ckpt_open. */
int cli_src_open(cli_src *s, const char *path);
void cli_src_close(cli_src *s);
/* The value of a non-tensor entry (a DCP byte item that is not a pickled value becomes a bytes
 * value).  *out is owned by the caller.  Errors as sck_ckpt_read_bytes. */
int cli_src_value(cli_src *s, const cli_entry *e, sck_value **out);

/* A value for people.  Its Python type ("int", "str", "list", "tuple", "bytes", "set" ... for a
 * pickled object, what it is without running it) into type; into text, when the value is short (its
 * JSON at most CLI_INLINE_MAX characters; bytes at most 16), that JSON; else a summary with its size
 * ("(1000 items, 8.1 KiB as JSON)"; a pickled object: "set (raw pickle, 120 B)").  Returns 1 if text is the value itself, 0 if a summary. */
#define CLI_INLINE_MAX 60
int cli_value_text(const sck_value *v, char *type, size_t tcap, char *text, size_t cap);

#endif
