/* One core's memcpy rate on 4 MiB buffers, the ceiling for a single-copy transfer, two ways:
 * between two cache-warm buffers, and into the 64 distinct 4 MiB slots that osu_bw's window
 * receives into (mpirt's port lends each receive a slot of its own, and compare/osu_p2p.c
 * does the same), where every copy writes memory that has left the cache. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SLOTS 64

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(void) {
    size_t n = 4 << 20;
    char *a = malloc(n), *b = malloc(n), *slots = malloc(n * SLOTS);
    if (!a || !b || !slots) {
        fprintf(stderr, "memcpy: cannot allocate %zu MiB of buffers\n", (n * (SLOTS + 2)) >> 20);
        return 2;
    }
    memset(a, 1, n);
    memset(b, 2, n);
    memset(slots, 3, n * SLOTS);
    int reps = 512;
    double t0 = seconds();
    for (int i = 0; i < reps; i++) {
        memcpy(i % 2 ? a : b, i % 2 ? b : a, n);
    }
    double warm = seconds() - t0;
    t0 = seconds();
    for (int i = 0; i < reps; i++) {
        memcpy(slots + (i % SLOTS) * n, a, n);
    }
    double window = seconds() - t0;
    printf("%.2f %.2f\n", n / 1e6 * reps / warm, n / 1e6 * reps / window);
    /* Reading the copied bytes makes them an observable result: without it the compiler may
     * drop copies into buffers nothing reads (and with them the loops being timed). */
    return a[0] + slots[n] == 3;
}
