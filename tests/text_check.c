/*
 * text_check.c - see text_check.h.
 */
#include "text_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *tc_slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!s) {
        fclose(f);
        return NULL;
    }
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = 0;
    fclose(f);
    return s;
}

bool tc_line_with(const char *text, const char *const *needles)
{
    for (const char *line = text; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char buf[1024];
        snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf ? len : sizeof buf - 1), line);
        bool all = true;
        for (int i = 0; needles[i] && all; i++)
            all = needles[i][0] == '!' ? strstr(buf, needles[i] + 1) == NULL
                                       : strstr(buf, needles[i]) != NULL;
        if (all) return true;
        line = end ? end + 1 : NULL;
    }
    return false;
}
