// Hostile occupancy program (occ_include_line_splice): backslash-newline splices #inc + lude = #include.
// The grader must refuse the #include (the occupancy build items fail); the secret must appear nowhere.
#inc\
lude "/tmp/gemm-grader-attack-secret.h"
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
