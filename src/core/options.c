/*
 * options.c - everything an option table gives (replicator/options.h): the parser, the help
 * text, the JSON configuration, the resume rules and the echo. Each is a loop over the rows,
 * so an option is declared once and all of them agree.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replicator/options.h"

static bool is_option_row(const rp_option *o)
{
    return o->type != RP_OPTION_SECTION && o->type != RP_OPTION_DOC;
}

/* A row the command line can name. */
static bool is_arg_row(const rp_option *o)
{
    return is_option_row(o) && !(o->flags & RP_OPT_HIDDEN);
}

int rp_options_count(const rp_option *table)
{
    int n = 0;
    while (table && table[n].type != RP_OPTION_NONE)
        n++;
    return n;
}

static int find_index(const rp_option *table, const char *name)
{
    for (int i = 0; table[i].type != RP_OPTION_NONE; i++)
        if (is_arg_row(&table[i]) && !strcmp(table[i].name, name)) return i;
    return -1;
}

const rp_option *rp_options_find(const rp_option *table, const char *name)
{
    int i = table && name ? find_index(table, name) : -1;
    return i < 0 ? NULL : &table[i];
}

bool rp_options_was_given(const rp_option *table, const rp_options_given *given, const char *name)
{
    int i = table && given && name ? find_index(table, name) : -1;
    return i >= 0 && i < RP_OPTIONS_MAX && (given->bits[i / 64] >> (i % 64) & 1);
}

/* ---- values ------------------------------------------------------------------------------ */

static void *field(void *base, const rp_option *o)
{
    return (char *)base + o->offset;
}

static const void *cfield(const void *base, const rp_option *o)
{
    return (const char *)base + o->offset;
}

/* The index of `v` in "a|b|c", or -1. */
static int choice_index(const char *choices, const char *v)
{
    size_t len = strlen(v);
    int k = 0;
    for (const char *c = choices; c && *c; k++) {
        const char *bar = strchr(c, '|');
        size_t n = bar ? (size_t)(bar - c) : strlen(c);
        if (n == len && !strncmp(c, v, n)) return k;
        c = bar ? bar + 1 : c + n;
    }
    return -1;
}

/* Choice k's text into buf[size] ("" if there is none). */
static const char *choice_text(const char *choices, int k, char *buf, size_t size)
{
    buf[0] = '\0';
    for (const char *c = choices; c && *c; k--) {
        const char *bar = strchr(c, '|');
        size_t n = bar ? (size_t)(bar - c) : strlen(c);
        if (k == 0) {
            snprintf(buf, size, "%.*s", (int)n, c);
            break;
        }
        c = bar ? bar + 1 : c + n;
    }
    return buf;
}

/* "a, b or c" */
static void choices_words(const char *choices, char *buf, size_t size)
{
    size_t n = 0;
    int count = 0;
    for (const char *c = choices; *c; c++)
        count += *c == '|';
    char one[64];
    for (int k = 0; k <= count && n < size; k++)
        n += (size_t)snprintf(buf + n, size - n, "%s%s",
                              k == 0       ? ""
                              : k == count ? " or "
                                           : ", ",
                              choice_text(choices, k, one, sizeof one));
}

static int enum_get(const rp_option *o, const void *base)
{
    int v;
    memcpy(&v, cfield(base, o), sizeof v);
    return v;
}

static int enum_index(const rp_option *o, int v)
{
    for (int k = 0; o->values && choice_text(o->choices, k, (char[64]){0}, 64)[0]; k++)
        if (o->values[k] == v) return k;
    return -1;
}

static bool in_bounds(const rp_option *o, double x)
{
    bool low = (o->flags & RP_OPT_ABOVE_LO) ? x > o->lo : x >= o->lo;
    return low && x <= o->hi;
}

/* A whole decimal integer in the row's bounds. */
static bool parse_integer(const rp_option *o, const char *s, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || !in_bounds(o, (double)v)) return false;
    *out = v;
    return true;
}

/*
 * Reads `value` into row o's field. A float is compared with its bounds as a float, as the
 * command line always did (0.9999 as a float is below 0.9999 as a double).
 */
