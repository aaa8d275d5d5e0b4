/* The MPI backend's entry points in a build without MPI (make MPI=0, or no mpicc): each says in
 * one line what to install. */
#ifndef ZY_HAVE_MPI
#include "base/err.h"
#include "dist/comm.h"

#include <string.h>

int comm_have_mpi(void) {
    return 0;
}

int comm_init_mpi(zy_comm *c, double timeout_s) {
    (void)timeout_s;
    memset(c, 0, sizeof *c);
    return zy_fail("this zayac was built without MPI: install libopenmpi-dev and rebuild");
}
#endif
