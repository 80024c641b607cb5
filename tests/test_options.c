/*
 * test_options.c - option tables (replicator/options.h): what one row gives - the parsed value
 * with its bounds, the messages naming option and value, the resume rules, the JSON both ways
 * (strict keys, keys older configurations lack), the help and the echo - and the runtime's own
 * table behind rp_config_from_args.
 */
#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include <unistd.h>

typedef struct opts {
    int epochs;
    int64_t limit;
    uint64_t seed;
    float lr;
    double timeout;
    char schedule[16];
    int dtype;
    bool augment;
    bool quiet;
    char dir[16];
    const char *trace;
    int threads; /* 0: automatic */
    int regime;  /* saved by later versions only */
    int pair[2];
} opts;

static const int dtypes[] = {RP_F32, RP_BF16};

/* "A,B": two ints; "bad" refuses with its own message. */
static bool parse_pair(const rp_option *opt, const char *v, void *dst)
{
    (void)opt;
    if (!strcmp(v, "bad")) {
        RP_ERROR(RP_ERR_INVALID, "--pair: told to refuse");
        return false;
    }
    return sscanf(v, "%d,%d", &((opts *)dst)->pair[0], &((opts *)dst)->pair[1]) == 2;
}

static const rp_option table[] = {
    RP_OPT_SECTION("run:"),
    RP_OPT_INT(opts, epochs, "--epochs", "N", 1, 100, RP_OPT_SAVED | RP_OPT_RESUME, "passes\nover"),
    RP_OPT_INT64(opts, limit, "--limit", "N", 1, 1LL << 40, RP_OPT_SAVED, "samples"),
    RP_OPT_UINT64(opts, seed, "--seed", "S", 0, 0x7fffffff, RP_OPT_SAVED, "seed"),
    RP_OPT_FLOAT(opts, lr, "--lr", "X", 0, 0.9999, RP_OPT_SAVED, "rate"),
    RP_OPT_DOUBLE(opts, timeout, "--timeout", "S", 0, 10, RP_OPT_ABOVE_LO | RP_OPT_RESUME, "secs"),
    RP_OPT_CHOICE(opts, schedule, "--schedule", "S", "cosine|constant", RP_OPT_SAVED, "shape"),
    RP_OPT_ENUM(opts, dtype, "--dtype", "T", "f32|bf16", dtypes, RP_OPT_SAVED | RP_OPT_RESUME,
                "type"),
    {.type = RP_OPTION_FLAG,
     .name = "--no-augment",
     .key = "augment",
     .offset = offsetof(opts, augment),
     .size = sizeof(bool),
     .flags = RP_OPT_SAVED | RP_OPT_NEGATE,
     .help = "no flips"},
    RP_OPT_FLAG(opts, quiet, "--quiet", RP_OPT_RESUME, "hush"),
    RP_OPT_PATH(opts, dir, "--out", "DIR", 0, "where"),
    RP_OPT_PATH_REF(opts, trace, "--trace", "FILE", RP_OPT_RESUME, "trace file"),
    RP_OPT_INT(opts, threads, "--threads", "N", 1, 64,
               RP_OPT_SAVED | RP_OPT_OPTIONAL | RP_OPT_ZERO_OK | RP_OPT_RESUME, "threads"),
    RP_OPT_INT(opts, regime, "--regime-id", "R", 0, 1, RP_OPT_SAVED | RP_OPT_OPTIONAL, "regime"),
    RP_OPT_CUSTOM(opts, pair, sizeof(int[2]), "--pair", "A,B", parse_pair, 0, "two"),
    RP_OPT_DOC("--help", NULL, "this text"),
    RP_OPTION_END,
};

static opts defaults(void)
{
    opts o;
    memset(&o, 0, sizeof o);
    o.epochs = 3;
    o.seed = 1;
    o.lr = 0.5f;
    o.timeout = 1;
    snprintf(o.schedule, sizeof o.schedule, "cosine");
    o.augment = true;
    return o;
}

static rp_option_fault parse(opts *o, int argc, char **argv, rp_status want)
{
    rp_option_fault f;
    assert_int_equal(rp_options_parse(table, o, &argc, argv, RP_OPTIONS_HELP, NULL, &f), want);
    return f;
}

