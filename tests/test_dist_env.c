/* Tests of src/dist/env.c: the rank variables of each launcher, defaults, and the errors for
 * malformed or inconsistent variables. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "dist/env.h"

#include <string.h>

/* A fake environment: NULL-terminated name/value pairs. */
static const char *table_get(const char *name, void *ctx) {
    const char *const *kv = ctx;
    for (; kv[0]; kv += 2)
        if (!strcmp(kv[0], name)) return kv[1];
    return NULL;
}

static void test_no_launcher_is_single_process(void **state) {
    (void)state;
    const char *env[] = {NULL};
    dist_env e;
    assert_int_equal(dist_env_detect(&e, table_get, env), ZY_OK);
    assert_int_equal(e.rank, 0);
    assert_int_equal(e.world, 1);
    assert_int_equal(e.local_rank, 0);
    assert_string_equal(e.master_addr, "127.0.0.1");
    assert_int_equal(e.master_port, DIST_DEFAULT_PORT);
}

static void test_torchrun_variables(void **state) {
    (void)state;
    const char *env[] = {
        "RANK", "5",           "WORLD_SIZE",  "8",           "LOCAL_RANK", "1", "LOCAL_WORLD_SIZE",
        "4",    "MASTER_ADDR", "node0.local", "MASTER_PORT", "1234",       NULL};
    dist_env e;
    assert_int_equal(dist_env_detect(&e, table_get, env), ZY_OK);
    assert_int_equal(e.rank, 5);
    assert_int_equal(e.world, 8);
    assert_int_equal(e.local_rank, 1);
    assert_int_equal(e.local_world, 4);
    assert_string_equal(e.master_addr, "node0.local");
    assert_int_equal(e.master_port, 1234);
}

static void test_openmpi_single_node_defaults_to_loopback(void **state) {
    (void)state;
    const char *env[] = {"OMPI_COMM_WORLD_RANK",
                         "1",
                         "OMPI_COMM_WORLD_SIZE",
                         "2",
                         "OMPI_COMM_WORLD_LOCAL_RANK",
                         "1",
                         "OMPI_COMM_WORLD_LOCAL_SIZE",
                         "2",
                         NULL};
    dist_env e;
    assert_int_equal(dist_env_detect(&e, table_get, env), ZY_OK);
    assert_int_equal(e.rank, 1);
    assert_int_equal(e.world, 2);
    assert_int_equal(e.local_rank, 1);
    assert_string_equal(e.source, "OpenMPI");
    assert_string_equal(e.master_addr, "127.0.0.1");
}

static void test_openmpi_multi_node_needs_master_addr(void **state) {
    (void)state;
    const char *env[] = {"OMPI_COMM_WORLD_RANK",
                         "3",
                         "OMPI_COMM_WORLD_SIZE",
                         "4",
                         "OMPI_COMM_WORLD_LOCAL_RANK",
                         "1",
                         "OMPI_COMM_WORLD_LOCAL_SIZE",
                         "2",
                         NULL};
    dist_env e;
    assert_int_equal(dist_env_detect(&e, table_get, env), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "MASTER_ADDR"));
}

static void test_pmi_and_slurm(void **state) {
    (void)state;
    const char *pmi[] = {"PMI_RANK", "2",           "PMI_SIZE", "3", "MPI_LOCALRANKID",
                         "0",        "MASTER_ADDR", "10.0.0.1", NULL};
    dist_env e;
    assert_int_equal(dist_env_detect(&e, table_get, pmi), ZY_OK);
    assert_int_equal(e.rank, 2);
    assert_int_equal(e.world, 3);
    assert_int_equal(e.local_rank, 0);
    assert_int_equal(e.local_world, -1); /* unknown: derived later from host names */
    const char *slurm[] = {
        "SLURM_PROCID", "7",           "SLURM_NTASKS", "16", "SLURM_LOCALID", "3", "MASTER_ADDR",
        "n1",           "MASTER_PORT", "29600",        NULL};
    assert_int_equal(dist_env_detect(&e, table_get, slurm), ZY_OK);
    assert_int_equal(e.rank, 7);
    assert_int_equal(e.world, 16);
    assert_int_equal(e.local_rank, 3);
    assert_string_equal(e.source, "Slurm");
    assert_int_equal(e.master_port, 29600);
}

static void test_explicit_rank_wins_over_slurm(void **state) {
    (void)state;
    /* torchrun inside an sbatch job: RANK/WORLD_SIZE describe the job, not srun's one task. */
    const char *env[] = {"SLURM_PROCID", "0", "SLURM_NTASKS", "1",  "RANK", "1",
                         "WORLD_SIZE",   "2", "MASTER_ADDR",  "h0", NULL};
    dist_env e;
    assert_int_equal(dist_env_detect(&e, table_get, env), ZY_OK);
    assert_int_equal(e.rank, 1);
    assert_int_equal(e.world, 2);
}

static void test_bad_values_name_the_variable(void **state) {
    (void)state;
    dist_env e;
    const char *half[] = {"RANK", "0", NULL};
    assert_int_equal(dist_env_detect(&e, table_get, half), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "WORLD_SIZE"));
    const char *notnum[] = {"RANK", "one", "WORLD_SIZE", "2", NULL};
    assert_int_equal(dist_env_detect(&e, table_get, notnum), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "RANK='one'"));
    const char *big[] = {"RANK", "2", "WORLD_SIZE", "2", NULL};
    assert_int_equal(dist_env_detect(&e, table_get, big), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "not below"));
    const char *zero[] = {"RANK", "0", "WORLD_SIZE", "0", NULL};
    assert_int_equal(dist_env_detect(&e, table_get, zero), ZY_ERR);
    const char *port[] = {"MASTER_PORT", "70000", NULL};
    assert_int_equal(dist_env_detect(&e, table_get, port), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "MASTER_PORT"));
    const char *neg[] = {"RANK", "-1", "WORLD_SIZE", "2", "MASTER_ADDR", "x", NULL};
    assert_int_equal(dist_env_detect(&e, table_get, neg), ZY_ERR);
    const char *local[] = {"RANK", "0", "WORLD_SIZE", "2", "LOCAL_RANK", "2", "LOCAL_WORLD_SIZE",
                           "2",    NULL};
    assert_int_equal(dist_env_detect(&e, table_get, local), ZY_ERR);
}

static void test_local_rank_from_host_names(void **state) {
    (void)state;
    /* ranks 0..5 on hosts a, b, a, b, a, c */
    char hosts[6][8] = {"a", "b", "a", "b", "a", "c"};
    int lr, lw;
    dist_local_from_hosts(&hosts[0][0], 8, 6, 4, &lr, &lw);
    assert_int_equal(lr, 2);
    assert_int_equal(lw, 3);
    dist_local_from_hosts(&hosts[0][0], 8, 6, 3, &lr, &lw);
    assert_int_equal(lr, 1);
    assert_int_equal(lw, 2);
    dist_local_from_hosts(&hosts[0][0], 8, 6, 5, &lr, &lw);
    assert_int_equal(lr, 0);
    assert_int_equal(lw, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_launcher_is_single_process),
        cmocka_unit_test(test_torchrun_variables),
        cmocka_unit_test(test_openmpi_single_node_defaults_to_loopback),
        cmocka_unit_test(test_openmpi_multi_node_needs_master_addr),
        cmocka_unit_test(test_pmi_and_slurm),
        cmocka_unit_test(test_explicit_rank_wins_over_slurm),
        cmocka_unit_test(test_bad_values_name_the_variable),
        cmocka_unit_test(test_local_rank_from_host_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
