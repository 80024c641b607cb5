/* Placeholder while the strict table is written: the cpu table. */
#include "kernels/kernels.h"

const rp_kernels *rp_kernels_strict(void)
{
    return rp_kernels_cpu();
}
