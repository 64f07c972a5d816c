/* load.c - sck_load: rank 0 reads `.metadata` and broadcasts it; every rank then reads exactly the
 * bytes its own boxes need from whichever chunks overlap them; all ranks agree on the outcome. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "load/ckpt.h"
#include "comm/comm.h"
#include "core/commit.h"
#include "load/load_checks.h"
#include "load/load_device.h"
#include "format/meta_wire.h"
#include "core/state.h"
#include "io/storage.h"

static void fmt_shape(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, cap - k, "[");
    for (int d = 0; d < ndim && k < cap; d++) k += (size_t)snprintf(buf + k, cap - k, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
}

/* Whether entry ci of the checkpoint can be read into tensor entry e: kind, dtype and shape agree. */
static int check_tensor(const sck_ckpt *ck, size_t ci, const st_entry *e) {
    if (ci >= ck->m.n) return sck_err(SCK_ERR_MISMATCH, "'%s': the checkpoint holds a value in meta.pt, a tensor was requested", e->key);
    const ck_entry *ce = &ck->m.e[ci];
    if (ce->is_bytes) return sck_err(SCK_ERR_MISMATCH, "'%s': the checkpoint holds bytes/a value, a tensor was requested", e->key);
    if (ce->dtype != (int)e->dtype)
        return sck_err(SCK_ERR_MISMATCH, "'%s': the checkpoint holds %s, %s was requested", e->key, ce->dtype_name, sck_dtype_name(e->dtype));
    if (ce->ndim != e->ndim || memcmp(ce->shape, e->shape, (size_t)e->ndim * sizeof *e->shape)) {
        char a[256], b[256];
        fmt_shape(a, sizeof a, ce->ndim, ce->shape);
        fmt_shape(b, sizeof b, e->ndim, e->shape);
        return sck_err(SCK_ERR_MISMATCH, "'%s': the checkpoint's shape is %s, %s was requested", e->key, a, b);
    }
    return SCK_OK;
}

static int load_bytes(sck_ckpt *ck, size_t ci, st_entry *e) {
    if (!ckpt_is_bytes(ck, ci)) return sck_err(SCK_ERR_MISMATCH, "'%s': the checkpoint holds a tensor, a %s was requested", e->key,
                                              e->kind == ENT_BLOB ? "blob" : "value");
    void *raw = NULL;
    size_t n = 0;
    sck_value *v = NULL;
    int rc = sck_ckpt_read_bytes(ck, ci, &raw, &n, &v);
    if (rc) return rc;
    if (e->kind == ENT_BLOB) {
        if (v && sck_value_kind_of(v) == SCK_VAL_BYTES) {
            size_t len;
            const char *s = sck_value_get_string(v, &len);
            raw = malloc(len ? len : 1);
            if (!raw) {
                sck_value_free(v);
                return sck_err(SCK_ERR_NOMEM, "'%s': out of memory", e->key);
            }
            memcpy(raw, s, len);
            n = len;
        } else if (v && sck_value_kind_of(v) == SCK_VAL_PICKLE) {
            /* an object outside the value subset: as a blob, the item's bytes as torch wrote them */
            sck_value_free(v);
            v = NULL;
            uint8_t *item;
            if ((rc = ckpt_read_item(ck, ci, &item, &n))) return rc;
            raw = item;
        } else if (v) {
            sck_value_free(v);
            return sck_err(SCK_ERR_MISMATCH, "'%s': the checkpoint holds a value, not bytes; request it as a value", e->key);
        }
        sck_value_free(v);
        free(e->blob);
        e->blob = raw;
        e->blob_n = n;
    } else {
        if (!v) {
            v = sck_value_bytes(raw, n);
            free(raw);
            if (!v) return sck_err(SCK_ERR_NOMEM, "'%s': out of memory", e->key);
        }
        sck_value_free(e->value);
        e->value = v;
    }
    e->present = 1;
    return SCK_OK;
}

