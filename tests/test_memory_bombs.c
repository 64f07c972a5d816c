/* test_memory_bombs.c - small files that describe huge indexes (memo references repeating one record,
 * headers of millions of tiny entries) are refused early, or read, within a memory bound: each open
 * runs in a forked child whose peak RSS growth must stay below 8x the input plus 64 MiB. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"
#include "format/safetensors.h"
#include "ckpt_fixture.h"
#include "harness.h"

/* Sanitizers inflate RSS (shadow memory, quarantine): there only the outcome is checked. */
#if defined(__SANITIZE_ADDRESS__)
#define MB_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer)
#define MB_SANITIZED 1
#endif
#endif
#ifndef MB_SANITIZED
#define MB_SANITIZED 0
#endif

/* ---- a pickle, opcode by opcode (as tests/interop's metadata would be, without torch) ---- */

#define MOD_META "torch.distributed.checkpoint.metadata"

static void raw(sck_buf *b, const void *p, size_t n) { CHECK(sck_buf_append(b, p, n) == 0); }
static void op(sck_buf *b, int c) { CHECK(sck_buf_put_u8(b, (uint8_t)c) == 0); }

static void str(sck_buf *b, const char *s) {
    size_t n = strlen(s);
    if (n < 256) {
        op(b, 0x8c);   /* SHORT_BINUNICODE */
        op(b, (int)n);
    } else {
        op(b, 'X');
        CHECK(sck_buf_put_le32(b, (uint32_t)n) == 0);
    }
    raw(b, s, n);
}

static void global(sck_buf *b, const char *mod, const char *name) {
    op(b, 'c');
    raw(b, mod, strlen(mod));
    op(b, '\n');
    raw(b, name, strlen(name));
    op(b, '\n');
}

static void size1(sck_buf *b, int32_t d) {   /* torch.Size((d,)) */
    global(b, "torch", "Size");
    op(b, 'J');
    CHECK(sck_buf_put_le32(b, (uint32_t)d) == 0);
    op(b, 0x85);   /* TUPLE1: (d,) */
    op(b, 0x85);   /* ((d,),) */
    op(b, 'R');
}

/* cls() with BUILD state {...}: begin, then key/value pairs, then obj_end. */
static void obj_begin(sck_buf *b, const char *cls) {
    global(b, MOD_META, cls);
    op(b, ')');
    op(b, 0x81);   /* NEWOBJ */
    op(b, '}');
    op(b, '(');
}

static void obj_end(sck_buf *b) {
    op(b, 'u');
    op(b, 'b');
}

static void binget(sck_buf *b, uint32_t i) {
    if (i < 256) {
        op(b, 'h');
        op(b, (int)i);
    } else {
        op(b, 'j');
        CHECK(sck_buf_put_le32(b, i) == 0);
    }
}

static void chunk(sck_buf *b) {   /* ChunkStorageMetadata(offsets=(0,), sizes=(4,)) */
    obj_begin(b, "ChunkStorageMetadata");
    str(b, "offsets");
    size1(b, 0);
    str(b, "sizes");
    size1(b, 4);
    obj_end(b);
}

/* TensorStorageMetadata(float32, (4,), chunks=<whatever the caller pushed, then TSM_END>). */
static void tsm_begin(sck_buf *b) {
    obj_begin(b, "TensorStorageMetadata");
    str(b, "properties");
    global(b, MOD_META, "TensorProperties");
    op(b, ')');
    op(b, 0x81);
    global(b, "torch", "float32");
    op(b, 0x85);
    op(b, 'b');
    str(b, "size");
    size1(b, 4);
    str(b, "chunks");
}

/* One storage record for tensor `fqn`, chunk offset (0,), in data file f. */
static void record(sck_buf *b, const char *fqn) {
    obj_begin(b, "MetadataIndex");
    str(b, "fqn");
    str(b, fqn);
    str(b, "offset");
    size1(b, 0);
    obj_end(b);
    global(b, "torch.distributed.checkpoint.filesystem", "_StorageInfo");
    op(b, ')');
    op(b, 0x81);
    op(b, '}');
    op(b, '(');
    str(b, "relative_path");
    str(b, "f");
    str(b, "offset");
    op(b, 'K');
    op(b, 0);
    str(b, "length");
    op(b, 'K');
    op(b, 16);
    obj_end(b);
}

/* Metadata(state_dict_metadata=..., ...): the caller writes the state dict's items between these. */
static void meta_begin(sck_buf *b) {
    op(b, 0x80);
    op(b, 4);
    obj_begin(b, "Metadata");
    str(b, "state_dict_metadata");
    op(b, '}');
    op(b, '(');
}

