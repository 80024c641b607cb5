/*
 * replicator/options.h - declarative option tables: one row per option gives the command
 * line's parser, the `--help` text, the run's JSON configuration (write and read), the resume
 * rules and the echo of a configuration, so none of them is written by hand.
 *
 * A table is an array of rp_option rows ending with RP_OPTION_END. A row names an option
 * (`--epochs`), the field it fills in a struct the caller owns (offset and size, from the
 * RP_OPT_* macros below), its type and bounds, its help, and two rules:
 *
 *     RP_OPT_SAVED   the field is part of the run's configuration (JSON key `key`, or the
 *                    name without its dashes, '-' read as '_');
 *     RP_OPT_RESUME  a resumed run may change it (the others come from the configuration and
 *                    are refused by rp_options_check_resume).
 *
 * The runtime's own options are rp_config_options() (runtime.h: rp_config_from_args takes them);
 * a program adds its own table and parses both (examples/mlp.c).
 *
 *     typedef struct { int epochs; float lr; } my_opts;
 *     static const rp_option my_table[] = {
 *         RP_OPT_INT(my_opts, epochs, "--epochs", "N", 1, 1000, RP_OPT_SAVED, "passes"),
 *         RP_OPT_FLOAT(my_opts, lr, "--lr", "X", 0, 10, RP_OPT_SAVED, "learning rate"),
 *         RP_OPTION_END,
 *     };
 *     rp_option_fault f;
 *     if (rp_options_parse(my_table, &o, &argc, argv, RP_OPTIONS_KEEP_UNKNOWN, NULL, &f) != RP_OK)
 *         ... rp_last_error() names the option and the value ...
 *
 * Tables are constant data: every function here is thread-safe for distinct destinations.
 */
#ifndef REPLICATOR_OPTIONS_H
#define REPLICATOR_OPTIONS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "api.h"
#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    RP_OPTION_NONE = 0, /* the end of a table */
    RP_OPTION_FLAG,     /* bool; takes no value: sets true (false with RP_OPT_NEGATE) */
    RP_OPTION_INT,      /* int in [lo, hi] */
    RP_OPTION_INT64,    /* int64_t in [lo, hi] */
    RP_OPTION_UINT64,   /* uint64_t in [lo, hi] (a seed) */
    RP_OPTION_FLOAT,    /* float in [lo, hi] */
    RP_OPTION_DOUBLE,   /* double in [lo, hi] ((lo, hi] with RP_OPT_ABOVE_LO) */
    RP_OPTION_CHOICE,   /* one of `choices` ("a|b|c"), kept as text in a char[size] */
    RP_OPTION_ENUM,     /* one of `choices`, kept as the matching entry of `values` in an int */
    RP_OPTION_PATH,     /* a path: copied whole into a char[size] (never cut), or with size 0
                           kept as the const char * of argv (checked against PATH_MAX) */
    RP_OPTION_TEXT,     /* any non-empty text that fits a char[size] (a name checked later) */
    RP_OPTION_CUSTOM,   /* parsed by `parse`; not saved by the generic JSON code */
    RP_OPTION_SECTION,  /* a heading of the help text (name is the heading) */
    RP_OPTION_DOC,      /* help text only (an option documented twice, a note) */
} rp_option_type;

/* Row flags. */
enum {
    RP_OPT_SAVED = 1u << 0,    /* part of the run's configuration (JSON) */
    RP_OPT_RESUME = 1u << 1,   /* a resumed run may change it */
    RP_OPT_OPTIONAL = 1u << 2, /* saved, but configurations from before it existed lack it:
                                  absent (or unreadable), the field keeps its default */
    RP_OPT_NEGATE = 1u << 3,   /* a flag that sets false (--no-augment) */
    RP_OPT_ABOVE_LO = 1u << 4, /* a number's lower bound is excluded */
    RP_OPT_ZERO_OK = 1u << 5,  /* a saved 0 (automatic) is read back, though the command line
                                  does not take it */
    RP_OPT_OWN_JSON = 1u << 6, /* saved by the program's own code (a nested object, an array):
                                  the generic JSON skips it, resumes keep the run's value */
    RP_OPT_HIDDEN = 1u << 7,   /* no command-line option (not parsed, not in the help): a
                                  field the program fills that is saved with the rest (`name`
                                  only names it; give `key`) */
    RP_OPT_BARE = 1u << 8,     /* an INT that may stand without its value: when the next
                                  argument is absent or does not start with a digit, it takes
                                  `lo` (--zero is --zero 1, --zero 2 names the stage) */
};

