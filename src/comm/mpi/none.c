/*
 * none.c - the MPI backend in a build without MPI (CMake picks this file
 * when it finds no MPI): the calls exist and say so.
 */
#include "comm/comm_internal.h"

rp_status rp_comm_mpi_create(rp_comm **comm, double timeout_s)
{
    (void)timeout_s;
    if (comm) *comm = NULL;
    return RP_ERROR(RP_ERR_UNSUPPORTED, "this build of replicator has no MPI backend "
                                        "(install libopenmpi-dev and rebuild: scripts/setup.sh)");
}

bool rp_comm_mpi_launched(void)
{
    return rp_env_get()->mpi_launched;
}

void rp_comm_mpi_abort(int code)
{
    (void)code;
}