static bool parse_value(const rp_option *o, const char *value, void *dst)
{
    void *f = field(dst, o);
    long long n;
    char *end;
    switch (o->type) {
    case RP_OPTION_INT:
        if (!parse_integer(o, value, &n)) return false;
        *(int *)f = (int)n;
        return true;
    case RP_OPTION_INT64:
        if (!parse_integer(o, value, &n)) return false;
        *(int64_t *)f = (int64_t)n;
        return true;
    case RP_OPTION_UINT64:
        if (!parse_integer(o, value, &n)) return false;
        *(uint64_t *)f = (uint64_t)n;
        return true;
    case RP_OPTION_FLOAT: {
        float x = strtof(value, &end);
        bool low = (o->flags & RP_OPT_ABOVE_LO) ? x > (float)o->lo : x >= (float)o->lo;
        if (end == value || *end || !(low && x <= (float)o->hi)) return false;
        *(float *)f = x;
        return true;
    }
    case RP_OPTION_DOUBLE: {
        double x = strtod(value, &end);
        if (end == value || *end || !in_bounds(o, x)) return false;
        *(double *)f = x;
        return true;
    }
    case RP_OPTION_CHOICE:
        if (choice_index(o->choices, value) < 0 || strlen(value) >= o->size) return false;
        memcpy(f, value, strlen(value) + 1);
        return true;
    case RP_OPTION_ENUM: {
        int k = choice_index(o->choices, value);
        if (k < 0) return false;
        memcpy(f, &o->values[k], sizeof(int));
        return true;
    }
    case RP_OPTION_TEXT:
        if (!*value || strlen(value) >= o->size) return false;
        memcpy(f, value, strlen(value) + 1);
        return true;
    case RP_OPTION_CUSTOM:
        return o->parse && o->parse(o, value, dst);
    default:
        return false;
    }
}

/* What row o takes, in words: "expected an integer in [1, 4096]". */
static void expected_words(const rp_option *o, char *what, size_t size)
{
    if (o->type == RP_OPTION_CHOICE || o->type == RP_OPTION_ENUM) {
        char words[192];
        choices_words(o->choices, words, sizeof words);
        snprintf(what, size, "expected %s", words);
    } else if (o->type == RP_OPTION_INT || o->type == RP_OPTION_INT64 ||
               o->type == RP_OPTION_UINT64) {
        snprintf(what, size, "expected an integer in [%.0f, %.0f]", o->lo, o->hi);
    } else if (o->type == RP_OPTION_FLOAT || o->type == RP_OPTION_DOUBLE) {
        snprintf(what, size, "expected a number in %c%g, %g]",
                 (o->flags & RP_OPT_ABOVE_LO) ? '(' : '[', o->lo, o->hi);
    } else {
        snprintf(what, size, "not a value it takes");
    }
}

/* The library's wording of a bad value: "--replicas 0: expected an integer in [1, 4096]". */
static rp_status bad_value(const rp_option *o, const char *v)
{
    char what[256];
    expected_words(o, what, sizeof what);
    return RP_ERROR(RP_ERR_INVALID, "%s %s: %s", o->name, v ? v : "(missing)", what);
}

static void set_fault(rp_option_fault *fault, rp_option_fault_kind kind, const char *option,
                      const char *value)
{
    if (!fault) return;
    memset(fault, 0, sizeof *fault);
    fault->kind = kind;
    fault->option = option;
    fault->value = value;
}

/* ---- the parser -------------------------------------------------------------------------- */

static rp_status take_path(const rp_option *o, const char *a, const char *v, void *dst,
                           rp_option_fault *fault)
{
    size_t len = strlen(v), size = o->size ? o->size : PATH_MAX;
    if (len == 0) {
        set_fault(fault, RP_OPTION_EMPTY_PATH, a, v);
        return RP_ERROR(RP_ERR_INVALID, "%s needs a path, not an empty string", a);
    }
    if (len >= size) {
        set_fault(fault, RP_OPTION_LONG_PATH, a, v);
        if (fault) {
            fault->length = len;
            fault->limit = size - 1;
        }
        return RP_ERROR(RP_ERR_INVALID, "%s is %zu bytes long, over the %zu a path may have", a,
                        len, size - 1);
    }
    if (o->size)
        memcpy(field(dst, o), v, len + 1);
    else
        memcpy(field(dst, o), &v, sizeof v);
    return RP_OK;
}

