/* The OSU one-sided method (put_latency, get_latency, put_bw, get_bw, put_bibw, acc_latency,
 * get_acc_latency, fop_latency, cas_latency), in C, so that Open MPI and MPICH run the same
 * loops as mpirt's Rust ports (osu-benches/src/one_sided.rs): same loop counts, window kinds,
 * synchronisations and output format. Rank 0 is the origin, rank 1 the target; the fence and
 * PSCW loops of the latency tests are ping-pongs (half the round trip printed), and in put_bibw
 * both ranks put to each other in every epoch (fence or pscw only, twice one way's bandwidth).
 * Usage: osu_rma TEST [create|allocate|dynamic [lock|flush|flush_local|lock_all|pscw|fence
 *        [MAX_SIZE [MIN_SIZE]]]]   (defaults: allocate, flush (put_bibw: fence), 4 MiB, 1) */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LARGE 8192
#define WINDOW 64

static const char *test, *win_kind, *sync_kind;
static int rank, atomic, bw, bibw;
static MPI_Win win;
static MPI_Aint disp;
static char *s_buf, *r_buf, *c_buf, *win_mem;
static uint64_t one = 1, zero = 0, result;

/* One operation of the test on rank `to` (the bandwidth test: a window of puts). */
static void issue(int to, long size) {
    if (!strcmp(test, "put_latency")) {
        MPI_Put(s_buf, size, MPI_CHAR, to, disp, size, MPI_CHAR, win);
    } else if (!strcmp(test, "put_bw") || bibw) {
        for (int j = 0; j < WINDOW; j++)
            MPI_Put(s_buf + j * size, size, MPI_CHAR, to, disp + j * size, size, MPI_CHAR, win);
    } else if (!strcmp(test, "get_bw")) {
        /* Each get into its own part of the buffer, as the Rust port must (and as OSU's does). */
        for (int j = 0; j < WINDOW; j++)
            MPI_Get(r_buf + j * size, size, MPI_CHAR, to, disp + j * size, size, MPI_CHAR, win);
    } else if (!strcmp(test, "get_latency")) {
        MPI_Get(r_buf, size, MPI_CHAR, to, disp, size, MPI_CHAR, win);
    } else if (!strcmp(test, "acc_latency")) {
        MPI_Accumulate(s_buf, size, MPI_CHAR, to, disp, size, MPI_CHAR, MPI_SUM, win);
    } else if (!strcmp(test, "get_acc_latency")) {
        MPI_Get_accumulate(s_buf, size, MPI_CHAR, c_buf, size, MPI_CHAR, to, disp, size,
                           MPI_CHAR, MPI_SUM, win);
    } else if (!strcmp(test, "fop_latency")) {
        MPI_Fetch_and_op(&one, &result, MPI_UINT64_T, to, disp, MPI_SUM, win);
    } else {
        MPI_Compare_and_swap(&one, &zero, &result, MPI_UINT64_T, to, disp, win);
    }
}