static void test_parse_values(void **state)
{
    (void)state;
    opts o = defaults();
    char *argv[] = {"p",        "--epochs", "7",      "--limit",      "1099511627776", "--seed",
                    "9",        "--lr",     "0.25",   "--timeout",    "2.5",           "--schedule",
                    "constant", "--dtype",  "bf16",   "--no-augment", "--quiet",       "--out",
                    "runs",     "--trace",  "t.json", "--pair",       "3,4",           NULL};
    rp_options_given g;
    int argc = 23;
    rp_option_fault f;
    assert_int_equal(rp_options_parse(table, &o, &argc, argv, 0, &g, &f), RP_OK);
    assert_int_equal(f.kind, RP_OPTION_OK);
    assert_int_equal(argc, 23); /* no unknowns kept: argv untouched */
    assert_int_equal(o.epochs, 7);
    assert_true(o.limit == (1LL << 40));
    assert_int_equal(o.seed, 9);
    assert_true(o.lr == 0.25f);
    assert_true(o.timeout == 2.5);
    assert_string_equal(o.schedule, "constant");
    assert_int_equal(o.dtype, RP_BF16);
    assert_false(o.augment);
    assert_true(o.quiet);
    assert_string_equal(o.dir, "runs");
    assert_ptr_equal(o.trace, argv[20]);
    assert_int_equal(o.pair[0], 3);
    assert_int_equal(o.pair[1], 4);
    assert_true(rp_options_was_given(table, &g, "--epochs"));
    assert_true(rp_options_was_given(table, &g, "--no-augment"));
    assert_false(rp_options_was_given(table, &g, "--threads"));
    assert_false(rp_options_was_given(table, &g, "--nonexistent"));
}

/* RP_OPT_BARE: --zero alone is its lower bound, --zero 2 a stage, --zero 3 out of range. */
typedef struct bare_opts {
    int zero, n;
} bare_opts;

static const rp_option bare_table[] = {
    RP_OPT_INT(bare_opts, zero, "--zero", "[1|2]", 1, 2, RP_OPT_BARE, "stage"),
    RP_OPT_INT(bare_opts, n, "--n", "N", 1, 9, 0, "n"),
    RP_OPTION_END,
};

static rp_status parse_bare(bare_opts *o, int argc, char **argv)
{
    memset(o, 0, sizeof *o);
    return rp_options_parse(bare_table, o, &argc, argv, 0, NULL, NULL);
}

static void test_parse_bare(void **state)
{
    (void)state;
    bare_opts o;
    assert_int_equal(parse_bare(&o, 2, (char *[]){"p", "--zero", NULL}), RP_OK);
    assert_int_equal(o.zero, 1);
    assert_int_equal(parse_bare(&o, 3, (char *[]){"p", "--zero", "2", NULL}), RP_OK);
    assert_int_equal(o.zero, 2);
    assert_int_equal(parse_bare(&o, 4, (char *[]){"p", "--zero", "--n", "3", NULL}), RP_OK);
    assert_int_equal(o.zero, 1);
    assert_int_equal(o.n, 3);
    assert_int_equal(parse_bare(&o, 3, (char *[]){"p", "--zero", "3", NULL}), RP_ERR_INVALID);
    tu_assert_error_contains("--zero");
    /* Only a number is taken: a word after it is an argument of its own (unknown here). */
    assert_int_equal(parse_bare(&o, 3, (char *[]){"p", "--zero", "two", NULL}), RP_ERR_INVALID);
    tu_assert_error_contains("unknown option two");
    /* A row without the flag still needs its value. */
    assert_int_equal(parse_bare(&o, 2, (char *[]){"p", "--n", NULL}), RP_ERR_INVALID);
}