rp_status rp_options_parse(const rp_option *table, void *dst, int *argc, char **argv,
                           unsigned flags, rp_options_given *given, rp_option_fault *fault)
{
    if (!table || !dst || !argc || !argv)
        return RP_ERROR(RP_ERR_INVALID, "rp_options_parse: NULL table, destination or argv");
    if (rp_options_count(table) > RP_OPTIONS_MAX)
        return RP_ERROR(RP_ERR_INVALID, "rp_options_parse: a table of %d rows, over the %d",
                        rp_options_count(table), RP_OPTIONS_MAX);
    set_fault(fault, RP_OPTION_OK, NULL, NULL);
    if (given) memset(given, 0, sizeof *given);
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i], *v = i + 1 < *argc ? argv[i + 1] : NULL;
        if ((flags & RP_OPTIONS_HELP) && (!strcmp(a, "--help") || !strcmp(a, "-h"))) {
            set_fault(fault, RP_OPTION_HELP, a, NULL);
            return RP_OK;
        }
        int idx = find_index(table, a);
        if (idx < 0) {
            if (!(flags & RP_OPTIONS_KEEP_UNKNOWN)) {
                set_fault(fault, RP_OPTION_UNKNOWN, a, NULL);
                return RP_ERROR(RP_ERR_INVALID, "unknown option %s", a);
            }
            argv[out++] = argv[i];
            continue;
        }
        const rp_option *o = &table[idx];
        if (given) given->bits[idx / 64] |= 1ull << (idx % 64);
        if (o->type == RP_OPTION_FLAG) {
            bool value = !(o->flags & RP_OPT_NEGATE);
            memcpy(field(dst, o), &value, sizeof value);
            continue;
        }
        if ((o->flags & RP_OPT_BARE) && o->type == RP_OPTION_INT &&
            (!v || v[0] < '0' || v[0] > '9')) {
            int lo = (int)o->lo;
            memcpy(field(dst, o), &lo, sizeof lo);
            continue;
        }
        if (!v) {
            set_fault(fault, RP_OPTION_NO_VALUE, a, NULL);
            return bad_value(o, NULL);
        }
        i++;
        if (o->type == RP_OPTION_PATH) {
            RP_CHECK(take_path(o, a, v, dst, fault));
            continue;
        }
        if (o->type == RP_OPTION_CUSTOM) rp_error_clear();
        if (!parse_value(o, v, dst)) {
            if (o->type == RP_OPTION_CUSTOM && rp_last_status() != RP_OK) {
                set_fault(fault, RP_OPTION_REFUSED, a, v);
                return rp_last_status();
            }
            set_fault(fault, RP_OPTION_BAD_VALUE, a, v);
            if (fault) fault->row = o;
            return bad_value(o, v);
        }
    }
    if (flags & RP_OPTIONS_KEEP_UNKNOWN) {
        *argc = out;
        argv[out] = NULL;
    }
    return RP_OK;
}

/* ---- resuming ------------------------------------------------------------------------------ */

rp_status rp_options_check_resume(const rp_option *table, int argc, char *const *argv,
                                  const char *const *also, rp_option_fault *fault)
{
    set_fault(fault, RP_OPTION_OK, NULL, NULL);
    for (int k = 1; k < argc; k++) {
        if (strncmp(argv[k], "--", 2) != 0) continue;
        bool ok = false;
        for (int m = 0; also && also[m]; m++)
            ok |= !strcmp(argv[k], also[m]);
        const rp_option *o = rp_options_find(table, argv[k]);
        if (ok || !o || (o->flags & RP_OPT_RESUME)) continue;
        set_fault(fault, RP_OPTION_NOT_ON_RESUME, argv[k], NULL);
        return RP_ERROR(RP_ERR_INVALID, "%s cannot be changed when resuming", argv[k]);
    }
    return RP_OK;
}

void rp_options_apply_resume(const rp_option *table, void *dst, const void *cli,
                             const rp_options_given *given)
{
    for (int i = 0; table[i].type != RP_OPTION_NONE; i++) {
        const rp_option *o = &table[i];
        size_t size = o->size ? o->size : o->type == RP_OPTION_PATH ? sizeof(const char *) : 0;
        if (!is_option_row(o) || !size) continue;
        bool saved = o->flags & (RP_OPT_SAVED | RP_OPT_OWN_JSON);
        bool named = given && (given->bits[i / 64] >> (i % 64) & 1);
        if (!saved || ((o->flags & RP_OPT_RESUME) && named))
            memcpy(field(dst, o), cfield(cli, o), size);
    }
}

/* ---- help ---------------------------------------------------------------------------------- */

