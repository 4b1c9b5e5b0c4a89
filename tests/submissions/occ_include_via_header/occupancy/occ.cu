// Hostile occupancy program (occ_include_via_header): a header next to occ.cu (allowed) includes an
// absolute path. The grader must check what the headers include too.
#include "occ_config.h"
#include <cstdio>
#include <cuda_runtime.h>

extern "C" __global__ void work(const float* in, float* out, int n, int iters)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * iters;
}

extern "C" __global__ void heavy(const float* in, float* out, int n, int iters)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] + iters;
}

int main()
{
    printf("{\"format\": \"occupancy-v1\"}\n");
    return 0;
}