typedef struct rp_option rp_option;

/* A custom row's parser: reads `value` into the struct at `dst`; false if it is bad. */
typedef bool (*rp_option_parse_fn)(const rp_option *opt, const char *value, void *dst);

struct rp_option {
    rp_option_type type;
    const char *name;         /* "--epochs"; a section's heading; NULL ends the table */
    const char *meta;         /* the value's name in the help ("N"), NULL for a flag */
    const char *key;          /* JSON key; NULL: the name without "--", '-' as '_' */
    size_t offset;            /* of the field in the caller's struct */
    size_t size;              /* of the field (a string's buffer) */
    double lo, hi;            /* bounds of a number */
    const char *choices;      /* CHOICE, ENUM: "a|b|c" */
    const int *values;        /* ENUM: the field's value for each choice */
    unsigned flags;           /* RP_OPT_* */
    const char *help;         /* lines separated by '\n' */
    rp_option_parse_fn parse; /* CUSTOM */
};

/* Row makers: S is the struct type, F the field. */
#define RP_OPT_ROW_(T, S, F, N, M, LO, HI, FL, H)                                                  \
    {                                                                                              \
        .type = (T), .name = (N), .meta = (M), .offset = offsetof(S, F),                           \
        .size = sizeof(((S *)0)->F), .lo = (LO), .hi = (HI), .flags = (FL), .help = (H)            \
    }
#define RP_OPT_FLAG(S, F, N, FL, H)           RP_OPT_ROW_(RP_OPTION_FLAG, S, F, N, NULL, 0, 1, FL, H)
#define RP_OPT_INT(S, F, N, M, LO, HI, FL, H) RP_OPT_ROW_(RP_OPTION_INT, S, F, N, M, LO, HI, FL, H)
#define RP_OPT_INT64(S, F, N, M, LO, HI, FL, H)                                                    \
    RP_OPT_ROW_(RP_OPTION_INT64, S, F, N, M, LO, HI, FL, H)
#define RP_OPT_UINT64(S, F, N, M, LO, HI, FL, H)                                                   \
    RP_OPT_ROW_(RP_OPTION_UINT64, S, F, N, M, LO, HI, FL, H)
#define RP_OPT_FLOAT(S, F, N, M, LO, HI, FL, H)                                                    \
    RP_OPT_ROW_(RP_OPTION_FLOAT, S, F, N, M, LO, HI, FL, H)
#define RP_OPT_DOUBLE(S, F, N, M, LO, HI, FL, H)                                                   \
    RP_OPT_ROW_(RP_OPTION_DOUBLE, S, F, N, M, LO, HI, FL, H)
#define RP_OPT_PATH(S, F, N, M, FL, H) RP_OPT_ROW_(RP_OPTION_PATH, S, F, N, M, 0, 0, FL, H)
#define RP_OPT_TEXT(S, F, N, M, FL, H) RP_OPT_ROW_(RP_OPTION_TEXT, S, F, N, M, 0, 0, FL, H)
/* A path kept as argv's pointer (a `const char *` field). */
#define RP_OPT_PATH_REF(S, F, N, M, FL, H)                                                         \
    {                                                                                              \
        .type = RP_OPTION_PATH, .name = (N), .meta = (M), .offset = offsetof(S, F), .size = 0,     \
        .flags = (FL), .help = (H)                                                                 \
    }
#define RP_OPT_CHOICE(S, F, N, M, C, FL, H)                                                        \
    {                                                                                              \
        .type = RP_OPTION_CHOICE, .name = (N), .meta = (M), .offset = offsetof(S, F),              \
        .size = sizeof(((S *)0)->F), .choices = (C), .flags = (FL), .help = (H)                    \
    }
#define RP_OPT_ENUM(S, F, N, M, C, V, FL, H)                                                       \
    {                                                                                              \
        .type = RP_OPTION_ENUM, .name = (N), .meta = (M), .offset = offsetof(S, F),                \
        .size = sizeof(((S *)0)->F), .choices = (C), .values = (V), .flags = (FL), .help = (H)     \
    }
/* A custom row over the bytes [offsetof(S, F), + SZ) (what a resume copies). */
#define RP_OPT_CUSTOM(S, F, SZ, N, M, P, FL, H)                                                    \
    {                                                                                              \
        .type = RP_OPTION_CUSTOM, .name = (N), .meta = (M), .offset = offsetof(S, F),              \
        .size = (SZ), .flags = (FL), .help = (H), .parse = (P)                                     \
    }
