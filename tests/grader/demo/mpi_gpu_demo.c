/* mpi_gpu_demo.c — the grader's own MPI and GPU test binary (tests/grader/selftest.sh).
 *
 * No lab has MPI or GPU tests yet; this shows that the grader's runner handles them:
 *   - grader_mpi::allreduce_of_ranks runs under $MPIEXEC with the ranks the rubric gives it
 *     ("mpi=2"); it passes only when every rank's Criterion run says ok and every rank's
 *     completion record is there (tests/grader/run-one.sh);
 *   - grader_mpi::one_rank_leaves_early has rank 1 _exit(0) halfway: Criterion on that rank
 *     says ok, but its record is missing, so the test fails;
 *   - grader_gpu::needs_a_gpu skips itself (cr_skip) where there is no GPU: the grader
 *     reports it as skipped, worth KN_GRADE_SKIP_WEIGHT of its points.
 * Built with mpicc against the grader's hardened hook (kn_test_grade.c). */
#include <mpi.h>
#include <unistd.h>

#include "kn_test.h"

/* MPI_Init once per process: Criterion runs each test in a fresh worker process. */
static int start_mpi(int *rank) {
    int init = 0, size = 0;
    MPI_Initialized(&init);
    if (!init) MPI_Init(NULL, NULL);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    return size;
}

KN_TEST(grader_mpi, allreduce_of_ranks) {
    int rank, size = start_mpi(&rank), sum = 0;
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    cr_assert(size >= 2, "run this test with at least 2 ranks, got %d", size);
    cr_assert(sum == size * (size - 1) / 2, "sum of ranks %d, expected %d", sum, size * (size - 1) / 2);
    MPI_Finalize();
}

KN_TEST(grader_mpi, one_rank_leaves_early) {
    int rank;
    start_mpi(&rank);
    if (rank == 1) _exit(0); /* what a hostile unit would do on one rank */
    MPI_Finalize();
}

KN_TEST(grader_gpu, needs_a_gpu) {
    if (access("/dev/nvidiactl", F_OK) != 0) cr_skip("no GPU on this machine");
    cr_assert(1);
}