/* State dict entry `key`: a TensorStorageMetadata whose chunks list is open and holds one chunk; the
 * caller appends to the list (or memoizes it), then closes it with 'a'/'e' and obj_end. */
static void entry_first_chunk(sck_buf *b, const char *key) {
    str(b, key);
    tsm_begin(b);
    op(b, ']');
    chunk(b);
}

/* Ends state_dict_metadata's items and pushes storage_data's dict, empty: the caller may SETITEMS into it. */
static void storage_data_begin(sck_buf *b) {
    op(b, 'u');
    str(b, "storage_data");
    op(b, '}');
}

/* ---- running an open in a child ---- */

typedef struct outcome {
    int rc;
    long grew_kb;      /* peak RSS growth of the child while it opened */
    char msg[512];
} outcome;

static long peak_kb(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : 0;
}

/* sck_ckpt_open(path) in a forked child (so a failure to bound memory cannot take the suite with it). */
static outcome open_in_child(const char *path) {
    outcome o;
    memset(&o, 0, sizeof o);
    o.rc = 1;
    int fds[2];
    if (pipe(fds) != 0) return o;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        long base = peak_kb();   /* a forked child starts at its parent's resident size */
        sck_ckpt *ck = NULL;
        outcome c;
        memset(&c, 0, sizeof c);
        c.rc = sck_ckpt_open(path, &ck);
        snprintf(c.msg, sizeof c.msg, "%s", c.rc ? sck_last_error() : "");
        sck_ckpt_close(ck);
        c.grew_kb = peak_kb() - base;
        ssize_t k = write(fds[1], &c, sizeof c);
        _exit(k == (ssize_t)sizeof c ? 0 : 1);
    }
    close(fds[1]);
    if (pid > 0) {
        ssize_t k = read(fds[0], &o, sizeof o);
        int ws = 0;
        waitpid(pid, &ws, 0);
        if (k != (ssize_t)sizeof o || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
            memset(&o, 0, sizeof o);
            o.rc = 1;
            snprintf(o.msg, sizeof o.msg, "child died (status 0x%x)", ws);
        }
    }
    close(fds[0]);
    return o;
}

/* The open gave status `st` (message containing `msg` when not NULL) within 8x `input` + 64 MiB. */
static void expect(const char *path, size_t input, int st, const char *msg) {
    outcome o = open_in_child(path);
    long bound_kb = (long)(8 * input / 1024) + 64 * 1024;
    fprintf(stderr, "  %s: status %d, peak RSS grew %ld KiB (bound %ld KiB)%s%s\n", path, o.rc, o.grew_kb, bound_kb,
            o.rc ? ": " : "", o.msg);
    CHECK(o.rc == st);
    if (msg && !strstr(o.msg, msg)) {
        fprintf(stderr, "  message lacks \"%s\"\n", msg);
        CHECK(0);
    }
    if (!MB_SANITIZED) CHECK(o.grew_kb < bound_kb);
}

static const char *dcp_dir(const char *name, const sck_buf *b) {
    static char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/%s", th_tmpdir(), name);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/.metadata", dir);
    CHECK(fx_write(path, b->data, b->len) == 0);
    return dir;
}

#define BOMB ((size_t)20 << 20)

/* ---- DCP .metadata ---- */

TEST(bomb_dcp_one_chunk_referenced_millions_of_times) {
    sck_buf b;
    sck_buf_init(&b);
    meta_begin(&b);
    entry_first_chunk(&b, "w");
    op(&b, 0x94);   /* MEMOIZE: memo 0 */
    op(&b, 'a');
    while (b.len < BOMB) {   /* batches of 1000, as Python writes lists */
        op(&b, '(');
        for (int i = 0; i < 1000; i++) binget(&b, 0);
        op(&b, 'e');
    }
    obj_end(&b);   /* the TSM */
    storage_data_begin(&b);
    obj_end(&b);   /* Metadata */
    op(&b, '.');
    expect(dcp_dir("chunks", &b), b.len, SCK_ERR_FORMAT, "storage_data has only 0 records (each chunk needs its own)");
    sck_buf_free(&b);
}

TEST(bomb_dcp_one_tensor_record_under_a_million_keys) {
    sck_buf b;
    sck_buf_init(&b);
    meta_begin(&b);
    entry_first_chunk(&b, "t0");
    op(&b, 'a');
    obj_end(&b);
    op(&b, 0x94);   /* the TSM is memo 0 */
    char key[32];
    for (unsigned i = 1; b.len < BOMB; i++) {
        if (i % 1000 == 0) {   /* SETITEMS batches */
            op(&b, 'u');
            op(&b, '(');
        }
        snprintf(key, sizeof key, "t%u", i);
        str(&b, key);
        binget(&b, 0);
    }
    storage_data_begin(&b);
    obj_end(&b);
    op(&b, '.');
    expect(dcp_dir("tensors", &b), b.len, SCK_ERR_FORMAT, "(each chunk needs its own)");
    sck_buf_free(&b);
}

