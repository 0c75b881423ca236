/* The OSU point-to-point method (latency, bw, bibw), in C, so that Open MPI and MPICH run the
 * same loops as mpirt's Rust ports: same loop counts, window, tags and output format.
 * Usage: osu_p2p latency|bw|bibw [MAX_SIZE] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LARGE 8192

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size_world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size_world);
    const char *mode = argc > 1 ? argv[1] : "latency";
    long max = argc > 2 ? atol(argv[2]) : (1L << 22);
    int lat = strcmp(mode, "latency") == 0, bibw = strcmp(mode, "bibw") == 0;
    int window = 64, peer = 1 - rank;
    long slot = max > 0 ? max : 1;
    char *s_buf = malloc(slot), *r_buf = malloc(slot * (lat ? 1 : window));
    memset(s_buf, 'a', slot);
    MPI_Request req[128];
    char ack[4];
    if (rank == 0)
        printf("\n# %s v7.4\n# Datatype: MPI_CHAR.\n%-10s%18s\n",
               lat ? "OSU MPI Latency Test" : bibw ? "OSU MPI Bi-Directional Bandwidth Test"
                                                  : "OSU MPI Bandwidth Test",
               "# Size", lat ? "Avg Latency(us)" : "Bandwidth (MB/s)");
    for (long size = lat ? 0 : 1; size <= max; size = size ? size * 2 : 1) {
        int iters = lat ? (size > LARGE ? 1000 : 10000) : (size > LARGE ? 20 : 100);
        int skip = lat ? (size > LARGE ? 10 : 100) : (size > LARGE ? 2 : 10);
        MPI_Barrier(MPI_COMM_WORLD);
        double start = 0;
        for (int i = 0; i < iters + skip; i++) {
            if (i == skip) start = MPI_Wtime();
            if (lat) {
                if (rank == 0) {
                    MPI_Send(s_buf, size, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
                    MPI_Recv(r_buf, size, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else {
                    MPI_Recv(r_buf, size, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(s_buf, size, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
                }
            } else if (bibw) {
                for (int w = 0; w < window; w++)
                    MPI_Irecv(r_buf + w * slot, size, MPI_CHAR, peer, 100, MPI_COMM_WORLD, &req[w]);
                for (int w = 0; w < window; w++)
                    MPI_Isend(s_buf, size, MPI_CHAR, peer, 100, MPI_COMM_WORLD, &req[window + w]);
                MPI_Waitall(2 * window, req, MPI_STATUSES_IGNORE);
            } else if (rank == 0) {
                for (int w = 0; w < window; w++)
                    MPI_Isend(s_buf, size, MPI_CHAR, peer, 100, MPI_COMM_WORLD, &req[w]);
                MPI_Waitall(window, req, MPI_STATUSES_IGNORE);
                MPI_Recv(ack, 4, MPI_CHAR, peer, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                for (int w = 0; w < window; w++)
                    MPI_Irecv(r_buf + w * slot, size, MPI_CHAR, peer, 100, MPI_COMM_WORLD, &req[w]);
                MPI_Waitall(window, req, MPI_STATUSES_IGNORE);
                MPI_Send(ack, 4, MPI_CHAR, peer, 101, MPI_COMM_WORLD);
            }
        }
        double t = MPI_Wtime() - start;
        if (rank == 0) {
            double v = lat ? t * 1e6 / (2.0 * iters)
                           : size / 1e6 * (double)iters * window * (bibw ? 2 : 1) / t;
            printf("%-10ld%18.2f\n", size, v);
            fflush(stdout);
        }
    }
    free(s_buf);
    free(r_buf);
    MPI_Finalize();
    return 0;
}
