/*
 * test_trainer_command.c - the library's calls for a model's training command
 * (replicator/trainer.h): loading a run directory with its saved configuration, the guard that
 * holds a model built from that configuration to the checkpoint's tensors, agreeing options
 * across ranks (nothing to agree outside mpirun), reporting an error under the command's name,
 * a command-line fault in the commands' words (options.h) and the bf16 header line.
 * tests/cli_sngan.sh, cli_d4pg.sh and cli_mpi*.sh drive the same calls through the command.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "replicator/replicator.h"
#include "testutil.h"

/* A run directory `name` in the scratch directory holding one f32 tensor "param/w" [2, 3] and,
   unless config is NULL, the configuration text; its path into dir[size]. */
static void make_run(char *dir, size_t size, const char *name, const char *config)
{
    tu_tmp_path(dir, size, name);
    assert_int_equal(mkdir(dir, 0755), 0);
    rp_checkpoint *ck = NULL;
    assert_int_equal(rp_checkpoint_create(&ck), RP_OK);
    float w[6] = {1, 2, 3, 4, 5, 6};
    assert_int_equal(rp_checkpoint_add_f32(ck, "param/w", 2, (int64_t[]){2, 3}, w), RP_OK);
    if (config) assert_int_equal(rp_checkpoint_set_meta(ck, "replicator.config", config), RP_OK);
    char path[4096];
    rp_trainer_checkpoint_path(path, sizeof path, dir);
    assert_int_equal(rp_checkpoint_save(ck, path), RP_OK);
    rp_checkpoint_destroy(ck);
}

static void test_load_run_gives_the_config(void **state)
{
    (void)state;
    char dir[4096];
    make_run(dir, sizeof dir, "run", "{\"model\":\"clusters\",\"epochs\":3}");
    rp_checkpoint *ck = NULL;
    const char *config = NULL;
    assert_int_equal(rp_trainer_load_run(dir, &ck, &config), RP_OK);
    assert_non_null(ck);
    assert_string_equal(config, "{\"model\":\"clusters\",\"epochs\":3}");
    rp_checkpoint_destroy(ck);
}

static void test_load_run_without_config_is_refused(void **state)
{
    (void)state;
    char dir[4096], path[4096];
    make_run(dir, sizeof dir, "bare", NULL);
    rp_checkpoint *ck = (rp_checkpoint *)&ck;
    const char *config = "stale";
    assert_int_equal(rp_trainer_load_run(dir, &ck, &config), RP_ERR_FORMAT);
    assert_null(ck);
    assert_null(config);
    rp_trainer_checkpoint_path(path, sizeof path, dir);
    tu_assert_error_contains(path);
    tu_assert_error_contains("has no replicator.config metadata");
}

static void test_load_run_of_a_missing_directory_names_it(void **state)
{
    (void)state;
    char dir[4096];
    tu_tmp_path(dir, sizeof dir, "nowhere");
    rp_checkpoint *ck = NULL;
    const char *config = NULL;
    assert_int_not_equal(rp_trainer_load_run(dir, &ck, &config), RP_OK);
    assert_null(ck);
    assert_null(config);
    tu_assert_error_contains(dir);
    assert_int_equal(rp_trainer_load_run(NULL, &ck, &config), RP_ERR_INVALID);
}

/* Declares w with `shape` under the guard for ck's "param/" tensors; returns finalize's status. */
static rp_status build_guarded(const rp_checkpoint *ck, const int *shape, const char *name)
{
    rp_params *p = NULL;
    assert_int_equal(rp_params_create(&p), RP_OK);
    assert_non_null(rp_params_add(p, name, 2, shape, (rp_init){.kind = RP_INIT_ZEROS}, true));
    rp_trainer_guard_arg arg = {ck, "param/"};
    assert_int_equal(rp_params_guard_push(rp_trainer_checkpoint_guard, &arg), RP_OK);
    rp_status status = rp_params_finalize(p, 1);
    rp_params_guard_pop();
    rp_params_destroy(p);
    return status;
}

static void test_guard_holds_a_build_to_the_checkpoint(void **state)
{
    (void)state;
    char dir[4096];
    make_run(dir, sizeof dir, "guarded", "{}");
    rp_checkpoint *ck = NULL;
    const char *config = NULL;
    assert_int_equal(rp_trainer_load_run(dir, &ck, &config), RP_OK);
    /* The checkpoint's own shape passes. */
    assert_int_equal(build_guarded(ck, (int[]){2, 3}, "w"), RP_OK);
    /* Another shape is refused, naming the tensor and both shapes. */
    assert_int_equal(build_guarded(ck, (int[]){3, 2}, "w"), RP_ERR_SHAPE);
    tu_assert_error_contains("param/w [3, 2] (6 values), the checkpoint holds it as [2, 3]");
    /* A tensor the checkpoint lacks is refused by name. */
    assert_int_equal(build_guarded(ck, (int[]){2, 3}, "v"), RP_ERR_SHAPE);
    tu_assert_error_contains("declares param/v [2, 3], which the checkpoint does not hold");
    rp_checkpoint_destroy(ck);
}

static void test_agree_outside_mpirun_and_a_lost_text(void **state)
{
    (void)state;
    /* Outside mpirun there is one process: nothing to agree, whatever the text. */
    assert_int_equal(rp_trainer_agree_config("{\"seed\":1}", NULL, "runs/x", 0, 0), RP_OK);
    const char *local[] = {"data_dir", NULL};
    assert_int_equal(rp_trainer_agree_config("not json", local, "runs/x", 5, 1), RP_OK);
    /* A configuration whose serialisation failed (NULL) is an error everywhere. */
    assert_int_equal(rp_trainer_agree_config(NULL, NULL, "runs/x", 0, 0), RP_ERR_NOMEM);
    tu_assert_error_contains("cannot serialise the configuration");
}

