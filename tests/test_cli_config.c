/*
 * test_cli_config.c - the run configurations the command stores in every checkpoint
 * ("replicator.config") and reads back on --resume, eval and sample: each model's defaults
 * survive the trip through JSON unchanged, and what fuzz/fuzz_config.c found is refused with a
 * clear error instead of being cut or rounded into a configuration that no later resume (or no
 * checkpoint) accepts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/d4pg/d4pg_command.h"
#include "models/sngan/sngan_command.h"
#include "models/classifier/classifier_options.h"
#include "testutil.h"

/* train_opts_from_json(text) succeeds, and writing the result gives `text` back. */
static void expect_train_fixed_point(const char *text)
{
    static train_opts o;
    assert_int_equal(train_opts_from_json(&o, text), RP_OK);
    char *again = train_opts_to_json(&o);
    assert_non_null(again);
    assert_string_equal(again, text);
    free(again);
}

static void test_defaults_roundtrip(void **state)
{
    static train_opts t;
    static sngan_opts g, g2;
    static d4pg_opts d, d2;
    const char *models[] = {"resnet20", "resnet18", "mlp"};
    for (int i = 0; i < 3; i++) {
        train_opts_default(&t, models[i]);
        char *text = train_opts_to_json(&t);
        assert_non_null(text);
        expect_train_fixed_point(text);
        free(text);
    }
    sngan_opts_default(&g);
    char *text = sngan_opts_to_json(&g);
    assert_true(sngan_config_is_gan(text));
    assert_false(d4pg_config_is_d4pg(text));
    assert_int_equal(sngan_opts_from_json(&g2, text), RP_OK);
    char *again = sngan_opts_to_json(&g2);
    assert_string_equal(again, text);
    free(again);
    free(text);
    d4pg_opts_default(&d);
    text = d4pg_opts_to_json(&d);
    assert_true(d4pg_config_is_d4pg(text));
    assert_false(sngan_config_is_gan(text));
    assert_int_equal(d4pg_opts_from_json(&d2, text), RP_OK);
    again = d4pg_opts_to_json(&d2);
    assert_string_equal(again, text);
    free(again);
    free(text);
}

/*
 * Found by fuzz_config: a momentum just below 1 passed the range check as a double and became
 * 1.0f as a float, which the next resume refused ("momentum" must stay below 1). The input as
 * the fuzzer wrote it (a later duplicate key is ignored, as cJSON returns the first).
 */
static const char momentum_rounds_to_one[] =
    "{\"model\":\"resnet20\",\"dataset\":\"fashion-mnist\",\"data_dir\":\"/usr/share/datasets/"
    "fashion-mnist\",\"epochs\":8,\"batch\":128,\"lr\":0.10000000149011612,\"momentum\":0."
    "999999976158142,\"weight_decay\":0.00050000,\"nesterov\":true,\"schedule\":\"cosine\","
    "\"warmup_epochs\":0,\"eed\":1,\"epochs\":0,\"seed\":1,\"augment\":true,\"pad\":2,\"limit\":0,"
    "\"imagads_per_replica\":1,\"regime\":\"sync\",\"ps\":0,\"staleness\":-1,\"hidden\":[]}";

/* The default resnet20 configuration with `key`'s value text replaced by `value`. */
static char *train_config_with(const char *key, const char *value)
{
    static train_opts t;
    train_opts_default(&t, "resnet20");
    char *text = train_opts_to_json(&t);
    assert_non_null(text);
    char needle[64];
    snprintf(needle, sizeof needle, "\"%s\":", key);
    char *at = strstr(text, needle);
    assert_non_null(at);
    char *start = at + strlen(needle);
    char *end = start;
    if (*end == '"') {
        end = strchr(end + 1, '"') + 1;
    } else {
        while (*end != ',' && *end != '}')
            end++;
    }
    size_t len = (size_t)(start - text) + strlen(value) + strlen(end) + 1;
    char *out = malloc(len);
    assert_non_null(out);
    snprintf(out, len, "%.*s%s%s", (int)(start - text), text, value, end);
    free(text);
    return out;
}

static void test_momentum_rounding_to_one_refused(void **state)
{
    static train_opts o;
    assert_int_equal(train_opts_from_json(&o, momentum_rounds_to_one), RP_ERR_FORMAT);
    tu_assert_error_contains("incomplete or invalid");
    tu_assert_error_contains("\"momentum\" is 0.999999976158142");
    char *text = train_config_with("momentum", "0.999999976158142");
    assert_int_equal(train_opts_from_json(&o, text), RP_ERR_FORMAT);
    tu_assert_error_contains("\"momentum\" is 0.999999976158142, not below 1 as a float");
    free(text);
    /* The largest the command line takes (--momentum 0.9999) still resumes. */
    train_opts_default(&o, "resnet20");
    o.momentum = 0.9999f;
    text = train_opts_to_json(&o);
    expect_train_fixed_point(text);
    free(text);
}