#define RP_OPT_SECTION(TEXT)                                                                       \
    {                                                                                              \
        .type = RP_OPTION_SECTION, .name = (TEXT)                                                  \
    }
#define RP_OPT_DOC(N, M, H)                                                                        \
    {                                                                                              \
        .type = RP_OPTION_DOC, .name = (N), .meta = (M), .help = (H)                               \
    }
#define RP_OPTION_END                                                                              \
    {                                                                                              \
        .type = RP_OPTION_NONE                                                                     \
    }
/* A saved field with no option (RP_OPT_HIDDEN): an int under JSON key K in [LO, HI]. */
#define RP_OPT_SAVED_INT(S, F, K, LO, HI)                                                          \
    {                                                                                              \
        .type = RP_OPTION_INT, .name = (K), .key = (K), .offset = offsetof(S, F),                  \
        .size = sizeof(int), .lo = (LO), .hi = (HI), .flags = RP_OPT_SAVED | RP_OPT_HIDDEN         \
    }

/* The most rows a table may have (RP_OPTION_END not counted). */
#define RP_OPTIONS_MAX 256

/* Which rows the command line gave (by row index). */
typedef struct rp_options_given {
    uint64_t bits[RP_OPTIONS_MAX / 64];
} rp_options_given;

/* What was wrong with a command line, for a program that words its own messages. */
typedef enum {
    RP_OPTION_OK = 0,
    RP_OPTION_UNKNOWN,       /* `option` is in no table */
    RP_OPTION_NO_VALUE,      /* `option` is last and needs a value */
    RP_OPTION_BAD_VALUE,     /* `value` is not one `option` takes */
    RP_OPTION_EMPTY_PATH,    /* a path option given "" */
    RP_OPTION_LONG_PATH,     /* a path longer than `limit` bytes */
    RP_OPTION_NOT_ON_RESUME, /* `option` may not change when resuming */
    RP_OPTION_REFUSED,       /* a custom row's parser refused `value`: rp_last_error() says why */
    RP_OPTION_HELP,          /* --help or -h was given */
} rp_option_fault_kind;

typedef struct rp_option_fault {
    rp_option_fault_kind kind;
    const char *option;   /* argv's text */
    const char *value;    /* argv's text, or NULL */
    size_t length;        /* LONG_PATH: the path's length */
    size_t limit;         /* LONG_PATH: the most bytes it may have */
    const rp_option *row; /* BAD_VALUE: the table's row, for what it takes (or NULL) */
} rp_option_fault;

/* parse flags */
enum {
    RP_OPTIONS_KEEP_UNKNOWN = 1u << 0, /* leave what no row names in argv, in order (else an
                                          error); argv[*argc] is set to NULL */
    RP_OPTIONS_HELP = 1u << 1,         /* --help and -h stop the parse with RP_OPTION_HELP */
};

/* Rows in `table` before RP_OPTION_END. */
RP_API int rp_options_count(const rp_option *table);

/* The row named `name` ("--epochs"), or NULL. SECTION, DOC and HIDDEN rows are never found. */
RP_API const rp_option *rp_options_find(const rp_option *table, const char *name);

/* Whether row `name` is set in `given` (false for a name the table lacks). */
RP_API bool rp_options_was_given(const rp_option *table, const rp_options_given *given,
                                 const char *name);

/*
 * Fills the struct at `dst` from argv[1..*argc): each option that a row names, with its value
 * checked against the row's type and bounds. Positional arguments and, with
 * RP_OPTIONS_KEEP_UNKNOWN, options no row names are moved down to argv[1..] in their order and
 * *argc becomes their count plus one; without it an unknown option is an error and argv is left as
 * it is. `given` (may be NULL) gets the rows the command line named; it is cleared first. Errors:
 * RP_ERR_INVALID with `fault` (may be NULL) saying what and a message naming the option and its
 * value ("--replicas 0: expected an integer in [1, 4096]"). With RP_OPTIONS_HELP, --help stops the
 * parse: the status is RP_OK and fault->kind is RP_OPTION_HELP.
 */
RP_API rp_status rp_options_parse(const rp_option *table, void *dst, int *argc, char **argv,
                                  unsigned flags, rp_options_given *given, rp_option_fault *fault);