static void test_parse_faults(void **state)
{
    (void)state;
    opts o = defaults();
    rp_option_fault f = parse(&o, 3, (char *[]){"p", "--epochs", "0", NULL}, RP_ERR_INVALID);
    assert_int_equal(f.kind, RP_OPTION_BAD_VALUE);
    assert_string_equal(f.option, "--epochs");
    assert_string_equal(f.value, "0");
    tu_assert_error_contains("--epochs 0: expected an integer in [1, 100]");
    assert_int_equal(o.epochs, 3); /* a bad value leaves the field */
    f = parse(&o, 3, (char *[]){"p", "--epochs", "2x", NULL}, RP_ERR_INVALID);
    assert_int_equal(f.kind, RP_OPTION_BAD_VALUE);
    f = parse(&o, 2, (char *[]){"p", "--epochs", NULL}, RP_ERR_INVALID);
    assert_int_equal(f.kind, RP_OPTION_NO_VALUE);
    tu_assert_error_contains("--epochs (missing)");
    /* Bounds as floats: 0.9999 as a float is in, 1 is out. */
    parse(&o, 3, (char *[]){"p", "--lr", "0.9999", NULL}, RP_OK);
    f = parse(&o, 3, (char *[]){"p", "--lr", "1", NULL}, RP_ERR_INVALID);
    assert_int_equal(f.kind, RP_OPTION_BAD_VALUE);
    /* An excluded lower bound. */
    f = parse(&o, 3, (char *[]){"p", "--timeout", "0", NULL}, RP_ERR_INVALID);
    tu_assert_error_contains("--timeout 0: expected a number in (0, 10]");
    f = parse(&o, 3, (char *[]){"p", "--schedule", "step", NULL}, RP_ERR_INVALID);
    tu_assert_error_contains("--schedule step: expected cosine or constant");
    f = parse(&o, 3, (char *[]){"p", "--dtype", "f16", NULL}, RP_ERR_INVALID);
    tu_assert_error_contains("--dtype f16: expected f32 or bf16");
    f = parse(&o, 3, (char *[]){"p", "--out", "", NULL}, RP_ERR_INVALID);
    assert_int_equal(f.kind, RP_OPTION_EMPTY_PATH);
    f = parse(&o, 3, (char *[]){"p", "--out", "0123456789abcdef", NULL}, RP_ERR_INVALID);
    assert_int_equal(f.kind, RP_OPTION_LONG_PATH);
    assert_int_equal(f.length, 16);
    assert_int_equal(f.limit, 15);
    tu_assert_error_contains("--out is 16 bytes long, over the 15 a path may have");
    parse(&o, 3, (char *[]){"p", "--out", "0123456789abcde", NULL}, RP_OK);
    assert_string_equal(o.dir, "0123456789abcde");
    f = parse(&o, 3, (char *[]){"p", "--pair", "bad", NULL}, RP_ERR_INVALID);
    assert_int_equal(f.kind, RP_OPTION_REFUSED);
    tu_assert_error_contains("--pair: told to refuse");
    f = parse(&o, 3, (char *[]){"p", "--pair", "x", NULL}, RP_ERR_INVALID);
    assert_int_equal(f.kind, RP_OPTION_BAD_VALUE);
    f = parse(&o, 2, (char *[]){"p", "--bogus", NULL}, RP_ERR_INVALID);
    assert_int_equal(f.kind, RP_OPTION_UNKNOWN);
    assert_string_equal(f.option, "--bogus");
    /* A section's or a help-only row's name is no option. */
    f = parse(&o, 2, (char *[]){"p", "run:", NULL}, RP_ERR_INVALID);
    assert_int_equal(f.kind, RP_OPTION_UNKNOWN);
    f = parse(&o, 3, (char *[]){"p", "--quiet", "--help", NULL}, RP_OK);
    assert_int_equal(f.kind, RP_OPTION_HELP);
}

static void test_keep_unknown(void **state)
{
    (void)state;
    opts o = defaults();
    char *argv[] = {"p", "--epochs", "5", "--x", "1", "rest", "--quiet", "--y", NULL};
    int argc = 8;
    assert_int_equal(rp_options_parse(table, &o, &argc, argv, RP_OPTIONS_KEEP_UNKNOWN, NULL, NULL),
                     RP_OK);
    assert_int_equal(argc, 5);
    assert_string_equal(argv[1], "--x");
    assert_string_equal(argv[2], "1");
    assert_string_equal(argv[3], "rest");
    assert_string_equal(argv[4], "--y");
    assert_null(argv[5]);
    assert_int_equal(o.epochs, 5);
    assert_true(o.quiet);
}

