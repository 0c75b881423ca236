/* The OSU collective method, in C, so that Open MPI and MPICH run the same loops as mpirt's
 * Rust ports: each call timed alone and followed by a barrier, OSU's loop counts, the average
 * over the ranks printed as OSU prints it (the barrier's row with size 0).
 * Usage: osu_coll barrier|bcast|reduce|allreduce|allgather|alltoall|gather|scatter|reduce_scatter
 *        [MAX_SIZE [MIN_SIZE]] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LARGE 8192

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    const char *b = argc > 1 ? argv[1] : "allreduce";
    long max = argc > 2 ? atol(argv[2]) : (1L << 20);
    long min = argc > 3 ? atol(argv[3]) : 1;
    int barrier = strcmp(b, "barrier") == 0;
    char *s = malloc(max * n), *r = malloc(max * n);
    int *counts = malloc(n * sizeof(int));
    memset(s, 1, max * n);
    for (long size = barrier ? 0 : min; size <= (barrier ? 0 : max); size *= 2) {
        int iters = size > LARGE ? 100 : 1000, skip = size > LARGE ? 10 : 100;
        for (int i = 0; i < n; i++)
            counts[i] = size / n + (i < size % n);
        MPI_Barrier(MPI_COMM_WORLD);
        double timer = 0;
        for (int i = 0; i < iters + skip; i++) {
            double t = MPI_Wtime();
            if (barrier) MPI_Barrier(MPI_COMM_WORLD);
            else if (!strcmp(b, "bcast")) MPI_Bcast(s, size, MPI_CHAR, 0, MPI_COMM_WORLD);
            else if (!strcmp(b, "reduce"))
                MPI_Reduce(s, r, size, MPI_CHAR, MPI_SUM, 0, MPI_COMM_WORLD);
            else if (!strcmp(b, "allreduce"))
                MPI_Allreduce(s, r, size, MPI_CHAR, MPI_SUM, MPI_COMM_WORLD);
            else if (!strcmp(b, "allgather"))
                MPI_Allgather(s, size, MPI_CHAR, r, size, MPI_CHAR, MPI_COMM_WORLD);
            else if (!strcmp(b, "alltoall"))
                MPI_Alltoall(s, size, MPI_CHAR, r, size, MPI_CHAR, MPI_COMM_WORLD);
            else if (!strcmp(b, "gather"))
                MPI_Gather(s, size, MPI_CHAR, r, size, MPI_CHAR, 0, MPI_COMM_WORLD);
            else if (!strcmp(b, "scatter"))
                MPI_Scatter(s, size, MPI_CHAR, r, size, MPI_CHAR, 0, MPI_COMM_WORLD);
            else MPI_Reduce_scatter(s, r, counts, MPI_CHAR, MPI_SUM, MPI_COMM_WORLD);
            t = MPI_Wtime() - t;
            if (!barrier) MPI_Barrier(MPI_COMM_WORLD);
            if (i >= skip) timer += t;
        }
        double latency = timer * 1e6 / iters, sum = 0;
        MPI_Reduce(&latency, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0) printf("%-10ld%18.2f\n", size, sum / n);
        if (size == 0) break;
    }
    MPI_Finalize();
    return 0;
}
