/* The OSU collective method, in C, so that Open MPI and MPICH run the same loops as mpirt's
 * Rust ports: each call timed alone and followed by a barrier, OSU's loop counts, the average
 * over the ranks printed as OSU prints it (the barrier's row with size 0). Every collective
 * OSU 7.4 measures, blocking and non-blocking:
 *   barrier bcast reduce allreduce allgather allgatherv alltoall alltoallv gather gatherv
 *   scatter scatterv reduce_scatter reduce_scatter_block
 * and the same names with an i in front (ibarrier, ibcast, ...), which print OSU's overlap
 * columns: the call started, then as long a computation as the call alone takes (a busy
 * loop, OSU's default without probes), then the wait; overlap is the share of the call's
 * own time hidden behind the computation.
 * Usage: osu_coll BENCH [MAX_SIZE [MIN_SIZE [ITERATIONS]]]
 * ITERATIONS replaces OSU's loop counts (1,000, or 100 past 8 KiB), with a tenth of it (at
 * least one) as warm-up, as mpirt's ports take -i and -x. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LARGE 8192

struct args {
    const char *bench;
    char *s, *r;
    long size;
    int n;
    int *counts, *displs, *block_counts, *block_displs;
};

static const char *NAMES[] = {"barrier",   "bcast",          "reduce",
                              "allreduce", "allgather",      "allgatherv",
                              "alltoall",  "alltoallv",      "gather",
                              "gatherv",   "scatter",        "scatterv",
                              "reduce_scatter", "reduce_scatter_block"};

static int known(const char *b) {
    for (size_t i = 0; i < sizeof NAMES / sizeof *NAMES; i++)
        if (!strcmp(b, NAMES[i])) return 1;
    return 0;
}

/* Runs the call `b` names (a known one, without its i), or starts it as `*req` when `req` is
 * given. The v forms move `size` bytes per rank, as OSU's do; reduce_scatter cuts `size`
 * bytes into OSU's nearly equal parts, reduce_scatter_block into blocks of size / n. */
static void call(const struct args *a, const char *b, MPI_Request *req) {
    MPI_Comm w = MPI_COMM_WORLD;
    int sz = (int)a->size;
    char *s = a->s, *r = a->r;
    int *bc = a->block_counts, *bd = a->block_displs;
#define RUN(blocking, immediate) ((void)(req ? (immediate) : (blocking)))
    if (!strcmp(b, "barrier")) RUN(MPI_Barrier(w), MPI_Ibarrier(w, req));
    else if (!strcmp(b, "bcast"))
        RUN(MPI_Bcast(s, sz, MPI_CHAR, 0, w), MPI_Ibcast(s, sz, MPI_CHAR, 0, w, req));
    else if (!strcmp(b, "reduce"))
        RUN(MPI_Reduce(s, r, sz, MPI_CHAR, MPI_SUM, 0, w),
            MPI_Ireduce(s, r, sz, MPI_CHAR, MPI_SUM, 0, w, req));
    else if (!strcmp(b, "allreduce"))
        RUN(MPI_Allreduce(s, r, sz, MPI_CHAR, MPI_SUM, w),
            MPI_Iallreduce(s, r, sz, MPI_CHAR, MPI_SUM, w, req));
    else if (!strcmp(b, "allgather"))
        RUN(MPI_Allgather(s, sz, MPI_CHAR, r, sz, MPI_CHAR, w),
            MPI_Iallgather(s, sz, MPI_CHAR, r, sz, MPI_CHAR, w, req));
    else if (!strcmp(b, "allgatherv"))
        RUN(MPI_Allgatherv(s, sz, MPI_CHAR, r, bc, bd, MPI_CHAR, w),
            MPI_Iallgatherv(s, sz, MPI_CHAR, r, bc, bd, MPI_CHAR, w, req));
    else if (!strcmp(b, "alltoall"))
        RUN(MPI_Alltoall(s, sz, MPI_CHAR, r, sz, MPI_CHAR, w),
            MPI_Ialltoall(s, sz, MPI_CHAR, r, sz, MPI_CHAR, w, req));
    else if (!strcmp(b, "alltoallv"))
        RUN(MPI_Alltoallv(s, bc, bd, MPI_CHAR, r, bc, bd, MPI_CHAR, w),
            MPI_Ialltoallv(s, bc, bd, MPI_CHAR, r, bc, bd, MPI_CHAR, w, req));
    else if (!strcmp(b, "gather"))
        RUN(MPI_Gather(s, sz, MPI_CHAR, r, sz, MPI_CHAR, 0, w),
            MPI_Igather(s, sz, MPI_CHAR, r, sz, MPI_CHAR, 0, w, req));
    else if (!strcmp(b, "gatherv"))
        RUN(MPI_Gatherv(s, sz, MPI_CHAR, r, bc, bd, MPI_CHAR, 0, w),
            MPI_Igatherv(s, sz, MPI_CHAR, r, bc, bd, MPI_CHAR, 0, w, req));
    else if (!strcmp(b, "scatter"))
        RUN(MPI_Scatter(s, sz, MPI_CHAR, r, sz, MPI_CHAR, 0, w),
            MPI_Iscatter(s, sz, MPI_CHAR, r, sz, MPI_CHAR, 0, w, req));
    else if (!strcmp(b, "scatterv"))
        RUN(MPI_Scatterv(s, bc, bd, MPI_CHAR, r, sz, MPI_CHAR, 0, w),
            MPI_Iscatterv(s, bc, bd, MPI_CHAR, r, sz, MPI_CHAR, 0, w, req));
    else if (!strcmp(b, "reduce_scatter"))
        RUN(MPI_Reduce_scatter(s, r, a->counts, MPI_CHAR, MPI_SUM, w),
            MPI_Ireduce_scatter(s, r, a->counts, MPI_CHAR, MPI_SUM, w, req));
    else
        RUN(MPI_Reduce_scatter_block(s, r, sz / a->n, MPI_CHAR, MPI_SUM, w),
            MPI_Ireduce_scatter_block(s, r, sz / a->n, MPI_CHAR, MPI_SUM, w, req));
#undef RUN
}