/* The model's entry for each of st's entries, or -1 (caller frees with sck_big_free; NULL: out of memory);
 * clears each entry's `loaded` and counts the tensor pieces (*npieces) and the other entries found
 * (*nother) on the way: each pass over a state of 10 000 entries misses the cache at every one.  A state's
 * keys mostly come in the model's sorted order, so each search first tries the entry after the last. */
static long *find_entries(const sck_ckpt *ck, sck_state *st, size_t *npieces, size_t *nother) {
    long *found = sck_big_alloc((st->n ? st->n : 1) * sizeof *found);
    long next = 0;
    *npieces = *nother = 0;
    for (size_t i = 0; found && i < st->n; i++) {
        if (i + CK_AHEAD < st->n) { /* both keys' bytes lie apart in memory: asked for ahead */
            __builtin_prefetch(st->e[i + CK_AHEAD].key);
            if ((size_t)next + CK_AHEAD < ck->m.n) __builtin_prefetch(ck->m.e[next + CK_AHEAD].key);
        }
        st_entry *e = &st->e[i];
        e->loaded = 0;
        found[i] = ck_meta_find_near(&ck->m, e->key, next);
        if (found[i] >= 0) next = found[i] + 1;
        else if (ck->n_meta) found[i] = ckpt_meta_find(ck, e->key);
        if (e->kind == ENT_TENSOR) *npieces += e->npieces;
        else *nother += found[i] >= 0;
    }
    return found;
}

/* A load's own work, in two steps around the collective planning of checks (load_collective), which
 * works from the planned reads: load_prepare finds what to read, load_run reads it. */
typedef struct load_plan {
    ck_want *w;         /* the tensor boxes, in state order */
    size_t nw;
    uint8_t *asked;     /* per model entry: some state entry names it */
    ck_reads reads;     /* w, planned (ckpt_plan_reads) */
    size_t stop;        /* entries before this one passed the checks; bytes entries among them are read by load_run */
    size_t *other, nother; /* the entries found that are not tensors (bytes, values), in state order */
    int rc;             /* the check that failed at entry `stop`, or the plan's (stop = st->n) */
    char msg[1024];     /* its message: the collective planning in between may set others */
} load_plan;

static void load_plan_free(load_plan *lp) {
    sck_big_free(lp->w);
    free(lp->other);
    free(lp->asked);
    sck_big_free(lp->reads.op);
    memset(lp, 0, sizeof *lp);
}

/* Checks each entry (the key, and a tensor's kind, dtype and shape) and plans the tensor reads; the
 * first failure stops it, in lp->rc.  Marks the tensors to read `loaded` (load_collective clears
 * them again if the load fails).  Returns only SCK_ERR_NOMEM.  found, npieces, nother: find_entries. */
static int load_prepare(sck_ckpt *ck, sck_state *st, const long *found, size_t npieces, size_t nother, unsigned flags, load_plan *lp) {
    memset(lp, 0, sizeof *lp);
    lp->w = sck_big_alloc((npieces ? npieces : 1) * sizeof *lp->w);
    lp->other = malloc((nother ? nother : 1) * sizeof *lp->other);
    lp->asked = calloc(ckpt_count(ck) ? ckpt_count(ck) : 1, 1);
    if (!lp->w || !lp->other || !lp->asked) return sck_err(SCK_ERR_NOMEM, "%s: out of memory planning the load", ck->dir);
    int rc = SCK_OK;
    size_t i = 0;
    for (; !rc && i < st->n; i++) {
        st_entry *e = &st->e[i];
        long ci = found[i];
        if (ci < 0) {
            if (!(flags & SCK_LOAD_ALLOW_MISSING)) rc = sck_err(SCK_ERR_MISSING_KEY, "'%s': not in checkpoint %s", e->key, ck->dir);
            continue;
        }
        lp->asked[ci] = 1;
        if (e->kind != ENT_TENSOR) {
            if (lp->nother < nother) lp->other[lp->nother++] = i;
        } else if (!(rc = check_tensor(ck, (size_t)ci, e))) {
            for (size_t p = 0; p < e->npieces; p++) /* device pieces: ld_read_device, through staging */
                if (!e->pieces[p].dev) lp->w[lp->nw++] = (ck_want){(size_t)ci, &e->pieces[p].box, e->pieces[p].data};
            e->loaded = 1;
        }
    }
    lp->stop = rc ? i - 1 : st->n;
    if (!rc) rc = ckpt_plan_reads(ck, lp->w, lp->nw, &lp->reads);
    lp->rc = rc;
    if (rc) snprintf(lp->msg, sizeof lp->msg, "%s", sck_last_error());
    return rc == SCK_ERR_NOMEM ? rc : SCK_OK;
}