/*
 * Found with fuzz_config's check that a configuration it reads back can be stored again: a
 * data_dir longer than the options hold was cut at 511 bytes, naming another directory, and
 * when the cut fell inside a UTF-8 sequence the next checkpoint refused the configuration.
 */
static void test_string_too_long_refused(void **state)
{
    static train_opts o;
    const size_t room = sizeof o.data_dir - 1; /* the longest path the options hold */
    char *value = malloc(room + 8);
    assert_non_null(value);
    /* room bytes: the longest that fits, kept whole. */
    value[0] = '"';
    memset(value + 1, 'a', room);
    value[1] = '/';
    snprintf(value + 1 + room, 8, "\"");
    char *text = train_config_with("data_dir", value);
    expect_train_fixed_point(text);
    free(text);
    /* room + 1 bytes: refused, not cut. */
    memset(value + 1, 'a', room + 1);
    value[1] = '/';
    snprintf(value + 2 + room, 6, "\"");
    text = train_config_with("data_dir", value);
    assert_int_equal(train_opts_from_json(&o, text), RP_ERR_FORMAT);
    tu_assert_error_contains("incomplete or invalid");
    tu_assert_error_contains("\"data_dir\" is \"/aaaa");
    tu_assert_error_contains("4096 bytes long, over the 4095 it may have");
    free(text);
    /* room - 1 bytes and an "\u00e9": a cut would have split the character. */
    memset(value + 1, 'a', room - 1);
    value[1] = '/';
    snprintf(value + room, 8, "\xc3\xa9\"");
    text = train_config_with("data_dir", value);
    assert_int_equal(train_opts_from_json(&o, text), RP_ERR_FORMAT);
    free(text);
    free(value);
    /* The same rule for the other strings: a dataset name of 32 bytes. */
    text = train_config_with("dataset", "\"fashion-mnist-fashion-mnist-abcd\"");
    assert_int_equal(train_opts_from_json(&o, text), RP_ERR_FORMAT);
    free(text);
}

/* `text` with the first `"key":value` of the default configuration's replaced by `with`. */
static char *replaced(const char *text, const char *key, const char *with)
{
    char needle[64];
    snprintf(needle, sizeof needle, "\"%s\":", key);
    const char *at = strstr(text, needle);
    assert_non_null(at);
    const char *end = at + strlen(needle);
    if (*end == '"')
        end = strchr(end + 1, '"') + 1;
    else
        while (*end != ',' && *end != '}')
            end++;
    size_t len = strlen(text) + strlen(with) + 1;
    char *out = malloc(len);
    assert_non_null(out);
    snprintf(out, len, "%.*s%s%s", (int)(at - text), text, with, end);
    return out;
}

/*
 * A bad value names its key and the value, in each model's configuration: "incomplete or invalid"
 * alone left the user to guess which of two dozen keys was wrong.
 */
static void test_bad_value_named(void **state)
{
    static train_opts t;
    static sngan_opts g;
    static d4pg_opts d;
    char *text = train_config_with("batch", "0");
    assert_int_equal(train_opts_from_json(&t, text), RP_ERR_FORMAT);
    tu_assert_error_contains("configuration is incomplete or invalid: \"batch\" is 0, outside "
                             "[1, 1048576]");
    free(text);
    text = train_config_with("nesterov", "\"yes\"");
    assert_int_equal(train_opts_from_json(&t, text), RP_ERR_FORMAT);
    tu_assert_error_contains("\"nesterov\" is \"yes\", not true or false");
    free(text);
    text = train_config_with("model", "\"vgg\"");
    assert_int_equal(train_opts_from_json(&t, text), RP_ERR_FORMAT);
    tu_assert_error_contains("\"model\" is \"vgg\", not a classifier");
    free(text);

    sngan_opts_default(&g);
    char *gan = sngan_opts_to_json(&g);
    assert_non_null(gan);
    text = replaced(gan, "ch_g", "\"x\":1");
    assert_int_equal(sngan_opts_from_json(&g, text), RP_ERR_FORMAT);
    tu_assert_error_contains("SN-GAN checkpoint's configuration is incomplete or invalid: "
                             "\"ch_g\" is missing");
    free(text);
    text = replaced(gan, "z_dim", "\"z_dim\":5000");
    assert_int_equal(sngan_opts_from_json(&g, text), RP_ERR_FORMAT);
    tu_assert_error_contains("\"z_dim\" is 5000, outside [1, 4096]");
    free(text);
    free(gan);

    d4pg_opts_default(&d);
    char *rl = d4pg_opts_to_json(&d);
    assert_non_null(rl);
    text = replaced(rl, "n_step", "\"n_step\":16");
    assert_int_equal(d4pg_opts_from_json(&d, text), RP_ERR_FORMAT);
    tu_assert_error_contains("D4PG checkpoint's configuration is incomplete or invalid: "
                             "\"n_step\" is 16, outside [1, 15]");
    free(text);
    text = replaced(rl, "policy_layers", "\"policy_layers\":\"256,0\"");
    assert_int_equal(d4pg_opts_from_json(&d, text), RP_ERR_FORMAT);
    tu_assert_error_contains("\"policy_layers\" is \"256,0\", not widths");
    free(text);
    free(rl);
}

