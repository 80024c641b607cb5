/*
 * test_topology_mpi.c - roles and meshes under mpirun (replicator/
 * runtime.h), run by CTest on 4 ranks (one worker each) and on 2 ranks x 2
 * threads (argument 2: a worker is a thread in a rank). The job has 4
 * workers either way:
 *  - a 2 data x 2 model mesh: every worker checks its coordinates and the
 *    members and order of each axis, role and world communicator, then sync
 *    training over the data axis keeps each model coordinate its own shard;
 *  - roles: learners (2), an actor and a server, started as long-lived
 *    functions, exchange messages over the world (collectives, and the
 *    actor's point-to-point message to the server) and the learners' role
 *    communicator, and shut down cleanly.
 * The checks run inside the workers (topology_check.h, shared with the
 * threads test); each rank prints its failures, rank 0 prints ok or FAIL.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topology_check.h"

static rp_config base(int per)
{
    rp_config cfg = rp_config_default();
    cfg.backend = RP_BACKEND_MPI;
    cfg.replicas = per;
    cfg.threads_per_replica = 1;
    cfg.timeout_s = 60;
    cfg.checksum_every = 1;
    return cfg;
}

static int fail(const char *what)
{
    fprintf(stderr, "%s: %s: %s\n", what, rp_status_name(rp_last_status()), rp_last_error());
    return 1;
}

static int mesh(int per)
{
    rp_config cfg = base(per);
    cfg.nroles = 1;
    cfg.roles[0] = rp_role_make("replica", 2, 2);
    rp_replicator *r = NULL;
    if (rp_replicator_create(&r, &cfg) != RP_OK) return fail("mesh: create");
    int failures = 0;
    tc_mesh m = {.data = 2, .model = 2};
    if (rp_replicator_run(r, mesh_fn, &m) != RP_OK) failures += fail("mesh: checks");
    for (int i = 0; i < rp_replicator_local_replicas(r) && !failures; i++)
        if (!m.checked[rp_replica_worker(rp_replicator_replica(r, i))])
            failures += fail("mesh: not checked");
    static tc_train t;
    if (!failures && rp_replicator_run(r, mesh_build_fn, &t) != RP_OK)
        failures += fail("mesh: build");
    for (int s = 0; s < 3 && !failures; s++)
        if (rp_replicator_run(r, mesh_step_fn, &t) != RP_OK) failures += fail("mesh: step");
    if (!failures && rp_replicator_run(r, mesh_teardown_fn, &t) != RP_OK)
        failures += fail("mesh: teardown");
    rp_replicator_destroy(r);
    return failures;
}

static int roles(int per)
{
    rp_config cfg = base(per);
    tc_roles_config(&cfg, 2, 1);
    rp_replicator *r = NULL;
    if (rp_replicator_create(&r, &cfg) != RP_OK) return fail("roles: create");
    tc_roles j;
    memset(&j, 0, sizeof j);
    j.learners = 2;
    j.actors = 1;
    j.p2p = 1;
    int failures = tc_run_roles(r, &j) != RP_OK ? fail("roles") : 0;
    /* The server's process heard from the actor point-to-point. */
    for (int i = 0; i < rp_replicator_local_replicas(r); i++)
        if (!strcmp(rp_replica_role(rp_replicator_replica(r, i)), "server") && j.p2p_seen != 1)
            failures += fail("roles: the server did not hear from the actor");
    rp_replicator_destroy(r);
    return failures;
}

int main(int argc, char **argv)
{
    rp_log_set_level(RP_LOG_WARN);
    int per = argc > 1 ? atoi(argv[1]) : 1;
    if (per < 1 || per > 4) {
        fprintf(stderr, "usage: test_topology_mpi [workers per rank, 1..4]\n");
        return 2;
    }
    int failures = mesh(per);
    failures += roles(per);
    int rank, total = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("%s\n", total ? "FAIL" : "ok");
    return total ? 1 : 0;
}
