/* f32_diff.c - compares two files of float32 values: `f32_diff A B TOL` prints the largest absolute
 * difference and how many values differ; exits 0 if the files have the same length and every
 * |a - b| <= TOL (and both are finite), 1 otherwise, 2 on bad usage or unreadable files. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1024, len = 0, k;
    float *v = malloc(cap * sizeof *v);
    while (v && (k = fread(v + len, sizeof *v, cap - len, f)) > 0)
        if ((len += k) == cap) {
            float *w = realloc(v, (cap *= 2) * sizeof *v);
            if (!w) free(v);
            v = w;
        }
    fclose(f);
    *n = len;
    return v;
}

int main(int argc, char **argv) {
    if (argc != 4) return fprintf(stderr, "usage: f32_diff A B TOL\n"), 2;
    size_t na = 0, nb = 0;
    float *a = slurp(argv[1], &na), *b = slurp(argv[2], &nb);
    double tol = atof(argv[3]);
    if (!a || !b) return fprintf(stderr, "f32_diff: cannot read %s\n", a ? argv[2] : argv[1]), 2;
    if (na != nb) return printf("f32_diff: %zu vs %zu values\n", na, nb), 1;
    double worst = 0;
    size_t ndiff = 0, at = 0;
    int bad = 0;
    for (size_t i = 0; i < na; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) bad = 1;
        double d = fabs((double)a[i] - (double)b[i]);
        if (memcmp(&a[i], &b[i], sizeof a[i])) ndiff++;
        if (d > worst) worst = d, at = i;
    }
    printf("f32_diff: %zu values, %zu differ, max |a-b| = %.3g at %zu (tolerance %.3g)\n", na, ndiff, worst, at, tol);
    free(a);
    free(b);
    return bad || worst > tol;
}
