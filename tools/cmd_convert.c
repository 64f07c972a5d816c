/* cmd_convert.c - `shardckpt convert SRC DST --to dcp|fabric|safetensors|hf [--ranks N] [--max-shard-size S]`.
 *
 * Two engines:
 *   - ranks: N thread-ranks each load a dim-0 slice of every tensor (in batches, for progress) and
 *     save collectively with sck_save (DCP) or sck_save_full (safetensors, HF).  Holds the model.
 *   - stream (safetensors / HF without --ranks): one tensor block at a time, read from SRC and
 *     written in place into the output laid out by sck_st_writer; peak memory one 64 MiB block. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "progress.h"

#define STREAM_BLOCK (64u << 20)
#define LOAD_BATCH (256u << 20)   /* tensor bytes per sck_load call in the ranks engine */

static const char *const USAGE =
    "usage: shardckpt convert SRC DST [--to dcp|fabric|safetensors|hf] [--ranks N] [--max-shard-size SIZE]\n"
    "                                 [--include GLOB]... [--exclude GLOB]... [--strip-prefix P]\n"
    "                                 [--force] [--no-fsync]\n"
    "\n"
    "Converts a checkpoint between PyTorch DCP, safetensors and the Hugging Face sharded layout.\n"
    "SRC is a DCP directory, a .safetensors file or a Hugging Face directory (with\n"
    "model.safetensors.index.json).\n"
    "\n"
    "  --to dcp          DST is a DCP directory saved as N ranks (threads) would save it, every\n"
    "                    tensor split along dim 0 (ceil(rows/N) rows per rank).  Default N = 1.\n"
    "                    Every entry keeps its path in the nested state dict (planner_data).\n"
    "  --to fabric       the same, in Lightning Fabric's layout: the values at the top of the state\n"
    "                    (keys without a dot, e.g. step, hparams) go to DST/meta.pt.\n"
    "  --to safetensors  DST is one .safetensors file holding every tensor in full.\n"
    "  --to hf           DST is a directory of model-0000K-of-0000N.safetensors files and\n"
    "                    model.safetensors.index.json, as transformers' save_pretrained writes.\n"
    "                    (--to may be left out when DST ends in .safetensors.)\n"
    "  --ranks N         safetensors/hf: write with N ranks in parallel (sck_save_full); holds the\n"
    "                    whole model in memory.  Without it, tensors are streamed one 64 MiB block\n"
    "                    at a time.  dcp: the number of saving ranks.\n"
    "  --max-shard-size SIZE   hf: most tensor bytes per file, e.g. 5GB (default), 500MB, 2GiB.\n"
    "  --include GLOB    safetensors/hf: keep only the keys that match GLOB (fnmatch on the full key,\n"
    "                    e.g. 'model.*'; repeatable: a key matching any is kept).  Default: all keys.\n"
    "  --exclude GLOB    safetensors/hf: drop the kept keys that match GLOB (repeatable; applied\n"
    "                    after --include).\n"
    "  --strip-prefix P  safetensors/hf: remove a leading P from every kept key that has it (keys\n"
    "                    without it keep their name), e.g. --strip-prefix model. turns Fabric's\n"
    "                    model.layer.weight into layer.weight for from_pretrained.  Two keys that\n"
    "                    end up with the same name are an error naming both.\n"
    "  --force           replace an existing DST of the same kind (a DCP directory, a .safetensors\n"
    "                    file, an HF directory).  Without it an existing DST is an error and is left\n"
    "                    untouched.  The new output replaces the old one atomically (DCP: the save's\n"
    "                    commit; safetensors/hf: written under temporary names, then renamed).\n"
    "  --no-fsync        skip fsync (faster; not crash-safe)\n"
    "\n"
    "Non-tensor entries (DCP byte items, values) go into safetensors __metadata__ under their own key:\n"
    "strings as they are, other values as JSON text; __metadata__ strings of SRC are kept byte for byte\n"
    "in every conversion, and converting back restores every value.  A progress bar is drawn on\n"
    "stderr when it is a terminal and the work takes more than a second.\n"
    "\n"
    "Exit status: 0 ok, 1 error (one line on stderr), 2 bad usage.\n";