/* Keeps the CPU busy for `seconds`, as OSU's computation without probes does. */
static void compute(double seconds) {
    double until = MPI_Wtime() + seconds;
    while (MPI_Wtime() < until) {
    }
}

/* The average over the ranks of each of `k` figures, on rank 0. */
static void average(double *figures, int k, int n) {
    /* Only rank 0 receives the sums; the others divide zeros, which they never print. */
    double sums[4] = {0};
    MPI_Reduce(figures, sums, k, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    for (int i = 0; i < k; i++) figures[i] = sums[i] / n;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    const char *bench = argc > 1 ? argv[1] : "allreduce";
    long max = argc > 2 ? atol(argv[2]) : (1L << 20);
    long min = argc > 3 ? atol(argv[3]) : 1;
    int iterations = argc > 4 ? atoi(argv[4]) : 0;
    /* "ibarrier", "ibcast": an i before a known name is the non-blocking form. */
    int immediate = !known(bench) && bench[0] == 'i' && known(bench + 1);
    const char *b = immediate ? bench + 1 : bench;
    if (!known(b)) {
        if (rank == 0) fprintf(stderr, "osu_coll: no collective named %s\n", bench);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int barrier = strcmp(b, "barrier") == 0;
    struct args a = {.n = n};
    a.s = malloc(max * n);
    a.r = malloc(max * n);
    a.counts = malloc(n * sizeof(int));
    a.block_counts = malloc(n * sizeof(int));
    a.block_displs = malloc(n * sizeof(int));
    memset(a.s, 1, max * n);
    if (rank == 0)
        printf(immediate ? "# Size    Overall(us)  Compute(us)  Pure Comm.(us)  Overlap(%%)\n"
                         : "# Size       Avg Latency(us)\n");
    for (long size = barrier ? 0 : min; size <= (barrier ? 0 : max); size *= 2) {
        int iters = size > LARGE ? 100 : 1000, skip = size > LARGE ? 10 : 100;
        if (iterations > 0) {
            iters = iterations;
            skip = iterations / 10 > 0 ? iterations / 10 : 1;
        }
        a.size = size;
        for (int i = 0; i < n; i++) {
            a.counts[i] = size / n + (i < size % n);
            a.block_counts[i] = size;
            a.block_displs[i] = size * i;
        }
        MPI_Barrier(MPI_COMM_WORLD);
        /* The call alone: blocking, or started and waited for at once. */
        double timer = 0;
        for (int i = 0; i < iters + skip; i++) {
            MPI_Request req;
            double t = MPI_Wtime();
            call(&a, b, immediate ? &req : NULL);
            if (immediate) MPI_Wait(&req, MPI_STATUS_IGNORE);
            t = MPI_Wtime() - t;
            if (!barrier) MPI_Barrier(MPI_COMM_WORLD);
            if (i >= skip) timer += t;
        }
        double pure = timer * 1e6 / iters;
        if (!immediate) {
            average(&pure, 1, n);
            if (rank == 0) printf("%-10ld%18.2f\n", size, pure);
        } else {
            /* OSU: compute for as long as the call alone took, between start and wait. */
            double overall = 0, computed = 0;
            for (int i = 0; i < iters + skip; i++) {
                MPI_Request req;
                double t = MPI_Wtime();
                call(&a, b, &req);
                double c = MPI_Wtime();
                compute(pure * 1e-6);
                c = MPI_Wtime() - c;
                MPI_Wait(&req, MPI_STATUS_IGNORE);
                t = MPI_Wtime() - t;
                /* Here OSU 7.4's ibarrier has a barrier after each call too. */
                MPI_Barrier(MPI_COMM_WORLD);
                if (i >= skip) {
                    overall += t;
                    computed += c;
                }
            }
            double figures[3] = {overall * 1e6 / iters, computed * 1e6 / iters, pure};
            average(figures, 3, n);
            double overlap = 100 - (figures[0] - figures[1]) / figures[2] * 100;
            if (overlap < 0) overlap = 0;
            if (rank == 0)
                printf("%-10ld%13.2f%13.2f%16.2f%12.2f\n", size, figures[0], figures[1],
                       figures[2], overlap);
        }
        if (size == 0) break;
    }
    MPI_Finalize();
    return 0;
}