void rp_options_print_help(FILE *f, const rp_option *table)
{
    for (int i = 0; table[i].type != RP_OPTION_NONE; i++) {
        const rp_option *o = &table[i];
        if (o->type == RP_OPTION_SECTION) {
            fprintf(f, "%s\n", o->name);
            continue;
        }
        if (!o->help || (o->flags & RP_OPT_HIDDEN)) continue;
        char head[96];
        int n = snprintf(head, sizeof head, "%s%s%s", o->name, o->meta ? " " : "",
                         o->meta ? o->meta : "");
        fprintf(f, "  %s%*s", head, n <= 17 ? 18 - n : 2, "");
        for (const char *line = o->help; *line;) {
            const char *nl = strchr(line, '\n');
            int len = nl ? (int)(nl - line) : (int)strlen(line);
            fprintf(f, "%s%.*s\n", line == o->help ? "" : "                    ", len, line);
            line += len + (nl ? 1 : 0);
        }
    }
}

/* ---- JSON ---------------------------------------------------------------------------------- */

static const char *json_key(const rp_option *o, char *buf, size_t size)
{
    if (o->key) return o->key;
    const char *n = o->name;
    while (*n == '-')
        n++;
    snprintf(buf, size, "%s", n);
    for (char *c = buf; *c; c++)
        if (*c == '-') *c = '_';
    return buf;
}

static bool saved_here(const rp_option *o)
{
    return is_option_row(o) && (o->flags & RP_OPT_SAVED) && !(o->flags & RP_OPT_OWN_JSON);
}

static double number_of(const rp_option *o, const void *src)
{
    const void *f = cfield(src, o);
    switch (o->type) {
    case RP_OPTION_INT:
        return *(const int *)f;
    case RP_OPTION_INT64:
        return (double)*(const int64_t *)f;
    case RP_OPTION_UINT64:
        return (double)*(const uint64_t *)f;
    case RP_OPTION_FLOAT:
        return *(const float *)f;
    case RP_OPTION_DOUBLE:
        return *(const double *)f;
    default:
        return 0;
    }
}

rp_status rp_options_to_json(const rp_option *table, const void *src, struct cJSON *object)
{
    if (!table || !src || !cJSON_IsObject(object))
        return RP_ERROR(RP_ERR_INVALID, "rp_options_to_json: NULL table, source or object");
    for (int i = 0; table[i].type != RP_OPTION_NONE; i++) {
        const rp_option *o = &table[i];
        if (!saved_here(o)) continue;
        char kb[64], one[64];
        const char *key = json_key(o, kb, sizeof kb);
        cJSON *item = NULL;
        switch (o->type) {
        case RP_OPTION_FLAG:
            item = cJSON_AddBoolToObject(object, key, *(const bool *)cfield(src, o));
            break;
        case RP_OPTION_CHOICE:
        case RP_OPTION_PATH:
        case RP_OPTION_TEXT:
            item = cJSON_AddStringToObject(object, key, (const char *)cfield(src, o));
            break;
        case RP_OPTION_ENUM:
            item = cJSON_AddStringToObject(
                object, key, choice_text(o->choices, enum_index(o, enum_get(o, src)), one, 64));
            break;
        default:
            item = cJSON_AddNumberToObject(object, key, number_of(o, src));
            break;
        }
        if (!item) return RP_ERROR(RP_ERR_NOMEM, "rp_options_to_json: no memory for \"%s\"", key);
    }
    return RP_OK;
}

/* The fewest digits that read back as the same double: as the file most likely has it. */
void rp_options_number_text(double x, char *buf, size_t size)
{
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, size, "%.*g", digits, x);
        if (strtod(buf, NULL) == x) break;
    }
}

bool rp_options_parse_long(const char *s, long lo, long hi, long *v)
{
    if (!s || !v) return false;
    char *end;
    errno = 0;
    *v = strtol(s, &end, 10);
    return !errno && end != s && !*end && *v >= lo && *v <= hi;
}

bool rp_options_copy_path(const char *cmd, const char *option, const char *value, char *dst,
                          size_t size)
{
    size_t len = value ? strlen(value) : 0;
    if (len == 0) {
        fprintf(stderr, "%s: %s needs a path, not an empty string\n", cmd, option);
        return false;
    }
    if (len >= size) {
        fprintf(stderr, "%s: %s is %zu bytes long, over the %zu a path may have\n", cmd, option,
                len, size - 1);
        return false;
    }
    if (dst) memcpy(dst, value, len + 1);
    return true;
}

