/* One core's memcpy rate between two cache-warm 4 MiB buffers: the ceiling for a single-copy
 * transfer into osu_bw's receive buffer, which OSU's source (and every port here) reuses for
 * all the receives of a window, so it stays warm too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(void) {
    size_t n = 4 << 20;
    char *a = malloc(n), *b = malloc(n);
    if (!a || !b) {
        fprintf(stderr, "memcpy: cannot allocate two %zu MiB buffers\n", n >> 20);
        return 2;
    }
    memset(a, 1, n);
    memset(b, 2, n);
    int reps = 512;
    double t0 = seconds();
    for (int i = 0; i < reps; i++) {
        memcpy(i % 2 ? a : b, i % 2 ? b : a, n);
    }
    double warm = seconds() - t0;
    printf("%.2f\n", n / 1e6 * reps / warm);
    /* Reading the copied bytes makes them an observable result: without it the compiler may
     * drop copies into buffers nothing reads (and with them the loop being timed). */
    return a[0] + b[n - 1] == 3;
}