/*
 * Configurations as earlier versions wrote them (keys in the old order; the oldest without the
 * keys added since) still load, so their run directories still resume: the option table reads
 * by key, and keys a run predates keep their defaults.
 */
static void test_older_configurations_load(void **state)
{
    static train_opts o;
    static const char before_table[] =
        "{\"model\":\"resnet20\",\"dataset\":\"fashion-mnist\",\"data_dir\":\"/d\",\"epochs\":8,"
        "\"batch\":128,\"lr\":0.10000000149011612,\"momentum\":0.89999997615814209,"
        "\"weight_decay\":0.00050000002374872565,\"nesterov\":true,\"schedule\":\"cosine\","
        "\"warmup_epochs\":1,\"seed\":3,\"augment\":true,\"pad\":2,\"limit\":0,\"image_size\":0,"
        "\"threads\":0,\"replicas\":2,\"threads_per_replica\":0,\"regime\":\"async\","
        "\"precision\":\"bf16\",\"ps\":2,\"sync_groups\":0,\"grad_dtype\":\"f32\",\"staleness\":4,"
        "\"model_parallel\":1,\"tensor_parallel\":1,\"pipeline\":\"gpipe\",\"micro_batches\":1,"
        "\"hidden\":[]}";
    assert_int_equal(train_opts_from_json(&o, before_table), RP_OK);
    assert_string_equal(o.data_dir, "/d");
    assert_int_equal(o.seed, 3);
    assert_int_equal(o.replicas, 2);
    assert_string_equal(o.regime, "async");
    assert_string_equal(o.precision, "bf16");
    assert_int_equal(o.ps, 2);
    assert_int_equal(o.staleness, 4);
    /* Before --image-size, the async regime, precision, model parallelism... */
    static const char oldest[] =
        "{\"model\":\"mlp\",\"dataset\":\"mnist\",\"data_dir\":\"/m\",\"epochs\":2,\"batch\":64,"
        "\"lr\":0.05,\"momentum\":0.9,\"weight_decay\":0.0005,\"nesterov\":false,"
        "\"schedule\":\"constant\",\"warmup_epochs\":0,\"seed\":1,\"augment\":false,\"pad\":0,"
        "\"limit\":1000,\"hidden\":[64,32]}";
    assert_int_equal(train_opts_from_json(&o, oldest), RP_OK);
    assert_string_equal(o.model, "mlp");
    assert_string_equal(o.schedule, "constant");
    assert_int_equal(o.limit, 1000);
    assert_int_equal(o.n_hidden, 2);
    assert_int_equal(o.hidden[1], 32);
    assert_string_equal(o.regime, "sync");
    assert_string_equal(o.precision, "f32");
    assert_int_equal(o.model_parallel, 1);
    assert_int_equal(o.staleness, -1);
    /* And a key the oldest had is still required. */
    char *text = strdup(oldest);
    memcpy(strstr(text, "\"limit\""), "\"limiz\"", 7);
    assert_int_equal(train_opts_from_json(&o, text), RP_ERR_FORMAT);
    tu_assert_error_contains("\"limit\" is missing");
    free(text);

    /* An SN-GAN run from before --activations and --keep-f32 stored bf16 runs' activations in
       bf16: it resumes so, while a new run's default is f32 storage. */
    static sngan_opts g;
    sngan_opts_default(&g);
    assert_string_equal(g.g.activations, "f32");
    text = sngan_opts_to_json(&g);
    char *key = strstr(text, "\"activations\":\"f32\",");
    assert_non_null(key);
    memmove(key, key + strlen("\"activations\":\"f32\","),
            strlen(key + strlen("\"activations\":\"f32\",")) + 1);
    key = strstr(text, "\"keep_f32\":\"none\",");
    assert_non_null(key);
    memmove(key, key + strlen("\"keep_f32\":\"none\","),
            strlen(key + strlen("\"keep_f32\":\"none\",")) + 1);
    assert_int_equal(sngan_opts_from_json(&g, text), RP_OK);
    assert_string_equal(g.g.activations, "bf16");
    assert_string_equal(g.g.keep_f32, "none");
    free(text);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_roundtrip),
        cmocka_unit_test(test_momentum_rounding_to_one_refused),
        cmocka_unit_test(test_string_too_long_refused),
        cmocka_unit_test(test_bad_value_named),
        cmocka_unit_test(test_older_configurations_load),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