/* A short text of a value for a message: a number in full, a string quoted, cut at 64 bytes. */
void rp_options_value_text(const cJSON *v, char *buf, size_t size)
{
    if (cJSON_IsNumber(v)) {
        rp_options_number_text(v->valuedouble, buf, size);
        return;
    }
    char *text = cJSON_PrintUnformatted(v);
    if (!text) {
        snprintf(buf, size, "a value");
        return;
    }
    size_t n = strlen(text);
    snprintf(buf, size, "%.64s%s", text, n > 64 ? "..." : "");
    free(text);
}

static bool refuse(char *bad, size_t size, const char *key, const cJSON *v, const char *why)
{
    if (!v) {
        snprintf(bad, size, "\"%.64s\" is missing", key);
        return false;
    }
    char value[80];
    rp_options_value_text(v, value, sizeof value);
    snprintf(bad, size, "\"%.64s\" is %s, %s", key, value, why);
    return false;
}

/* Reads row o from `v` (non-NULL) into dst, or says why not into bad. */
static bool read_value(const rp_option *o, const char *key, const cJSON *v, void *dst, char *bad,
                       size_t size)
{
    void *f = field(dst, o);
    char why[128];
    switch (o->type) {
    case RP_OPTION_FLAG:
        if (!cJSON_IsBool(v)) return refuse(bad, size, key, v, "not true or false");
        *(bool *)f = cJSON_IsTrue(v);
        return true;
    case RP_OPTION_CHOICE:
    case RP_OPTION_ENUM:
    case RP_OPTION_PATH:
    case RP_OPTION_TEXT: {
        if (!cJSON_IsString(v)) return refuse(bad, size, key, v, "not a string");
        size_t n = strlen(v->valuestring);
        if (o->type != RP_OPTION_ENUM && n >= o->size) {
            snprintf(why, sizeof why, "%zu bytes long, over the %zu it may have", n, o->size - 1);
            return refuse(bad, size, key, v, why);
        }
        bool any = o->type == RP_OPTION_PATH || o->type == RP_OPTION_TEXT;
        int k = any ? 0 : choice_index(o->choices, v->valuestring);
        if (k < 0) {
            char words[96];
            choices_words(o->choices, words, sizeof words);
            snprintf(why, sizeof why, "not %s", words);
            return refuse(bad, size, key, v, why);
        }
        if (o->type == RP_OPTION_ENUM)
            memcpy(f, &o->values[k], sizeof(int));
        else
            memcpy(f, v->valuestring, n + 1);
        return true;
    }
    default:
        break;
    }
    if (!cJSON_IsNumber(v)) return refuse(bad, size, key, v, "not a number");
    double x = v->valuedouble;
    bool ok = in_bounds(o, x) || ((o->flags & RP_OPT_ZERO_OK) && x == 0);
    if (ok && o->type == RP_OPTION_FLOAT && x != 0) {
        /* As the command line: the float it becomes must be in bounds. */
        float y = (float)x;
        ok = ((o->flags & RP_OPT_ABOVE_LO) ? y > (float)o->lo : y >= (float)o->lo) &&
             y <= (float)o->hi;
    }
    if (!ok) {
        char low[32], high[32];
        rp_options_number_text(o->lo, low, sizeof low);
        rp_options_number_text(o->hi, high, sizeof high);
        snprintf(why, sizeof why, "outside %c%s, %s]", (o->flags & RP_OPT_ABOVE_LO) ? '(' : '[',
                 low, high);
        return refuse(bad, size, key, v, why);
    }
    switch (o->type) {
    case RP_OPTION_INT:
        *(int *)f = (int)x;
        break;
    case RP_OPTION_INT64:
        *(int64_t *)f = (int64_t)x;
        break;
    case RP_OPTION_UINT64:
        *(uint64_t *)f = (uint64_t)x;
        break;
    case RP_OPTION_FLOAT:
        *(float *)f = (float)x;
        break;
    case RP_OPTION_DOUBLE:
        *(double *)f = x;
        break;
    default:
        break;
    }
    return true;
}

rp_status rp_options_from_json(const rp_option *table, void *dst, const struct cJSON *object,
                               char *bad, size_t size)
{
    char scratch[256];
    if (!bad || !size) {
        bad = scratch;
        size = sizeof scratch;
    }
    bad[0] = '\0';
    if (!table || !dst || !cJSON_IsObject(object)) {
        snprintf(bad, size, "it is not a JSON object");
        return RP_ERROR(RP_ERR_FORMAT, "the configuration is incomplete or invalid: %s", bad);
    }
    for (int i = 0; table[i].type != RP_OPTION_NONE; i++) {
        const rp_option *o = &table[i];
        if (!saved_here(o)) continue;
        char kb[64];
        const char *key = json_key(o, kb, sizeof kb);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(object, key);
        if (o->flags & RP_OPT_OPTIONAL) {
            /* Absent from runs saved before it existed; unreadable keeps the default too. */
            char ignored[8];
            if (v) (void)read_value(o, key, v, dst, ignored, sizeof ignored);
            continue;
        }
        if (!v || !read_value(o, key, v, dst, bad, size)) {
            if (!v) refuse(bad, size, key, NULL, NULL);
            return RP_ERROR(RP_ERR_FORMAT, "the configuration is incomplete or invalid: %s", bad);
        }
    }
    return RP_OK;
}

