/* One core's process_vm_readv rate on 4 MiB buffers: the ceiling for a single-copy rendezvous
 * over shared memory, next to memcpy.c's. The parent reads a forked child's copy of the buffer
 * whole (one call, as mpirt does), then in 256 KiB calls (chunking does not raise it). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double rate(pid_t child, char *dst, char *src, size_t n, size_t chunk, int reps) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < reps; i++) {
        for (size_t off = 0; off < n; off += chunk) {
            struct iovec local = {dst + off, chunk}, remote = {src + off, chunk};
            if (process_vm_readv(child, &local, 1, &remote, 1, 0) != (ssize_t)chunk) {
                perror("process_vm_readv");
                exit(1);
            }
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    return n / 1e6 * reps / s;
}

int main(void) {
    size_t n = 4 << 20;
    char *src = malloc(n), *dst = malloc(n);
    memset(src, 1, n);
    memset(dst, 2, n);
    int go[2];
    if (pipe(go) != 0) {
        return 1;
    }
    pid_t child = fork();
    if (child == 0) {
        char c;
        _exit(read(go[0], &c, 1) == 1 ? 0 : 1);
    }
    double whole = rate(child, dst, src, n, n, 300);
    double chunked = rate(child, dst, src, n, 256 << 10, 300);
    printf("%.2f %.2f\n", whole, chunked);
    if (write(go[1], "x", 1) != 1) {
        return 1;
    }
    waitpid(child, NULL, 0);
    return dst[0] != 1;
}