enum { TO_DCP, TO_FABRIC, TO_ST, TO_HF };

typedef struct conv {
    cli_src src;
    const char *dst;
    int to, ranks, do_fsync;
    const char **name;    /* entry i's name in DST, or NULL when --include/--exclude drop it */
    uint64_t max_shard;
    sck_value *values;    /* every non-tensor entry of SRC, key -> value */
    uint64_t tensor_bytes;
    progress *pg;
} conv;

/* Every non-tensor entry of SRC as a value, read once. */
static int read_values(conv *c) {
    if (!(c->values = sck_value_dict())) return sck_err(SCK_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < c->src.n; i++) {
        const cli_entry *e = &c->src.e[i];
        if (!c->name[i]) continue;
        if (e->kind == CLI_TENSOR) {
            if (e->info.dtype >= SCK_DTYPE_COUNT)
                return sck_err(SCK_ERR_UNSUPPORTED, "%s: '%s' has a dtype shardckpt does not support", c->src.path, e->key);
            c->tensor_bytes += e->info.nbytes;
            continue;
        }
        sck_value *v;
        int rc = cli_src_value(&c->src, e, &v);
        if (!rc) rc = sck_value_dict_set(c->values, c->name[i], v) ? sck_err(SCK_ERR_NOMEM, "out of memory") : SCK_OK;
        if (rc) return rc;
    }
    return SCK_OK;
}

/* ---- the ranks engine ---- */

typedef struct rank_box {
    int ndim;
    int64_t off[SCK_MAX_DIMS];
    int64_t size[SCK_MAX_DIMS];
} rank_box;

typedef struct rank_buf {
    void *data;
    rank_box box;
} rank_buf;

static uint64_t box_numel(const rank_box *b) {
    uint64_t n = 1;
    for (int d = 0; d < b->ndim; d++) n *= (uint64_t)b->size[d];
    return n;
}

/* Adds rank buffer rb of entry e to st under `key` (its name in SRC to load, in DST to save). */
static int add_tensor(sck_state *st, const char *key, const cli_entry *e, const rank_buf *rb) {
    const sck_entry_info *in = &e->info;
    if (in->ndim == 0) return sck_state_add_replicated(st, key, in->dtype, 0, in->shape, rb->data);
    return sck_state_add_box(st, key, in->dtype, in->ndim, in->shape, rb->box.off, rb->box.size, rb->data);
}