/* Reads the bytes entries before lp->stop, in state order, then (if every check passed) the planned
 * tensor reads; marks what it loaded and lists the checkpoint's entries no state entry named. */
static int load_run(sck_ckpt *ck, sck_state *st, const long *found, unsigned flags, unsigned staging_mib, load_plan *lp) {
    int rc = SCK_OK;
    for (size_t k = 0; !rc && k < lp->nother && lp->other[k] < lp->stop; k++) {
        st_entry *e = &st->e[lp->other[k]];
        if (!(rc = load_bytes(ck, (size_t)found[lp->other[k]], e))) e->loaded = 1;
    }
    if (!rc && lp->rc) {
        sck_err_set_raw(lp->msg);
        rc = lp->rc;
    }
    if (!rc) rc = ckpt_run_reads(ck, lp->w, &lp->reads);
    if (!rc) rc = ld_read_device(ck, st, found, staging_mib);
    for (size_t i = 0; !rc && i < ckpt_count(ck); i++) {
        if (lp->asked[i]) continue;
        if (flags & SCK_LOAD_REJECT_UNEXPECTED)
            rc = sck_err(SCK_ERR_UNEXPECTED_KEY, "'%s': in checkpoint %s but not requested", ckpt_key(ck, i), ck->dir);
        else
            rc = state_add_unexpected(st, ckpt_key(ck, i));
    }
    return rc;
}

/* Ends open_resolved's last collective: a rank that opened the checkpoint closes it again when
 * another rank failed. */
static int agree_opened(sck_comm *comm, int local, sck_ckpt **ck) {
    int rc = comm_agree(comm, local);
    if (rc && *ck) {
        sck_ckpt_close(*ck);
        *ck = NULL;
    }
    return rc;
}

/* Thread-ranks of one process: rank 0 decodes .metadata and the others read its model through a
 * pointer it shares with its status in one agreement (ckpt_share); each still opens its own files and
 * keeps its own caches.  Every rank that gets the pointer holds a reference; rank 0 drops those of
 * ranks that never got it. */
static int open_shared(sck_comm *comm, const char *dir, sck_ckpt **ck) {
    ck_shared *s = NULL;
    int local = SCK_OK;
    if (comm->rank == 0) {
        local = ckpt_open_dcp(dir, ck, NULL, NULL);
        if (!local) local = ckpt_share(*ck, comm->size - 1, &s);
    }
    size_t *counts = calloc((size_t)comm->size, sizeof *counts);
    if (!counts && !local) local = sck_err(SCK_ERR_NOMEM, "%s: out of memory", dir);
    void *all = NULL;
    int rc = counts ? comm_agree_gather(comm, local, &s, comm->rank == 0 ? sizeof s : 0, &all, counts) : comm_agree(comm, local);
    if (!rc && counts[0] != sizeof s) rc = sck_err(SCK_ERR_COMM, "%s: rank 0 shared %zu bytes for its model, not a pointer", dir, counts[0]);
    if (!rc && comm->rank != 0) memcpy(&s, all, sizeof s);
    comm_gather_free(comm, all);
    free(counts);
    if (rc) { /* every rank sees the failure */
        if (comm->rank == 0 && s) ckpt_shared_release(s, comm->size - 1);
        if (*ck) sck_ckpt_close(*ck);
        *ck = NULL;
        return rc;
    }
    if (comm->rank != 0) local = ckpt_from_shared(dir, s, ck);
    if (comm->rank != 0 && !local) local = ckpt_attach_meta_pt(*ck); /* small: each rank reads its own */
    return agree_opened(comm, local, ck);
}