/* As many storage "records" (DUP'd, so 2 bytes each) as chunk references: the count matches, the
 * model they would make is over the budget. */
TEST(bomb_dcp_chunk_references_with_as_many_records) {
    sck_buf b;
    sck_buf_init(&b);
    meta_begin(&b);
    entry_first_chunk(&b, "w");
    op(&b, 0x94);
    op(&b, 'a');
    size_t n = 1;
    while (b.len < BOMB / 4) {
        op(&b, '(');
        for (int i = 0; i < 1000; i++) binget(&b, 0);
        op(&b, 'e');
        n += 1000;
    }
    obj_end(&b);
    storage_data_begin(&b);
    op(&b, '(');
    op(&b, 'N');
    for (size_t i = 1; i < 2 * n; i++) op(&b, '2');   /* DUP: n pairs (None, None) */
    op(&b, 'u');
    obj_end(&b);
    op(&b, '.');
    expect(dcp_dir("records", &b), b.len, SCK_ERR_FORMAT, "(memo references repeat records)");
    sck_buf_free(&b);
}

/* planner_data: one key's path is a tuple of a million references to one 1 KiB string. */
TEST(bomb_dcp_planner_path_of_repeated_strings) {
    sck_buf b;
    sck_buf_init(&b);
    meta_begin(&b);
    entry_first_chunk(&b, "w");
    op(&b, 'a');
    obj_end(&b);
    storage_data_begin(&b);
    record(&b, "w");
    op(&b, 's');
    str(&b, "planner_data");
    op(&b, '}');
    str(&b, "w");
    op(&b, '(');
    char big[1025];
    memset(big, 'p', 1024);
    big[1024] = 0;
    str(&b, big);
    for (int i = 0; i < 1000000; i++) op(&b, '2');   /* DUP the string: a 1 GiB path */
    op(&b, 't');
    op(&b, 's');
    obj_end(&b);
    op(&b, '.');
    char data[4200];
    const char *dir = dcp_dir("paths", &b);
    snprintf(data, sizeof data, "%s/f", dir);
    static const unsigned char zeros[16];
    CHECK(fx_write(data, zeros, sizeof zeros) == 0);
    expect(dir, b.len, SCK_ERR_FORMAT, "planner_data paths take more than the limit");
    sck_buf_free(&b);
}

/* ---- safetensors ---- */

static const char *st_file(const char *name, const sck_buf *json, size_t data) {
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", th_tmpdir(), name);
    sck_buf f;
    sck_buf_init(&f);
    size_t len = (json->len + 7) / 8 * 8;
    CHECK(sck_buf_put_le64(&f, len) == 0);
    raw(&f, json->data, json->len);
    while (f.len < 8 + len) op(&f, ' ');
    while (data--) op(&f, 0);
    CHECK(fx_write(path, f.data, f.len) == 0);
    sck_buf_free(&f);
    return path;
}

/* Legitimate, if odd: 20 MB of the smallest tensor entries, each its own chunk in the index. */
TEST(bomb_safetensors_header_of_tiny_tensors_opens_within_bound) {
    sck_buf j;
    sck_buf_init(&j);
    op(&j, '{');
    char e[96];
    for (unsigned i = 0; j.len < BOMB; i++) {
        int k = snprintf(e, sizeof e, "%s\"%x\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}", i ? "," : "", i);
        raw(&j, e, (size_t)k);
    }
    static const char tail[] = ",\"z\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}";
    raw(&j, tail, strlen(tail));
    const char *path = st_file("tiny.safetensors", &j, 1);
    expect(path, j.len, SCK_OK, NULL);
    sck_buf_free(&j);
}

TEST(bomb_safetensors_metadata_over_the_entry_limit) {
    sck_buf j;
    sck_buf_init(&j);
    raw(&j, "{\"__metadata__\":{", 17);
    char e[32];
    for (unsigned i = 0; i <= ST_MAX_METADATA; i++) {
        int k = snprintf(e, sizeof e, "%s\"%x\":\"\"", i ? "," : "", i);
        raw(&j, e, (size_t)k);
    }
    raw(&j, "},\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 54);
    const char *path = st_file("meta.safetensors", &j, 1);
    char want[64];
    snprintf(want, sizeof want, "\"__metadata__\" has more than %d entries", ST_MAX_METADATA);
    expect(path, j.len, SCK_ERR_FORMAT, want);
    sck_buf_free(&j);
}