static void test_resume_rules(void **state)
{
    (void)state;
    char *ok[] = {"p", "--epochs", "9", "--quiet", "--resume", "d", NULL};
    rp_option_fault f;
    const char *also[] = {"--resume", NULL};
    assert_int_equal(rp_options_check_resume(table, 6, ok, also, &f), RP_OK);
    char *bad[] = {"p", "--epochs", "9", "--lr", "0.1", "--schedule", "constant", NULL};
    assert_int_equal(rp_options_check_resume(table, 7, bad, also, &f), RP_ERR_INVALID);
    assert_int_equal(f.kind, RP_OPTION_NOT_ON_RESUME);
    assert_string_equal(f.option, "--lr"); /* the first, in argv's order */
    tu_assert_error_contains("--lr cannot be changed when resuming");

    /* The run's saved fields stay unless a RESUME row was given; unsaved ones are the cli's. */
    opts run = defaults(), cli = defaults();
    run.epochs = 4;
    run.lr = 0.125f;
    run.dtype = RP_BF16;
    run.threads = 2;
    cli.epochs = 8;
    cli.lr = 0.75f;
    cli.dtype = RP_F32;
    cli.threads = 6;
    cli.quiet = true;
    cli.timeout = 7;
    cli.trace = "t";
    rp_options_given g;
    int argc = 3;
    char *given[] = {"p", "--epochs", "8", NULL};
    opts scratch = defaults();
    assert_int_equal(rp_options_parse(table, &scratch, &argc, given, 0, &g, NULL), RP_OK);
    rp_options_apply_resume(table, &run, &cli, &g);
    assert_int_equal(run.epochs, 8);      /* given, RESUME */
    assert_true(run.lr == 0.125f);        /* saved, not RESUME */
    assert_int_equal(run.dtype, RP_BF16); /* RESUME but not given */
    assert_int_equal(run.threads, 2);     /* RESUME but not given */
    assert_true(run.quiet);               /* not saved: the invocation's */
    assert_true(run.timeout == 7);        /* not saved */
    assert_string_equal(run.trace, "t");  /* a path kept by reference */
}

static char *to_json(const opts *o)
{
    cJSON *j = cJSON_CreateObject();
    assert_int_equal(rp_options_to_json(table, o, j), RP_OK);
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return text;
}

static rp_status from_json(opts *o, const char *text, char *bad, size_t size)
{
    cJSON *j = cJSON_Parse(text);
    assert_non_null(j);
    rp_status s = rp_options_from_json(table, o, j, bad, size);
    cJSON_Delete(j);
    return s;
}

