/*
 * median.c - the median that every benchmark of the command reports.
 */
#include "cli.h"

/* The median of n values (sorts them). */
double rp_cli_median(double *v, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double tmp = v[j];
            v[j] = v[j - 1];
            v[j - 1] = tmp;
        }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