/*
 * For a resumed run: the first option in argv[1..argc) (in order) whose row lacks
 * RP_OPT_RESUME, as an RP_ERR_INVALID with fault->kind RP_OPTION_NOT_ON_RESUME. Options no row
 * names, and the names in `also` (NULL-ended, may be NULL: "--resume"), pass.
 */
RP_API rp_status rp_options_check_resume(const rp_option *table, int argc, char *const *argv,
                                         const char *const *also, rp_option_fault *fault);

/*
 * The resume rule: copies from `cli` into `dst` each field that is not saved (this
 * invocation's, never the run's), and each RP_OPT_RESUME field that `given` names.
 */
RP_API void rp_options_apply_resume(const rp_option *table, void *dst, const void *cli,
                                    const rp_options_given *given);

/*
 * Writes the help text: a section's heading, then each option as "  --name META" in a column
 * of 18 and its help, continuation lines indented to column 20.
 */
RP_API void rp_options_print_help(FILE *f, const rp_option *table);

/*
 * The configuration's JSON: adds each RP_OPT_SAVED field of `src` to `object` (a cJSON
 * object, in the table's order); numbers as numbers, CHOICE and ENUM as their text, flags as
 * true/false, paths as strings. Errors: RP_ERR_NOMEM.
 */
struct cJSON;
RP_API rp_status rp_options_to_json(const rp_option *table, const void *src, struct cJSON *object);

/*
 * Reads each RP_OPT_SAVED field from `object` as strictly as the command line: a key that is
 * missing (unless RP_OPT_OPTIONAL), of another type, out of bounds or not one of the choices
 * stops the read. The first failure is written to bad[size] (`"epochs" is 0, outside [1,
 * 100000]`, `"model" is missing`) and the status is RP_ERR_FORMAT; fields read before it are
 * set. An RP_OPT_OPTIONAL key that is absent or unreadable keeps the field's value.
 */
RP_API rp_status rp_options_from_json(const rp_option *table, void *dst, const struct cJSON *object,
                                      char *bad, size_t size);

/* The texts rp_options_from_json's messages use, for a program's own JSON readers: a number in
   the fewest digits (15 to 17) that read back as the same double; a JSON value, a number so, any
   other cut at 64 bytes ("a value" when out of memory). */
RP_API void rp_options_number_text(double x, char *buf, size_t size);
RP_API void rp_options_value_text(const struct cJSON *v, char *buf, size_t size);

/*
 * A command line's number outside a table (a benchmark's --iters, eval's --threads), by the
 * rule the tables' int rows follow: the whole text s is one decimal integer (no trailing
 * characters, no overflow) in [lo, hi]. true with *v set; false otherwise (s NULL or
 * empty included; *v then holds no meaningful value). Thread-safe.
 */
RP_API bool rp_options_parse_long(const char *s, long lo, long hi, long *v);

/*
 * A path given on a command line outside a table, by the rule the tables' path rows follow:
 * copies `value` into dst[size], or prints why it cannot to stderr ("<cmd>: --out needs a path,
 * not an empty string", "<cmd>: OUT is 5000 bytes long, over the 4095 a path may have") and
 * returns false: a path is never silently cut short. With dst NULL it only checks (a path kept
 * as a pointer and copied into a size-byte buffer later).
 */
RP_API bool rp_options_copy_path(const char *cmd, const char *option, const char *value, char *dst,
                                 size_t size);

/*
 * The echo of a configuration: "--name value" for each saved option (RP_OPT_SAVED, not
 * RP_OPT_OWN_JSON; a flag by its name alone) whose field in `cfg` differs from `defaults`,
 * separated by spaces, into buf[size] (cut with "..." if it does not fit). Returns buf.
 */
RP_API char *rp_options_describe(const rp_option *table, const void *cfg, const void *defaults,
                                 char *buf, size_t size);

/*
 * Prints a command-line fault of rp_options_parse or rp_options_check_resume on stderr as
 * command `cmd` words it, and returns 2 (the exit status of a bad command line):
 * "<cmd>: unknown option --x (see --help)", "<cmd>: --lr needs a value (see --help)",
 * "<cmd>: bad value "x" for --lr (see --help)", "<cmd>: --out needs a path, not an empty
 * string", "<cmd>: --out is 5000 bytes long, over the 4095 a path may have", "<cmd>: --lr cannot
 * be changed when resuming; the run's configuration comes from its checkpoint (start a new run
 * with --out)", else "<cmd>: <rp_last_error()>".
 */
RP_API int rp_options_print_fault(const char *cmd, const rp_option_fault *f);

#ifdef __cplusplus
}
#endif

#endif