/* stderr goes to `name` in the scratch directory until capture_end, which returns what was
   written (the caller frees). */
static int capture_saved = -1;
static char capture_path[4096];
static void capture_begin(const char *name)
{
    tu_tmp_path(capture_path, sizeof capture_path, name);
    fflush(stderr);
    capture_saved = dup(2);
    assert_true(capture_saved >= 0);
    assert_non_null(freopen(capture_path, "w", stderr));
}
static char *capture_end(void)
{
    fflush(stderr);
    assert_int_equal(dup2(capture_saved, 2), 2);
    close(capture_saved);
    size_t n = 0;
    return (char *)tu_read_file(capture_path, &n);
}

static void test_report_error_names_the_command(void **state)
{
    (void)state;
    capture_begin("report.txt");
    RP_ERROR(RP_ERR_INVALID, "the sky is green");
    rp_trainer_report_error("replicator train", false);
    rp_trainer_report_error("replicator train sngan", true);
    char *text = capture_end();
    char want[1024];
    snprintf(want, sizeof want,
             "replicator train: error: %s\n\nreplicator train sngan: error: %s\n", rp_last_error(),
             rp_last_error());
    assert_non_null(strstr(rp_last_error(), "the sky is green"));
    assert_string_equal(text, want);
    free(text);
}

static void test_print_fault_in_the_commands_words(void **state)
{
    (void)state;
    capture_begin("fault.txt");
    rp_option_fault f = {.kind = RP_OPTION_UNKNOWN, .option = "--x"};
    assert_int_equal(rp_options_print_fault("replicator train d4pg", &f), 2);
    f = (rp_option_fault){.kind = RP_OPTION_BAD_VALUE, .option = "--lr", .value = "abc"};
    assert_int_equal(rp_options_print_fault("cmd", &f), 2);
    /* With its row, the fault says what the option takes. */
    rp_option row = {.type = RP_OPTION_CHOICE, .name = "--keep-f32", .choices = "none|g|d"};
    f = (rp_option_fault){
        .kind = RP_OPTION_BAD_VALUE, .option = "--keep-f32", .value = "both", .row = &row};
    assert_int_equal(rp_options_print_fault("cmd", &f), 2);
    f = (rp_option_fault){
        .kind = RP_OPTION_LONG_PATH, .option = "--out", .length = 5000, .limit = 4095};
    assert_int_equal(rp_options_print_fault("cmd", &f), 2);
    f = (rp_option_fault){.kind = RP_OPTION_NOT_ON_RESUME, .option = "--lr"};
    assert_int_equal(rp_options_print_fault("cmd", &f), 2);
    char *text = capture_end();
    assert_string_equal(text, "replicator train d4pg: unknown option --x (see --help)\n"
                              "cmd: bad value \"abc\" for --lr (see --help)\n"
                              "cmd: bad value \"both\" for --keep-f32: expected none, g or d "
                              "(see --help)\n"
                              "cmd: --out is 5000 bytes long, over the 4095 a path may have\n"
                              "cmd: --lr cannot be changed when resuming; the run's configuration "
                              "comes from its checkpoint (start a new run with --out)\n");
    free(text);
}

static void test_precision_line_for_bf16_only(void **state)
{
    (void)state;
    capture_begin("precision.txt");
    rp_trainer_print_precision("f32", NULL);
    rp_trainer_print_precision(NULL, "f32");
    char *text = capture_end();
    assert_string_equal(text, "");
    free(text);
    capture_begin("precision_bf16.txt");
    rp_trainer_print_precision("bf16", NULL);
    text = capture_end();
    char want[160];
    snprintf(want, sizeof want,
             "  precision: bf16 compute for convolutions, linear layers and "
             "matmuls on %s",
             rp_kernels_bf16_path());
    assert_true(strncmp(text, want, strlen(want)) == 0);
    assert_non_null(strstr(text, "f32 master weights"));
    assert_non_null(strstr(text, "outputs stored in bf16"));
    free(text);
    /* bf16 compute with f32 storage says so, and not the other. */
    capture_begin("precision_f32act.txt");
    rp_trainer_print_precision("bf16", "f32");
    text = capture_end();
    assert_true(strncmp(text, want, strlen(want)) == 0);
    assert_non_null(strstr(text, "activations stored in f32"));
    assert_null(strstr(text, "stored in bf16"));
    free(text);
}

/*
 * A command's stuck_exit: on unless RP_STUCK_EXIT is "0". CTest runs this case as it is (the
 * variable unset: on) and again as test_trainer_command.stuck_exit_off with RP_STUCK_EXIT=0.
 */
static void test_stuck_exit_follows_the_environment(void **state)
{
    (void)state;
    const char *v = getenv("RP_STUCK_EXIT");
    bool want = !(v && !strcmp(v, "0"));
    assert_int_equal(rp_trainer_stuck_exit(), want);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_run_gives_the_config),
        cmocka_unit_test(test_load_run_without_config_is_refused),
        cmocka_unit_test(test_load_run_of_a_missing_directory_names_it),
        cmocka_unit_test(test_guard_holds_a_build_to_the_checkpoint),
        cmocka_unit_test(test_agree_outside_mpirun_and_a_lost_text),
        cmocka_unit_test(test_report_error_names_the_command),
        cmocka_unit_test(test_print_fault_in_the_commands_words),
        cmocka_unit_test(test_precision_line_for_bf16_only),
        cmocka_unit_test(test_stuck_exit_follows_the_environment),
    };
    return tu_run_group_tests(argc, argv, tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
