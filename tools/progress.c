/* progress.c - see progress.h. */
#include "progress.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define DELAY_S 1.0      /* quick work never shows a bar */
#define REDRAW_S 0.1

struct progress {
    pthread_mutex_t mu;
    char label[64];
    uint64_t total, done;
    double t0, last_draw;
    int always, drawn;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

progress *progress_start(const char *label, uint64_t total) {
    const char *env = getenv("SHARDCKPT_PROGRESS");
    int always = env && !strcmp(env, "always");
    if ((env && !strcmp(env, "never")) || (!always && !isatty(STDERR_FILENO))) return NULL;
    progress *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    pthread_mutex_init(&p->mu, NULL);
    snprintf(p->label, sizeof p->label, "%s", label);
    p->total = total;
    p->always = always;
    p->t0 = now_s();
    return p;
}

static int term_cols(void) {
    struct winsize ws;
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 40) return ws.ws_col;
    return 80;
}

/* One line: "label [=====>     ]  45%  1.2 GiB / 2.7 GiB  350.0 MiB/s  ETA 4s" (caller holds mu). */
static void draw(progress *p, double t, int final) {
    char done[32], total[32], rate[32], eta[32] = "";
    double el = t - p->t0, frac = p->total ? (double)p->done / (double)p->total : 1.0;
    if (frac > 1) frac = 1;
    cli_human(p->done, done, sizeof done);
    cli_human(p->total, total, sizeof total);
    cli_human(el > 0 ? (uint64_t)((double)p->done / el) : 0, rate, sizeof rate);
    if (final) snprintf(eta, sizeof eta, "in %.1fs", el);
    else if (p->done && frac < 1) snprintf(eta, sizeof eta, "ETA %.0fs", el / frac - el);
    char tail[160];
    snprintf(tail, sizeof tail, " %3.0f%%  %s / %s  %s/s  %s", frac * 100, done, total, rate, eta);
    /* a fixed-width bar (room kept for the longest tail) so it does not jump as the numbers change */
    int width = term_cols() - (int)strlen(p->label) - 60;
    if (width > 30) width = 30;
    char bar[64];
    int fill = width > 0 ? (int)(frac * width) : 0;
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '=' : i == fill ? '>' : ' ';
    bar[width > 0 ? width : 0] = 0;
    fprintf(stderr, "\r\033[K%s [%s]%s%s", p->label, bar, tail, final ? "\n" : "");
    fflush(stderr);
    p->drawn = 1;
    p->last_draw = t;
}

void progress_add(progress *p, uint64_t n) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->done += n;
    double t = now_s();
    if ((p->always || t - p->t0 >= DELAY_S) && t - p->last_draw >= REDRAW_S) draw(p, t, 0);
    pthread_mutex_unlock(&p->mu);
}

void progress_label(progress *p, const char *label) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    snprintf(p->label, sizeof p->label, "%s", label);
    pthread_mutex_unlock(&p->mu);
}

void progress_end(progress *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    if (p->drawn || p->always) draw(p, now_s(), 1);
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