/* ---- the echo -------------------------------------------------------------------------------- */

char *rp_options_describe(const rp_option *table, const void *cfg, const void *defaults, char *buf,
                          size_t size)
{
    if (!buf || !size) return buf;
    buf[0] = '\0';
    size_t n = 0;
    for (int i = 0; table && table[i].type != RP_OPTION_NONE; i++) {
        const rp_option *o = &table[i];
        if (!saved_here(o) || !is_arg_row(o) || o->type == RP_OPTION_CUSTOM || !o->size) continue;
        if (!memcmp(cfield(cfg, o), cfield(defaults, o), o->size)) continue;
        bool text =
            o->type == RP_OPTION_CHOICE || o->type == RP_OPTION_PATH || o->type == RP_OPTION_TEXT;
        if (text && !strcmp(cfield(cfg, o), cfield(defaults, o))) continue;
        char value[160] = "", one[64];
        switch (o->type) {
        case RP_OPTION_FLAG:
            if (*(const bool *)cfield(cfg, o) == !!(o->flags & RP_OPT_NEGATE)) continue;
            break;
        case RP_OPTION_CHOICE:
        case RP_OPTION_PATH:
        case RP_OPTION_TEXT:
            snprintf(value, sizeof value, " %s", (const char *)cfield(cfg, o));
            break;
        case RP_OPTION_ENUM:
            snprintf(value, sizeof value, " %s",
                     choice_text(o->choices, enum_index(o, enum_get(o, cfg)), one, sizeof one));
            break;
        case RP_OPTION_FLOAT:
            snprintf(value, sizeof value, " %g", (double)*(const float *)cfield(cfg, o));
            break;
        case RP_OPTION_DOUBLE:
            snprintf(value, sizeof value, " %g", *(const double *)cfield(cfg, o));
            break;
        default:
            snprintf(value, sizeof value, " %.0f", number_of(o, cfg));
            break;
        }
        int w = snprintf(buf + n, size - n, "%s%s%s", n ? " " : "", o->name, value);
        if (w < 0 || (size_t)w >= size - n) {
            if (size > 4) snprintf(buf + (size > 4 ? size - 4 : 0), 4, "...");
            return buf;
        }
        n += (size_t)w;
    }
    return buf;
}

int rp_options_print_fault(const char *cmd, const rp_option_fault *f)
{
    switch (f->kind) {
    case RP_OPTION_UNKNOWN:
        fprintf(stderr, "%s: unknown option %s (see --help)\n", cmd, f->option);
        break;
    case RP_OPTION_NO_VALUE:
        fprintf(stderr, "%s: %s needs a value (see --help)\n", cmd, f->option);
        break;
    case RP_OPTION_BAD_VALUE:
        if (f->row) {
            char what[256];
            expected_words(f->row, what, sizeof what);
            fprintf(stderr, "%s: bad value \"%s\" for %s: %s (see --help)\n", cmd, f->value,
                    f->option, what);
        } else {
            fprintf(stderr, "%s: bad value \"%s\" for %s (see --help)\n", cmd, f->value, f->option);
        }
        break;
    case RP_OPTION_EMPTY_PATH:
        fprintf(stderr, "%s: %s needs a path, not an empty string\n", cmd, f->option);
        break;
    case RP_OPTION_LONG_PATH:
        fprintf(stderr, "%s: %s is %zu bytes long, over the %zu a path may have\n", cmd, f->option,
                f->length, f->limit);
        break;
    case RP_OPTION_NOT_ON_RESUME:
        fprintf(stderr,
                "%s: %s cannot be changed when resuming; the run's configuration comes from its "
                "checkpoint (start a new run with --out)\n",
                cmd, f->option);
        break;
    default:
        fprintf(stderr, "%s: %s\n", cmd, rp_last_error());
        break;
    }
    return 2;
}
