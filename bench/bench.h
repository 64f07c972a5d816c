/* bench.h - shared pieces of the benchmark: the state layout, system helpers (clock, page cache,
 * RSS, memory) and the raw pwrite/pread baseline. */
#ifndef SCK_BENCH_H
#define SCK_BENCH_H

#include <stddef.h>
#include <stdint.h>

/* NTENSORS float32 tensors of [rows, cols], stored back to back in one region (tensor t at
 * t * tensor_bytes).  Ranks split every tensor by rows (or by columns for the column reshard). */
typedef struct layout {
    const char *name;    /* "big" or "small" */
    int ntensors;
    int64_t rows, cols;
    uint64_t tensor_bytes, bytes;
} layout;

/* Rows [lo, hi) of rank r of n: the floor split every part of the benchmark uses. */
void split_range(int64_t total, int n, int r, int64_t *lo, int64_t *hi);

/* ---- system helpers (sys.c) ---- */
double now_s(void);
/* Writes back dirty pages and drops the page cache; 1 if dropped (needs root), else 0 (after sync). */
int drop_caches(void);
/* 1 if drop_caches() can work here. */
int can_drop_caches(void);
/* Resets the peak RSS counter (clear_refs 5); returns the current RSS in bytes. */
uint64_t rss_reset_peak(void);
/* Peak RSS since the last reset, bytes. */
uint64_t rss_peak(void);
/* n bytes of page-aligned, huge-page-advised, pre-faulted memory (NULL on failure); free with mem_free. */
void *mem_alloc(size_t n);
void mem_free(void *p, size_t n);
/* Removes a flat directory of files (ignores errors). */
void rm_dir(const char *dir);

/* ---- raw baseline (raw_io.c) ---- */
/* dir is created, nstreams threads each write the row blocks rank r would own (one pwrite per block)
 * into dir/raw_<r>.bin and fsync it, then dir and its parent are fsynced, all timed.  Returns seconds,
 * or < 0 on error.
 * direct: O_DIRECT, bypassing the page cache (only where raw_direct_ok). */
double raw_write(const layout *L, const uint8_t *mem, int nstreams, const char *dir, int direct);
/* The mirror: nstreams threads read their blocks back (one pread per block). */
double raw_read_same(const layout *L, uint8_t *mem, int nstreams, const char *dir, int direct);
/* 1 if every block of an nstreams split is 4 KiB aligned in memory and in its file. */
int raw_direct_ok(const layout *L, int nstreams);
/* The files written by raw_write with `nfiles` streams, read as one byte range split evenly over
 * `nstreams` threads (the baseline for a resharded load with a different rank count). */
double raw_read_split(const layout *L, uint8_t *mem, int nfiles, int nstreams, const char *dir);
/* nstreams threads each read the data file shardckpt's rank r wrote into ckdir (__r_0.distcp) whole,
 * into a buffer of their own: how long reading the checkpoint's own bytes takes, format included. */
double raw_read_ckpt_files(const layout *L, int nstreams, const char *ckdir);

#endif