static void make_window(long bytes) {
    disp = 0;
    if (!strcmp(win_kind, "create")) {
        win_mem = calloc(bytes, 1);
        MPI_Win_create(win_mem, bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    } else if (!strcmp(win_kind, "dynamic")) {
        win_mem = calloc(bytes, 1);
        MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win);
        MPI_Win_attach(win, win_mem, bytes);
        MPI_Aint mine, theirs[2];
        MPI_Get_address(win_mem, &mine);
        MPI_Allgather(&mine, 1, MPI_AINT, theirs, 1, MPI_AINT, MPI_COMM_WORLD);
        disp = theirs[1 - rank];
    } else {
        win_mem = NULL;
        char *base;
        MPI_Win_allocate(bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    }
}

static void free_window(void) {
    if (!strcmp(win_kind, "dynamic")) MPI_Win_detach(win, win_mem);
    MPI_Win_free(&win);
    free(win_mem);
}

/* One size's loop; rank 0's seconds for the timed iterations. */
static double timed(long size, int iterations, int skip) {
    int peer = 1 - rank, total = iterations + skip, ping_pong = !bw;
    MPI_Group world_group, group;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    MPI_Group_incl(world_group, 1, &peer, &group);
    MPI_Barrier(MPI_COMM_WORLD);
    double start = 0;
    if (!strcmp(sync_kind, "lock") && rank == 0) {
        for (int i = 0; i < total; i++) {
            if (i == skip) start = MPI_Wtime();
            MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
            issue(1, size);
            MPI_Win_unlock(1, win);
        }
    } else if (!strcmp(sync_kind, "lock_all") && rank == 0) {
        for (int i = 0; i < total; i++) {
            if (i == skip) start = MPI_Wtime();
            MPI_Win_lock_all(0, win);
            issue(1, size);
            MPI_Win_unlock_all(win);
        }
    } else if ((!strcmp(sync_kind, "flush") || !strcmp(sync_kind, "flush_local")) && rank == 0) {
        MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
        for (int i = 0; i < total; i++) {
            if (i == skip) start = MPI_Wtime();
            issue(1, size);
            if (!strcmp(sync_kind, "flush")) MPI_Win_flush(1, win);
            else MPI_Win_flush_local(1, win);
        }
        MPI_Win_unlock(1, win);
    } else if (!strcmp(sync_kind, "fence")) {
        /* As mpirt's fence_epoch: a fence before and after each epoch. */
        for (int i = 0; i < total; i++) {
            if (i == skip) start = MPI_Wtime();
            MPI_Win_fence(0, win);
            if (rank == 0 || bibw) issue(peer, size);
            MPI_Win_fence(0, win);
            if (ping_pong) {
                MPI_Win_fence(0, win);
                if (rank == 1) issue(0, size);
                MPI_Win_fence(0, win);
            }
        }
    } else if (!strcmp(sync_kind, "pscw") && bibw) {
        for (int i = 0; i < total; i++) {
            if (i == skip) start = MPI_Wtime();
            MPI_Win_post(group, 0, win);
            MPI_Win_start(group, 0, win);
            issue(peer, size);
            MPI_Win_complete(win);
            MPI_Win_wait(win);
        }
    } else if (!strcmp(sync_kind, "pscw")) {
        for (int i = 0; i < total; i++) {
            if (i == skip) start = MPI_Wtime();
            if (rank == 0) {
                MPI_Win_start(group, 0, win);
                issue(1, size);
                MPI_Win_complete(win);
                if (ping_pong) { MPI_Win_post(group, 0, win); MPI_Win_wait(win); }
            } else {
                MPI_Win_post(group, 0, win);
                MPI_Win_wait(win);
                if (ping_pong) { MPI_Win_start(group, 0, win); issue(0, size); MPI_Win_complete(win); }
            }
        }
    }
    double end = MPI_Wtime();
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    return end - start;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    test = argc > 1 ? argv[1] : "put_latency";
    win_kind = argc > 2 ? argv[2] : "allocate";
    bibw = !strcmp(test, "put_bibw");
    sync_kind = argc > 3 ? argv[3] : (bibw ? "pscw" : "flush");
    if (bibw && strcmp(sync_kind, "fence") && strcmp(sync_kind, "pscw")) {
        if (rank == 0) fprintf(stderr, "put_bibw synchronises with pscw or fence, not %s\n", sync_kind);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long max = argc > 4 ? atol(argv[4]) : (1L << 22);
    long min = argc > 5 ? atol(argv[5]) : 1;
    atomic = !strcmp(test, "fop_latency") || !strcmp(test, "cas_latency");
    bw = !strcmp(test, "put_bw") || !strcmp(test, "get_bw") || bibw;
    if (atomic) min = max = 8;
    /* The bandwidth tests put each of a window's puts from its own part, as OSU's loop does. */
    s_buf = malloc(bw ? max * WINDOW : max);
    r_buf = malloc(bw ? max * WINDOW : max);
    c_buf = malloc(max);
    memset(s_buf, 'a', bw ? max * WINDOW : max);
    const char *title = !strcmp(test, "put_latency") ? "OSU MPI_Put Latency Test"
                      : !strcmp(test, "get_latency") ? "OSU MPI_Get latency Test"
                      : !strcmp(test, "put_bw") ? "OSU MPI_Put Bandwidth Test"
                      : !strcmp(test, "get_bw") ? "OSU MPI_Get Bandwidth Test"
                      : bibw ? "OSU MPI_Put Bi-directional Bandwidth Test"
                      : !strcmp(test, "acc_latency") ? "OSU MPI_Accumulate latency Test"
                      : !strcmp(test, "get_acc_latency") ? "OSU MPI_Get_accumulate latency Test"
                      : !strcmp(test, "fop_latency") ? "OSU MPI_Fetch_and_op latency Test"
                                                     : "OSU MPI_Compare_and_swap latency Test";
    if (rank == 0)
        printf("# %s v7.4\n# Window creation: MPI_Win_%s\n# Synchronization: %s\n"
               "# Datatype: MPI_CHAR.\n%-10s%18s\n",
               title, !strcmp(win_kind, "dynamic") ? "create_dynamic" : win_kind, sync_kind,
               "# Size", bw ? "Bandwidth (MB/s)" : "Latency (us)");
    for (long size = min; size <= max; size *= 2) {
        int iterations = size > LARGE ? (bw ? 20 : 1000) : (bw ? 100 : 10000);
        int skip = size > LARGE ? (bw ? 2 : 10) : (bw ? 10 : 100);
        make_window(atomic ? 8 : (bw ? size * WINDOW : size));
        double seconds = timed(size, iterations, skip);
        free_window();
        if (rank == 0) {
            double value = bw ? (bibw ? 2 : 1) * (size / 1e6 * WINDOW * iterations / seconds)
                         : seconds * 1e6 / iterations
                             / ((!strcmp(sync_kind, "fence") || !strcmp(sync_kind, "pscw")) ? 2 : 1);
            printf("%-10ld%18.2f\n", size, value);
            fflush(stdout);
        }
    }
    MPI_Finalize();
    return 0;
}