static int conv_rank(sck_comm *comm, void *arg) {
    conv *c = arg;
    int rank = sck_comm_rank(comm), size = sck_comm_size(comm);
    size_t n = c->src.n;
    sck_state *st = sck_state_new();
    rank_buf *rb = calloc(n ? n : 1, sizeof *rb);
    int rc = st && rb ? SCK_OK : sck_err(SCK_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n && !rc; i++) {
        const cli_entry *e = &c->src.e[i];
        if (e->kind != CLI_TENSOR || !c->name[i]) continue;
        /* torch.chunk along dim 0: ceil(d0 / size) rows per rank; trailing ranks may get none */
        rank_box *b = &rb[i].box;
        b->ndim = e->info.ndim;
        memcpy(b->size, e->info.shape, sizeof b->size);
        if (b->ndim > 0) {
            int64_t d0 = e->info.shape[0], per = (d0 + size - 1) / size;
            b->off[0] = per * rank < d0 ? per * rank : d0;
            b->size[0] = (per * (rank + 1) < d0 ? per * (rank + 1) : d0) - b->off[0];
        }
        uint64_t bytes = box_numel(b) * sck_dtype_size(e->info.dtype);
        if (!(rb[i].data = malloc(bytes ? bytes : 1))) {
            rc = sck_err(SCK_ERR_NOMEM, "'%s': out of memory for %llu bytes", e->key, (unsigned long long)bytes);
            break;
        }
        rc = add_tensor(st, c->name[i], e, &rb[i]);
    }
    /* A local failure must reach every rank before the next collective, or the others would wait forever. */
    rc = sck_comm_agree(comm, rc);
    /* Load in batches of whole tensors, the same batches on every rank. */
    for (size_t lo = 0; lo < n && !rc;) {
        size_t hi = lo;
        uint64_t batch = 0, mine = 0;
        sck_state *bs = sck_state_new();
        if (!bs) rc = sck_err(SCK_ERR_NOMEM, "out of memory");
        while (hi < n && (hi == lo || batch < LOAD_BATCH)) {
            const cli_entry *e = &c->src.e[hi];
            if (e->kind == CLI_TENSOR && c->name[hi] && !rc) {
                batch += e->info.nbytes;
                if (e->info.ndim > 0 || rank == 0) mine += box_numel(&rb[hi].box) * sck_dtype_size(e->info.dtype);
                rc = add_tensor(bs, e->key, e, &rb[hi]);
            }
            hi++;
        }
        rc = sck_comm_agree(comm, rc);
        if (!rc) rc = sck_load(comm, c->src.path, bs, NULL);
        sck_state_free(bs);
        progress_add(c->pg, mine);
        lo = hi;
    }
    for (size_t i = 0; i < sck_value_len(c->values) && !rc; i++) {
        sck_value *v = sck_value_clone(sck_value_at(c->values, i));
        rc = v ? sck_state_add_value(st, sck_value_key_at(c->values, i), v) : sck_err(SCK_ERR_NOMEM, "out of memory");
    }
    /* Each entry keeps its path (planner_data); meta.pt's are top-level keys. */
    for (size_t i = 0; i < n && !rc && (c->to == TO_DCP || c->to == TO_FABRIC); i++) {
        const cli_entry *e = &c->src.e[i];
        sck_value *p = NULL;
        if (e->kind == CLI_VALUE) continue;
        rc = sck_ckpt_entry_path(c->src.ck, e->index, &p);
        if (!rc) rc = sck_state_set_path(st, e->key, p);
        sck_value_free(p);
    }
    rc = sck_comm_agree(comm, rc);
    if (!rc && rank == 0) progress_label(c->pg, "writing");
    if (!rc && (c->to == TO_DCP || c->to == TO_FABRIC)) {
        sck_save_opts so = {(c->do_fsync ? 0 : SCK_SAVE_NO_FSYNC) | (c->to == TO_FABRIC ? SCK_SAVE_FABRIC : 0), 0, {0}};
        rc = sck_save(comm, c->dst, st, &so);
    } else if (!rc) {
        sck_full_opts fo = {c->to == TO_HF ? SCK_FULL_HF_SHARDED : SCK_FULL_SAFETENSORS, c->do_fsync ? 0 : SCK_SAVE_NO_FSYNC,
                            c->max_shard, {0}};
        rc = sck_save_full(comm, c->dst, st, &fo);
    }
    if (!rc && rank == 0) progress_add(c->pg, c->tensor_bytes); /* the write half of the bar */
    for (size_t i = 0; i < n && rb; i++) free(rb[i].data);
    free(rb);
    sck_state_free(st);
    return rc;
}

/* ---- the streaming engine (safetensors, HF) ---- */

static int stream_full(conv *c) {
    size_t n = c->src.n, nt = 0;
    sck_st_tensor *t = calloc(n ? n : 1, sizeof *t);
    size_t *src_of = calloc(n ? n : 1, sizeof *src_of);
    uint8_t *buf = NULL;
    sck_st_writer *w = NULL;
    int rc = t && src_of ? SCK_OK : sck_err(SCK_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n && !rc; i++) {
        const cli_entry *e = &c->src.e[i];
        if (e->kind != CLI_TENSOR || !c->name[i]) continue;
        t[nt].name = c->name[i];
        t[nt].dtype = e->info.dtype;
        t[nt].ndim = e->info.ndim;
        memcpy(t[nt].shape, e->info.shape, sizeof t[nt].shape);
        src_of[nt++] = i;
    }
    sck_full_opts fo = {c->to == TO_HF ? SCK_FULL_HF_SHARDED : SCK_FULL_SAFETENSORS, c->do_fsync ? 0 : SCK_SAVE_NO_FSYNC,
                        c->max_shard, {0}};
    if (!rc && !(buf = malloc(STREAM_BLOCK))) rc = sck_err(SCK_ERR_NOMEM, "out of memory for a %u-byte block", STREAM_BLOCK);
    if (!rc) rc = sck_st_writer_open(c->dst, t, nt, c->values, &fo, &w);
    for (size_t k = 0; k < nt && !rc; k++) {
        const cli_entry *e = &c->src.e[src_of[k]];
        size_t el = sck_dtype_size(e->info.dtype);
        uint64_t numel = e->info.nbytes / el, per = STREAM_BLOCK / el;
        for (uint64_t at = 0; at < numel && !rc; at += per) {
            uint64_t cnt = numel - at < per ? numel - at : per;
            rc = sck_ckpt_read_flat(c->src.ck, e->index, at, cnt, buf);
            if (!rc) rc = sck_st_writer_write(w, k, at * el, buf, cnt * el);
            progress_add(c->pg, cnt * el);
        }
    }
    if (!rc) rc = sck_st_writer_commit(w);
    sck_st_writer_free(w);
    free(buf);
    free(src_of);
    free(t);
    return rc;
}

