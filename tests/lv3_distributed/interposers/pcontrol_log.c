/* A PMPI interposer for tests/lv3_distributed/test_mpi_profiling.py: appends each
 * MPI_Pcontrol level to the file named by D5_PCONTROL_LOG (one line per call, the rank's
 * file), then calls the MPI library's PMPI_Pcontrol, as a profiling tool would. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int MPI_Pcontrol(const int level, ...)
{
    const char *path = getenv("D5_PCONTROL_LOG");
    if (path != NULL) {
        FILE *log = fopen(path, "a");
        if (log != NULL) {
            fprintf(log, "%d\n", level);
            fclose(log);
        }
    }
    return PMPI_Pcontrol(level);
}