static void test_json(void **state)
{
    (void)state;
    opts o = defaults();
    o.epochs = 12;
    o.limit = 5;
    o.lr = 0.1f;
    o.dtype = RP_BF16;
    o.augment = false;
    o.quiet = true; /* not saved */
    char *text = to_json(&o);
    assert_string_equal(text, "{\"epochs\":12,\"limit\":5,\"seed\":1,\"lr\":0.10000000149011612,"
                              "\"schedule\":\"cosine\",\"dtype\":\"bf16\",\"augment\":false,"
                              "\"threads\":0,\"regime_id\":0}");
    opts back = defaults();
    char bad[256];
    /* limit 5 is in; threads 0 is automatic (ZERO_OK) though --threads 0 is not. */
    assert_int_equal(from_json(&back, text, bad, sizeof bad), RP_OK);
    assert_int_equal(back.epochs, 12);
    assert_true(back.lr == 0.1f);
    assert_int_equal(back.dtype, RP_BF16);
    assert_false(back.augment);
    assert_false(back.quiet);
    char *again = to_json(&back);
    assert_string_equal(again, text);
    free(again);
    free(text);

    back = defaults();
    assert_int_equal(from_json(&back, "{\"epochs\":0}", bad, sizeof bad), RP_ERR_FORMAT);
    assert_string_equal(bad, "\"epochs\" is 0, outside [1, 100]");
    assert_int_equal(from_json(&back, "{\"epochs\":2}", bad, sizeof bad), RP_ERR_FORMAT);
    assert_string_equal(bad, "\"limit\" is missing");
    assert_int_equal(back.epochs, 2); /* read before the failure */
    const char *base = "{\"epochs\":2,\"limit\":1,\"seed\":1,\"lr\":0.5,\"schedule\":\"cosine\","
                       "\"dtype\":\"f32\",\"augment\":true";
    char buf[512];
    snprintf(buf, sizeof buf, "%s}", base); /* older: no threads, no regime_id */
    back = defaults();
    back.threads = 3;
    assert_int_equal(from_json(&back, buf, bad, sizeof bad), RP_OK);
    assert_int_equal(back.threads, 3); /* absent: kept */
    snprintf(buf, sizeof buf, "%s,\"threads\":\"x\",\"regime_id\":1}", base);
    assert_int_equal(from_json(&back, buf, bad, sizeof bad), RP_OK);
    assert_int_equal(back.threads, 3); /* unreadable: kept */
    assert_int_equal(back.regime, 1);
    char *bad_lr = strdup(base);
    bad_lr[strstr(bad_lr, "0.5") - bad_lr] = '\0';
    snprintf(buf, sizeof buf,
             "%s0.99999999,\"schedule\":\"cosine\",\"dtype\":\"f32\",\"augment\":"
             "true}",
             bad_lr);
    free(bad_lr);
    assert_int_equal(from_json(&back, buf, bad, sizeof bad), RP_ERR_FORMAT);
    assert_string_equal(bad, "\"lr\" is 0.99999999, outside [0, 0.9999]");
    snprintf(buf, sizeof buf, "%s}", base);
    *strstr(buf, "f32") = 'x'; /* "x32" */
    assert_int_equal(from_json(&back, buf, bad, sizeof bad), RP_ERR_FORMAT);
    assert_string_equal(bad, "\"dtype\" is \"x32\", not f32 or bf16");
    snprintf(buf, sizeof buf, "%s}", base);
    memcpy(strstr(buf, "true"), "1   ", 4);
    assert_int_equal(from_json(&back, buf, bad, sizeof bad), RP_ERR_FORMAT);
    assert_string_equal(bad, "\"augment\" is 1, not true or false");
}

static void test_help_and_echo(void **state)
{
    (void)state;
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    rp_options_print_help(f, table);
    fclose(f);
    assert_non_null(strstr(text, "run:\n  --epochs N        passes\n                    over\n"));
    assert_non_null(strstr(text, "  --no-augment      no flips\n"));
    assert_non_null(strstr(text, "  --help            this text\n"));
    free(text);

    opts o = defaults(), d = defaults();
    char buf[256];
    assert_string_equal(rp_options_describe(table, &o, &d, buf, sizeof buf), "");
    o.epochs = 5;
    o.dtype = RP_BF16;
    o.augment = false;
    o.quiet = true; /* not saved: not echoed */
    assert_string_equal(rp_options_describe(table, &o, &d, buf, sizeof buf),
                        "--epochs 5 --dtype bf16 --no-augment");
    char small[12];
    rp_options_describe(table, &o, &d, small, sizeof small);
    assert_true(strlen(small) < sizeof small);
}

/* A number outside a table, by the int rows' rule: the whole text, in bounds, no overflow. */
static void test_parse_long(void **state)
{
    (void)state;
    long v = 0;
    assert_true(rp_options_parse_long("42", 1, 100, &v));
    assert_int_equal(v, 42);
    assert_true(rp_options_parse_long("-1", -1, 10, &v));
    assert_int_equal(v, -1);
    assert_true(rp_options_parse_long("0", 0, 0, &v));
    assert_int_equal(v, 0);
    assert_false(rp_options_parse_long("0", 1, 100, &v));   /* below */
    assert_false(rp_options_parse_long("101", 1, 100, &v)); /* above */
    assert_false(rp_options_parse_long("4x", 1, 100, &v));  /* trailing text */
    assert_false(rp_options_parse_long("1.5", 1, 100, &v)); /* not whole */
    assert_false(rp_options_parse_long("", 1, 100, &v));    /* empty */
    assert_false(rp_options_parse_long("x", 0, 100, &v));   /* no digits */
    assert_false(rp_options_parse_long(NULL, 0, 100, &v));  /* none */
    assert_false(rp_options_parse_long("5", 0, 100, NULL)); /* nowhere to put it */
    assert_false(rp_options_parse_long("99999999999999999999999", 0, LONG_MAX, &v)); /* overflow */
}