/* DCP directories: rank 0 reads and decodes .metadata once and broadcasts the decoded model
 * (src/meta_wire.h); the other ranks rebuild it with a few allocations instead of each parsing the
 * pickle into an object tree (open_shared when they are threads of one process).  Other sources are
 * small headers every rank reads itself. */
static int open_resolved(sck_comm *comm, const char *dir, sck_ckpt **ck) {
    struct stat sb;
    char mp[4096];
    snprintf(mp, sizeof mp, "%s/.metadata", dir);
    *ck = NULL;
    /* Every rank sees the same answer only if the FS is shared.  Each branch's first collective is an
     * agreement (with or without a payload: the same collective), which a rank that could not resolve
     * the directory joins with its error (open_collective). */
    int is_dcp = io_stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode) && io_stat(mp, &sb) == 0;
    if (!is_dcp || comm->size == 1) return agree_opened(comm, sck_ckpt_open(dir, ck), ck);
    if (comm_in_process(comm)) return open_shared(comm, dir, ck);
    sck_buf wire;
    sck_buf_init(&wire);
    uint8_t *side = NULL; /* sck_big_alloc'ed */
    size_t side_len = 0;
    int local = SCK_OK;
    if (comm->rank == 0) { /* the model cache's bytes go out as they are; else the decoded model's */
        local = ckpt_open_dcp(dir, ck, &side, &side_len);
        if (!side && !local) local = meta_wire_encode(&(*ck)->m, &wire);
    }
    int rc = agree_opened(comm, local, ck); /* rank 0's read or decode error, with its message */
    if (rc) {
        sck_buf_free(&wire);
        sck_big_free(side);
        return rc;
    }
    /* The model goes out with the directory's identity as rank 0 saw it before reading .metadata
     * (3 x uint64 after it): every rank then tells a checkpoint a save replaced meanwhile from a
     * damaged one alike. */
    uint64_t id[3] = {0, 0, 0};
    if (comm->rank == 0) {
        id[0] = (*ck)->dir_dev, id[1] = (*ck)->dir_ino, id[2] = (uint64_t)(*ck)->dir_known;
        uint8_t *grown = side ? sck_big_realloc(side, side_len + sizeof id) : NULL;
        if (side && grown) memcpy(grown + side_len, id, sizeof id), side = grown, side_len += sizeof id;
        else if (side) local = sck_err(SCK_ERR_NOMEM, "%s: out of memory", mp);
        else if (sck_buf_append(&wire, id, sizeof id)) local = sck_err(SCK_ERR_NOMEM, "%s: out of memory", mp);
    }
    void *buf = local ? NULL : side ? side : wire.data;
    size_t n = local ? 0 : side ? side_len : wire.len; /* empty: the others fail on it, rank 0's error wins */
    rc = comm_bcast(comm, &buf, &n, 0);
    if (comm->rank == 0) buf = NULL; /* it is side or wire.data */
    sck_buf_free(&wire);
    sck_big_free(side);
    if (rc) {
        free(buf);
        if (*ck) sck_ckpt_close(*ck);
        *ck = NULL;
        return rc;
    }
    if (comm->rank != 0) {
        char what[4200];
        snprintf(what, sizeof what, "%s (as decoded by rank 0)", mp);
        ck_meta m;
        if (n < sizeof id) local = sck_err(SCK_ERR_COMM, "%s: rank 0's model broadcast is short", mp);
        else memcpy(id, (uint8_t *)buf + n - sizeof id, sizeof id), n -= sizeof id;
        if (!local) local = meta_wire_decode(buf, n, what, &m);
        free(buf);
        if (!local) local = ckpt_from_model(dir, &m, 1, ck); /* rank 0 checked the same model */
        if (!local) ckpt_set_dir_id(*ck, id[0], id[1], (int)id[2]);
        if (!local) local = ckpt_attach_meta_pt(*ck);        /* small: each rank reads its own */
    }
    return agree_opened(comm, local, ck);
}

/* A crash inside a save's two-rename fallback leaves the checkpoint beside dir (src/core/commit.h).  A rank
 * that cannot resolve it joins open_resolved's first collective (an agreement in every branch: rank
 * 0's outcome, shared model or not) with its error, and every rank stops there. */
