/*
 * none.c - the MPI parameter servers in a build without MPI (CMake picks
 * this file when it finds no MPI): the calls exist and say so.
 */
#include "ps/ps_internal.h"

static rp_status no_mpi(void)
{
    return RP_ERROR(RP_ERR_UNSUPPORTED,
                    "this build of replicator has no MPI backend, so no MPI parameter servers "
                    "(install libopenmpi-dev and rebuild: scripts/setup.sh)");
}

rp_status rp_ps_mpi_group_create(rp_ps_group **g, int servers, double timeout_s)
{
    (void)servers;
    (void)timeout_s;
    if (g) *g = NULL;
    return no_mpi();
}

bool rp_ps_group_is_server(const rp_ps_group *g)
{
    (void)g;
    return false;
}
int rp_ps_group_workers(const rp_ps_group *g)
{
    (void)g;
    return 0;
}
int rp_ps_group_index(const rp_ps_group *g)
{
    (void)g;
    return -1;
}

rp_status rp_ps_mpi_serve(rp_ps_group *g)
{
    (void)g;
    return no_mpi();
}

rp_status rp_ps_mpi_create(rp_ps **ps, rp_ps_group *g, int64_t numel, const rp_ps_config *cfg)
{
    (void)g;
    (void)numel;
    (void)cfg;
    if (ps) *ps = NULL;
    return no_mpi();
}

void rp_ps_group_fail(rp_ps_group *g, rp_status status, const char *reason)
{
    (void)g;
    (void)status;
    (void)reason;
}

void rp_ps_group_destroy(rp_ps_group *g)
{
    (void)g;
}