/* Calls rp_options_copy_path with stderr in a file; its text into said[size]. */
static bool copy_path_said(const char *value, char *dst, size_t size, char *said, size_t cap)
{
    fflush(stderr);
    FILE *f = tmpfile();
    assert_non_null(f);
    int keep = dup(2);
    assert_true(keep >= 0 && dup2(fileno(f), 2) >= 0);
    bool ok = rp_options_copy_path("prog", "--out", value, dst, size);
    fflush(stderr);
    dup2(keep, 2);
    close(keep);
    rewind(f);
    size_t n = fread(said, 1, cap - 1, f);
    said[n] = 0;
    fclose(f);
    return ok;
}

/* A path outside a table, by the path rows' rule: copied whole, or refused with why; never cut. */
static void test_copy_path(void **state)
{
    (void)state;
    char dst[8] = "keep", said[256];
    assert_true(copy_path_said("a/b", dst, sizeof dst, said, sizeof said));
    assert_string_equal(dst, "a/b");
    assert_string_equal(said, "");
    assert_true(copy_path_said("1234567", dst, sizeof dst, said, sizeof said)); /* fills it */
    assert_string_equal(dst, "1234567");
    snprintf(dst, sizeof dst, "keep");
    assert_false(copy_path_said("12345678", dst, sizeof dst, said, sizeof said)); /* one over */
    assert_string_equal(dst, "keep");
    assert_string_equal(said, "prog: --out is 8 bytes long, over the 7 a path may have\n");
    assert_false(copy_path_said("", dst, sizeof dst, said, sizeof said));
    assert_string_equal(said, "prog: --out needs a path, not an empty string\n");
    assert_false(copy_path_said(NULL, dst, sizeof dst, said, sizeof said));
    assert_string_equal(dst, "keep");
    assert_true(copy_path_said("abc", NULL, 4, said, sizeof said)); /* only checks */
    assert_false(copy_path_said("abcd", NULL, 4, said, sizeof said));
}

/* The runtime's table: every row parses, and its help names each option. */
static void test_runtime_table(void **state)
{
    (void)state;
    int n = rp_options_count(rp_config_options());
    assert_true(n > 10);
    rp_config cfg = rp_config_default();
    char *argv[] = {"p",      "--regime",    "async", "--precision", "bf16",
                    "--zero", "--bucket-kb", "64",    NULL};
    int argc = 8;
    assert_int_equal(rp_config_from_args(&cfg, &argc, argv), RP_OK);
    assert_int_equal(cfg.regime, RP_REGIME_ASYNC);
    assert_int_equal(cfg.precision, RP_BF16);
    assert_true(cfg.zero);
    assert_int_equal(cfg.bucket_bytes, 64 << 10);
    assert_int_equal(argc, 1);
    char *bad[] = {"p", "--backend", "gpu", NULL};
    argc = 3;
    assert_int_equal(rp_config_from_args(&cfg, &argc, bad), RP_ERR_INVALID);
    tu_assert_error_contains("--backend gpu: expected threads, mpi or auto");
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    rp_options_print_help(f, rp_config_options());
    fclose(f);
    for (int i = 0; i < n; i++)
        if (rp_config_options()[i].type != RP_OPTION_SECTION)
            assert_non_null(strstr(text, rp_config_options()[i].name));
    free(text);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_values),  cmocka_unit_test(test_parse_faults),
        cmocka_unit_test(test_keep_unknown),  cmocka_unit_test(test_resume_rules),
        cmocka_unit_test(test_json),          cmocka_unit_test(test_help_and_echo),
        cmocka_unit_test(test_runtime_table), cmocka_unit_test(test_parse_long),
        cmocka_unit_test(test_copy_path),     cmocka_unit_test(test_parse_bare),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
