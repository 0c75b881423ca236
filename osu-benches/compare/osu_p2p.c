/* The OSU point-to-point method (latency, bw, bibw, multi_lat, mbw_mr), in C, so that Open MPI
 * and MPICH run the same loops as mpirt's Rust ports: same loop counts, window, tags, pairing
 * and output format. The first half of the ranks each pair with one of the second half (with
 * two ranks: rank 0 with rank 1); an odd rank out idles.
 * Usage: osu_p2p latency|bw|bibw|multi_lat|mbw_mr [MAX_SIZE [MIN_SIZE]]
 * MIN_SIZE (a power of two) starts the sweep there: ucx-callgrind.sh profiles one size. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LARGE 8192
#define WINDOW 64

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, nprocs;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    const char *mode = argc > 1 ? argv[1] : "latency";
    long max = argc > 2 ? atol(argv[2]) : (1L << 22);
    long min = argc > 3 ? atol(argv[3]) : -1;
    int multi_lat = strcmp(mode, "multi_lat") == 0, mbw = strcmp(mode, "mbw_mr") == 0;
    int lat = multi_lat || strcmp(mode, "latency") == 0, bibw = strcmp(mode, "bibw") == 0;
    int window = WINDOW, pairs = nprocs / 2;
    int sender = rank < pairs, paired = rank < 2 * pairs;
    int peer = sender ? rank + pairs : rank - pairs;
    long len = max > 0 ? max : 1;
    /* As in OSU's source, a window's receives all land in one r_buf. */
    char *s_buf = malloc(len), *r_buf = malloc(len);
    memset(s_buf, 'a', len);
    MPI_Request req[2 * WINDOW];
    char ack[4];
    if (rank == 0 && mbw)
        printf("# OSU MPI Multiple Bandwidth / Message Rate Test v7.4\n"
               "# [ pairs: %d ] [ window size: %d ]\n# Datatype: MPI_CHAR.\n%-10s%18s%18s\n",
               pairs, window, "# Size", "MB/s", "Messages/s");
    else if (rank == 0)
        printf("\n# %s v7.4\n# Datatype: MPI_CHAR.\n%-10s%18s\n",
               multi_lat ? "OSU MPI Multi Latency Test"
               : lat     ? "OSU MPI Latency Test"
               : bibw    ? "OSU MPI Bi-Directional Bandwidth Test"
                         : "OSU MPI Bandwidth Test",
               "# Size", lat ? "Avg Latency(us)" : "Bandwidth (MB/s)");
    for (long size = min >= 0 ? min : lat && !multi_lat ? 0 : 1; size <= max;
         size = size ? size * 2 : 1) {
        int large = size > LARGE && !mbw; /* OSU 7.4's osu_mbw_mr keeps the small counts */
        int iters = lat ? (large ? 1000 : 10000) : (large ? 20 : 100);
        int skip = lat ? (large ? 10 : 100) : (large ? 2 : 10);
        MPI_Barrier(MPI_COMM_WORLD);
        double start = 0, timed = 0; /* mbw_mr: a sender's time in its windows only */
        for (int i = 0; i < iters + skip; i++) {
            if (i == skip) start = MPI_Wtime();
            if (mbw) MPI_Barrier(MPI_COMM_WORLD);
            double round = MPI_Wtime();
            if (!paired) {
            } else if (lat) {
                if (sender) {
                    MPI_Send(s_buf, size, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
                    MPI_Recv(r_buf, size, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else {
                    MPI_Recv(r_buf, size, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(s_buf, size, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
                }
            } else if (bibw) {
                for (int w = 0; w < window; w++)
                    MPI_Irecv(r_buf, size, MPI_CHAR, peer, 100, MPI_COMM_WORLD, &req[w]);
                for (int w = 0; w < window; w++)
                    MPI_Isend(s_buf, size, MPI_CHAR, peer, 100, MPI_COMM_WORLD, &req[window + w]);
                MPI_Waitall(2 * window, req, MPI_STATUSES_IGNORE);
            } else if (sender) {
                for (int w = 0; w < window; w++)
                    MPI_Isend(s_buf, size, MPI_CHAR, peer, 100, MPI_COMM_WORLD, &req[w]);
                MPI_Waitall(window, req, MPI_STATUSES_IGNORE);
                MPI_Recv(ack, 4, MPI_CHAR, peer, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                if (i >= skip) timed += MPI_Wtime() - round;
            } else {
                for (int w = 0; w < window; w++)
                    MPI_Irecv(r_buf, size, MPI_CHAR, peer, 100, MPI_COMM_WORLD, &req[w]);
                MPI_Waitall(window, req, MPI_STATUSES_IGNORE);
                MPI_Send(ack, 4, MPI_CHAR, peer, 101, MPI_COMM_WORLD);
            }
        }
        double t = MPI_Wtime() - start;
        if (multi_lat || mbw) {
            /* Each rank's share, summed at rank 0: latencies of the paired ranks, or the
             * senders' window times. */
            double share = multi_lat ? (paired ? t * 1e6 / (2.0 * iters) : 0) : timed, sum = 0;
            MPI_Reduce(&share, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
            if (rank == 0 && multi_lat)
                printf("%-10ld%18.2f\n", size, sum / (2 * pairs));
            if (rank == 0 && mbw) {
                double bw = size / 1e6 * pairs * (double)iters * window / (sum / pairs);
                printf("%-10ld%18.2f%18.2f\n", size, bw, bw * 1e6 / size);
            }
        } else if (rank == 0) {
            double v = lat ? t * 1e6 / (2.0 * iters)
                           : size / 1e6 * (double)iters * window * (bibw ? 2 : 1) / t;
            printf("%-10ld%18.2f\n", size, v);
        }
        fflush(stdout);
    }
    free(s_buf);
    free(r_buf);
    MPI_Finalize();
    return 0;
}
