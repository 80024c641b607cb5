/*
 * projection.c - the categorical projection of C51/D4PG: a distribution on
 * the support z, shifted and scaled to r + d z, put back on z.
 *
 * Acme's l2_project writes it as a triangular kernel: atom i receives
 * p_j * clip(1 - |z'_j - z_i| / dz, 0, 1) from every target atom z'_j
 * (clipped to the support first). Only the two atoms around z'_j have a
 * non-zero weight, (u - b) and (b - l) with b = (z'_j - v_min) / dz, so the
 * loop below visits those two and gives the same numbers in O(atoms) per row
 * instead of O(atoms^2).
 */
#include <math.h>

#include "models/d4pg/d4pg_internal.h"

rp_status rp_d4pg_project(const float *p, const float *r, const float *d, int B, int atoms,
                          float v_min, float v_max, float *out)
{
    if (!p || !r || !d || !out) return RP_ERROR(RP_ERR_INVALID, "rp_d4pg_project: NULL argument");
    if (B < 1 || atoms < 2)
        return RP_ERROR(RP_ERR_INVALID, "rp_d4pg_project: B %d (>= 1), atoms %d (>= 2)", B, atoms);
    if (!isfinite(v_min) || !isfinite(v_max) || !(v_min < v_max))
        return RP_ERROR(RP_ERR_INVALID, "rp_d4pg_project: support [%g, %g]; finite, min < max",
                        (double)v_min, (double)v_max);
    for (int b = 0; b < B; b++)
        if (!isfinite(r[b]) || !isfinite(d[b]))
            return RP_ERROR(RP_ERR_NUMERIC, "rp_d4pg_project: row %d has reward %g, discount %g", b,
                            (double)r[b], (double)d[b]);
    const double lo = v_min, hi = v_max, dz = (hi - lo) / (atoms - 1);
    for (int b = 0; b < B; b++) {
        const float *pb = p + (int64_t)b * atoms;
        float *ob = out + (int64_t)b * atoms;
        float *acc = ob;
        for (int i = 0; i < atoms; i++)
            acc[i] = 0;
        for (int j = 0; j < atoms; j++) {
            double z = (double)r[b] + (double)d[b] * (lo + j * dz);
            z = z < lo ? lo : z > hi ? hi : z;
            double pos = (z - lo) / dz;
            int l = (int)floor(pos);
            if (l >= atoms - 1) {
                acc[atoms - 1] += pb[j];
                continue;
            }
            if (l < 0) l = 0;
            double frac = pos - l;
            acc[l] += (float)(pb[j] * (1.0 - frac));
            if (frac > 0) acc[l + 1] += (float)(pb[j] * frac);
        }
    }
    return RP_OK;
}
