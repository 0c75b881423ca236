/* halo_column: the C equivalent of osu-benches/src/bin/halo_column.rs, on any C MPI. Two
 * ranks each hold a matrix of size / 8 rows by COLUMNS doubles, row-major, and a halo matrix
 * of the same shape; in each iteration each sends its matrix's column 1 to the other and
 * receives the other's into column 0 of its halo matrix, with one MPI_Sendrecv of
 * MPI_Type_vector(rows, 1, COLUMNS, MPI_DOUBLE). The same
 * loops as the Rust one (OSU's: 1000 timed iterations after 100, 100 after 10 past 8 KiB);
 * the figure is the column's bytes over the time of one exchange. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define COLUMNS 4
#define MIN_SIZE (4 << 10)
#define MAX_SIZE (4 << 20)
#define LARGE_MESSAGE_SIZE 8192

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0) fprintf(stderr, "This test requires exactly two processes\n");
        MPI_Finalize();
        return 1;
    }
    int peer = 1 - rank;
    size_t max_rows = MAX_SIZE / 8;
    double *matrix = malloc(max_rows * COLUMNS * sizeof(double));
    double *halo = calloc(max_rows * COLUMNS, sizeof(double));
    for (size_t i = 0; i < max_rows * COLUMNS; i++) matrix[i] = (double)(i + rank * 7);
    if (rank == 0) {
        printf("\n# Halo Exchange of a Strided Column (vector datatype) Test v7.4\n"
               "# Datatype: MPI_DOUBLE.\n%-10s%18s\n", "# Size", "Bandwidth (MB/s)");
        fflush(stdout);
    }
    for (int bytes = MIN_SIZE; bytes <= MAX_SIZE; bytes *= 2) {
        int rows = bytes / 8;
        int iterations = bytes > LARGE_MESSAGE_SIZE ? 100 : 1000;
        int skip = bytes > LARGE_MESSAGE_SIZE ? 10 : 100;
        MPI_Datatype column;
        MPI_Type_vector(rows, 1, COLUMNS, MPI_DOUBLE, &column);
        MPI_Type_commit(&column);
        MPI_Barrier(MPI_COMM_WORLD);
        double start = 0;
        for (int i = 0; i < iterations + skip; i++) {
            if (i == skip) start = MPI_Wtime();
            MPI_Sendrecv(matrix + 1, 1, column, peer, 1, halo, 1, column, peer, 1,
                         MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        double seconds = MPI_Wtime() - start;
        MPI_Type_free(&column);
        if (rank == 0) {
            printf("%-10d%18.2f\n", bytes, bytes / 1e6 * iterations / seconds);
            fflush(stdout);
        }
    }
    for (size_t row = 0; row < max_rows; row++) {
        if (halo[row * COLUMNS] != (double)(row * COLUMNS + 1 + peer * 7)) {
            fprintf(stderr, "row %zu of the halo on rank %d is wrong\n", row, rank);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    free(matrix);
    free(halo);
    MPI_Finalize();
    return 0;
}