static int open_collective(sck_comm *comm, const char *dir, sck_ckpt **ck) {
    char *path = NULL;
    int local = commit_resolve(dir, &path);
    int rc = local ? comm_agree(comm, local) : open_resolved(comm, path, ck);
    free(path);
    return rc;
}

static int load_collective(sck_comm *comm, const char *dir, sck_state *st, unsigned flags, unsigned staging_mib) {
    state_touch(st); /* blobs and values it loads change the state's structure (an async save's kept plan) */
    state_clear_unexpected(st);
    sck_ckpt *ck = NULL;
    int rc = open_collective(comm, dir, &ck);
    if (rc) {
        for (size_t i = 0; i < st->n; i++) st->e[i].loaded = 0;
        return rc;
    }
    ck->verify = !(flags & SCK_LOAD_NO_VERIFY);
    ck->rank = sck_comm_rank(comm);
    ck->nranks = sck_comm_size(comm);
    ck->one_cache = comm_one_node(comm);
    ck->io = flags & SCK_LOAD_DIRECT_IO ? CK_IO_DIRECT : flags & SCK_LOAD_BUFFERED_IO ? CK_IO_BUFFERED : CK_IO_AUTO;
    /* One reader checks each item (every rank runs this collective); any rank's failed check fails
     * the load on all ranks through the comm_agree below. */
    size_t npieces, nother;
    long *found = find_entries(ck, st, &npieces, &nother);
    load_plan lp;
    memset(&lp, 0, sizeof lp);
    int local = found ? load_prepare(ck, st, found, npieces, nother, flags, &lp)
                      : sck_err(SCK_ERR_NOMEM, "%s: out of memory planning the load", ck->dir);
    rc = lc_assign(comm, ck, lp.w, &lp.reads, local);
    /* The final agreement also combines the CRCs the readers took of their parts of items. */
    if (!rc) rc = lc_finish(comm, ck, local ? local : load_run(ck, st, found, flags, staging_mib, &lp));
    load_plan_free(&lp);
    for (size_t i = 0; rc && i < st->n; i++) /* a failed load loaded no tensor for sure */
        if (st->e[i].kind == ENT_TENSOR || !found) st->e[i].loaded = 0;
    sck_big_free(found);
    sck_ckpt_close(ck);
    return rc;
}

int sck_load(sck_comm *comm, const char *dir, sck_state *st, const sck_load_opts *opts) {
    sck_err_clear();
    unsigned flags = opts ? opts->flags : 0;
    int bad = SCK_OK;
    if (!dir || !*dir || !st) bad = sck_err(SCK_ERR_INVALID_ARG, "sck_load: NULL or empty directory or state");
    else if (flags & ~(SCK_LOAD_ALLOW_MISSING | SCK_LOAD_REJECT_UNEXPECTED | SCK_LOAD_NO_VERIFY | SCK_LOAD_DIRECT_IO | SCK_LOAD_BUFFERED_IO))
        bad = sck_err(SCK_ERR_INVALID_ARG, "sck_load: unknown flags 0x%x", flags);
    else if ((flags & SCK_LOAD_DIRECT_IO) && (flags & SCK_LOAD_BUFFERED_IO))
        bad = sck_err(SCK_ERR_INVALID_ARG, "sck_load: SCK_LOAD_DIRECT_IO and SCK_LOAD_BUFFERED_IO together");
    else if (opts) bad = sck_check_reserved("sck_load: sck_load_opts", opts->reserved, sizeof opts->reserved / sizeof opts->reserved[0]);
    /* A bad argument on one rank must reach the others, which are already in the first collective. */
    if (bad) return comm ? comm_agree(comm, bad) : bad;
    unsigned staging_mib = opts ? opts->staging_mib : 0;
    if (comm) return load_collective(comm, dir, st, flags, staging_mib);
    sck_comm *single = sck_comm_single();
    if (!single) return sck_err(SCK_ERR_NOMEM, "out of memory");
    int rc = load_collective(single, dir, st, flags, staging_mib);
    sck_comm_free(single);
    return rc;
}
