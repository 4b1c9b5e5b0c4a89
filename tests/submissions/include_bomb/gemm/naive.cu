// Hostile submission (include_bomb): the stage includes a header that includes itself twice, 40 deep
// (2^40 inclusions). Each compile runs until its limit; the submission's compiles share one deadline
// (settings.timeouts.static_total_s), so the grading ends with the item failed, never an autograder error.
#include "bomb.h"
extern "C" __constant__ int mmNaive_launch[5] = {32, 32, 32, 32, 0};
extern "C" __global__ void mmNaive(const float* A, const float* B, float* C, int N)
{
    const int row = blockIdx.y * 32 + threadIdx.y, col = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.0f;
    for (int k = 0; k < N; ++k) acc += A[row * N + k] * B[k * N + col];
    C[row * N + col] = acc;
}
