/* The multi-threaded tests of mpirt's ports (osu_latency_mt, osu_mbw_mr_mt) in C over
 * MPI_THREAD_MULTIPLE, so that Open MPI and MPICH run the same loops: same thread split of the
 * iterations, tags, loop counts and output format. Threads are started per message size, after
 * a barrier of the two ranks, as in the Rust ports (their start is not timed).
 * Usage: osu_mt latency_mt [SENDERS [RECEIVERS [MAX_SIZE]]]
 *        osu_mt mbw_mr_mt [THREADS [MAX_SIZE]]
 * OSU_MT_ITERATIONS, where set, is the timed iterations at every size (the ports' -i). */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LARGE 8192
#define WINDOW 64
#define MAX_THREADS 128

static long size, total, skip_iters;
static int senders, receivers, threads;
static pthread_barrier_t together;

/* Iteration i's ping and pong tags: 1 and 2 with one sender, i both ways with several. */
static int ping_tag(long i) { return senders > 1 ? (int)i : 1; }
static int pong_tag(long i) { return senders > 1 ? (int)i : 2; }

static void *ping(void *arg) {
    long t = (long)arg;
    char *s = malloc(size + 1), *r = malloc(size + 1);
    memset(s, 'a', size + 1);
    double timed = 0;
    for (long i = t; i < total; i += senders) {
        double start = MPI_Wtime();
        MPI_Send(s, size, MPI_CHAR, 1, ping_tag(i), MPI_COMM_WORLD);
        MPI_Recv(r, size, MPI_CHAR, 1, pong_tag(i), MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (i >= skip_iters) timed += MPI_Wtime() - start;
    }
    free(s);
    free(r);
    double *out = malloc(sizeof *out);
    *out = timed;
    return out;
}

static void *pong(void *arg) {
    long t = (long)arg;
    char *s = malloc(size + 1), *r = malloc(size + 1);
    memset(s, 'a', size + 1);
    for (long i = t; i < total; i += receivers) {
        MPI_Recv(r, size, MPI_CHAR, 0, ping_tag(i), MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(s, size, MPI_CHAR, 0, pong_tag(i), MPI_COMM_WORLD);
    }
    free(s);
    free(r);
    return NULL;
}

/* One thread pair of the message rate: windows on tags 2t (data) and 2t+1 (acknowledgement). */
static void *pair(void *arg) {
    long t = (long)arg;
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char *buf = malloc(size + 1), ack[4] = {0};
    memset(buf, 'a', size + 1);
    MPI_Request req[WINDOW];
    double timed = 0;
    for (long i = 0; i < total; i++) {
        pthread_barrier_wait(&together);
        double start = MPI_Wtime();
        for (int w = 0; w < WINDOW; w++) {
            if (rank == 0)
                MPI_Isend(buf, size, MPI_CHAR, 1, 2 * t, MPI_COMM_WORLD, &req[w]);
            else
                MPI_Irecv(buf, size, MPI_CHAR, 0, 2 * t, MPI_COMM_WORLD, &req[w]);
        }
        MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
        if (rank == 0) {
            MPI_Recv(ack, 4, MPI_CHAR, 1, 2 * t + 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (i >= skip_iters) timed += MPI_Wtime() - start;
        } else {
            MPI_Send(ack, 4, MPI_CHAR, 0, 2 * t + 1, MPI_COMM_WORLD);
        }
    }
    free(buf);
    double *out = malloc(sizeof *out);
    *out = timed;
    return out;
}

int main(int argc, char **argv) {
    int provided, rank, nprocs;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    const char *mode = argc > 1 ? argv[1] : "latency_mt";
    int lat = strcmp(mode, "latency_mt") == 0;
    if (provided != MPI_THREAD_MULTIPLE || nprocs != 2) {
        if (rank == 0) fprintf(stderr, "needs MPI_THREAD_MULTIPLE and exactly two processes\n");
        MPI_Finalize();
        return 1;
    }
    senders = lat ? (argc > 2 ? atoi(argv[2]) : 1) : 0;
    receivers = lat ? (argc > 3 ? atoi(argv[3]) : 2) : 0;
    threads = lat ? 0 : (argc > 2 ? atoi(argv[2]) : 2);
    long max = atol(argc > (lat ? 4 : 3) ? argv[lat ? 4 : 3] : "4194304");
    if (senders > MAX_THREADS || receivers > MAX_THREADS || threads > MAX_THREADS) return 1;
    if (rank == 0 && lat)
        printf("# Number of Sender threads: %d \n# Number of Receiver threads: %d\n"
               "\n# OSU MPI Multi-threaded Latency Test v7.4\n# Datatype: MPI_CHAR.\n%-10s%18s\n",
               senders, receivers, "# Size", "Latency (us)");
    else if (rank == 0)
        printf("# OSU MPI Multi-threaded Message Rate Test v7.4\n"
               "# [ threads: %d ] [ window size: %d ]\n# Datatype: MPI_CHAR.\n%-10s%18s%18s\n",
               threads, WINDOW, "# Size", "MB/s", "Messages/s");
    if (!lat) pthread_barrier_init(&together, NULL, threads);
    pthread_t tid[MAX_THREADS];
    for (size = 1; size <= max; size *= 2) {
        const char *fixed = getenv("OSU_MT_ITERATIONS");
        long iters = fixed ? atol(fixed) : lat ? (size > LARGE ? 1000 : 10000) : 100;
        skip_iters = lat ? (size > LARGE ? 10 : 100) : 10;
        total = iters + skip_iters;
        MPI_Barrier(MPI_COMM_WORLD);
        int n = lat ? (rank == 0 ? senders : receivers) : threads;
        void *(*run)(void *) = lat ? (rank == 0 ? ping : pong) : pair;
        for (long t = 0; t < n; t++) pthread_create(&tid[t], NULL, run, (void *)t);
        double times[MAX_THREADS] = {0};
        for (int t = 0; t < n; t++) {
            void *out;
            pthread_join(tid[t], &out);
            if (out) {
                times[t] = *(double *)out;
                free(out);
            }
        }
        if (rank != 0) continue;
        if (lat) {
            double latency = times[skip_iters % senders] * 1e6 / (2.0 * iters / senders);
            printf("%-10ld%18.2f\n", size, latency);
        } else {
            double sum = 0;
            for (int t = 0; t < n; t++) sum += times[t];
            double mb = size / 1e6 * (double)threads * iters * WINDOW / (sum / threads);
            printf("%-10ld%18.2f%18.2f\n", size, mb, mb * 1e6 / size);
        }
        fflush(stdout);
    }
    MPI_Finalize();
    return 0;
}