static int same_path(const char *a, const char *b) {
    char ra[PATH_MAX], rb[PATH_MAX];
    return realpath(a, ra) && realpath(b, rb) && !strcmp(ra, rb);
}

static int dir_has(const char *dir, const char *name) {
    char p[PATH_MAX];
    struct stat sb;
    return snprintf(p, sizeof p, "%s/%s", dir, name) < (int)sizeof p && stat(p, &sb) == 0;
}

/* 1 if dir holds no entry, 0 if it holds one, or an error. */
static int dir_is_empty(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return cli_err_errno(SCK_ERR_IO, errno, "%s: cannot open the output directory", dir);
    struct dirent *de;
    int empty = 1;
    while (empty && (de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) empty = 0;
    closedir(d);
    return empty;
}

/* An existing DST is refused unless --force, and even then unless it is of the kind `to` writes (so
 * that --force never swallows an unrelated file or directory).  Nothing, or an empty directory, is fine. */
static int check_dst(const char *dst, int to, const char *to_name, int force) {
    struct stat sb;
    if (stat(dst, &sb) != 0)
        return errno == ENOENT ? SCK_OK : cli_err_errno(SCK_ERR_IO, errno, "%s: cannot stat the output", dst);
    int is_dir = S_ISDIR(sb.st_mode), empty = is_dir ? dir_is_empty(dst) : 0;
    if (empty < 0) return empty;
    if (empty) return SCK_OK;
    int dcp = is_dir && dir_has(dst, ".metadata"), hf = is_dir && dir_has(dst, SCK_HF_INDEX_NAME);
    const char *have = dcp ? "a DCP checkpoint" : hf ? "a Hugging Face directory" : is_dir ? "a directory"
                       : S_ISREG(sb.st_mode) ? "a file" : "not a regular file";
    if (!force) return sck_err(SCK_ERR_INVALID_ARG, "%s: the output already exists (%s); pass --force to replace it", dst, have);
    int same = to == TO_ST ? S_ISREG(sb.st_mode) : to == TO_HF ? hf : dcp;
    if (!same)
        return sck_err(SCK_ERR_INVALID_ARG,
                       "%s: the output is %s, not what --to %s writes; --force replaces only an output of the same kind", dst,
                       have, to_name);
    return SCK_OK;
}

/* c->name[i]: entry i's name in DST after --include / --exclude / --strip-prefix. */
static int select_names(conv *c, const sck_key_select *ks) {
    const char **keys = malloc((c->src.n ? c->src.n : 1) * sizeof *keys);
    if (!keys || !(c->name = malloc((c->src.n ? c->src.n : 1) * sizeof *c->name))) {
        free(keys);
        return sck_err(SCK_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < c->src.n; i++) keys[i] = c->src.e[i].key;
    int rc = sck_key_select_apply(ks, c->src.path, keys, c->src.n, c->name);
    free(keys);
    return rc;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* cmd_convert with room for argc --include / --exclude globs in inc and exc. */
static int convert_main(int argc, char **argv, const char **inc, const char **exc) {
    sck_key_select sel = {inc, 0, exc, 0, NULL}, *ks = &sel;
    const char *src = NULL, *dst = NULL, *to = NULL, *shard = NULL;
    int ranks = 0, do_fsync = 1, force = 0;
    for (int i = 1; i < argc; i++) {
        int has = i + 1 < argc;
        if (!strcmp(argv[i], "--to") && has) to = argv[++i];
        else if (!strcmp(argv[i], "--include") && has) inc[ks->ninclude++] = argv[++i];
        else if (!strcmp(argv[i], "--exclude") && has) exc[ks->nexclude++] = argv[++i];
        else if (!strcmp(argv[i], "--strip-prefix") && has) ks->strip_prefix = argv[++i];
        else if (!strcmp(argv[i], "--force")) force = 1;
        else if (!strcmp(argv[i], "--max-shard-size") && has) shard = argv[++i];
        else if (!strcmp(argv[i], "--no-fsync")) do_fsync = 0;
        else if (!strcmp(argv[i], "--ranks") && has) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 4096) return cli_usage_error("convert", "--ranks wants an integer 1..4096, got '%s'", argv[i]);
            ranks = (int)v;
        } else if (argv[i][0] == '-' && argv[i][1])
            return cli_usage_error("convert", "%s '%s'", has || strncmp(argv[i], "--", 2) ? "unknown option" : "missing value for",
                                   argv[i]);
        else if (!src) src = argv[i];
        else if (!dst) dst = argv[i];
        else return cli_usage_error("convert", "unexpected argument '%s'", argv[i]);
    }
    if (!src || !dst) return cli_usage_error("convert", "wants SRC and DST");
    if (!to && ends_with(dst, ".safetensors")) to = "safetensors";
    if (!to) return cli_usage_error("convert", "say --to dcp, --to fabric, --to safetensors or --to hf");
    conv c;
    memset(&c, 0, sizeof c);
    c.dst = dst;
    c.do_fsync = do_fsync;
    if (!strcmp(to, "dcp")) c.to = TO_DCP;
    else if (!strcmp(to, "fabric")) c.to = TO_FABRIC;
    else if (!strcmp(to, "safetensors")) c.to = TO_ST;
    else if (!strcmp(to, "hf")) c.to = TO_HF;
    else return cli_usage_error("convert", "--to must be dcp, fabric, safetensors or hf, not '%s'", to);
    if (shard && c.to != TO_HF) return cli_usage_error("convert", "--max-shard-size only applies to --to hf");
    if (shard && sck_parse_size(shard, &c.max_shard) != SCK_OK)
        return cli_usage_error("convert", "--max-shard-size wants a size such as 5GB, 500MB or 2GiB, not '%s'", shard);
    int selects = ks->ninclude || ks->nexclude || ks->strip_prefix;
    if (selects && c.to != TO_ST && c.to != TO_HF)
        return cli_usage_error("convert", "--include, --exclude and --strip-prefix apply to --to safetensors and --to hf");
    if (same_path(src, dst)) return cli_usage_error("convert", "SRC and DST are the same");
    if (check_dst(dst, c.to, to, force)) return cli_fail();
    c.ranks = ranks ? ranks : 1;
    if (cli_src_open(&c.src, src)) return cli_fail();
    int rc = select_names(&c, selects ? ks : NULL);
    if (!rc) rc = read_values(&c);
    if (!rc) {
        int ranked = c.to == TO_DCP || c.to == TO_FABRIC || ranks;
        /* ranks engine: the first half of the bar is reading, the second writing */
        c.pg = progress_start(ranked ? "reading" : "converting", c.tensor_bytes * (ranked ? 2 : 1));
        if (ranked) rc = sck_threads_run(c.ranks, conv_rank, &c);
        else rc = stream_full(&c);
        progress_end(c.pg);
    }
    sck_value_free(c.values);
    free(c.name);
    cli_src_close(&c.src);
    return rc ? cli_fail() : 0;
}

int cmd_convert(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) return fputs(USAGE, stdout), 0;
    const char **inc = malloc((size_t)argc * sizeof *inc), **exc = malloc((size_t)argc * sizeof *exc);
    if (!inc || !exc) {
        free(inc);
        free(exc);
        return sck_err(SCK_ERR_NOMEM, "out of memory"), cli_fail();
    }
    int rc = convert_main(argc, argv, inc, exc);
    free(inc);
    free(exc);
    return rc;
}
