// Hostile submission (printf_flood): every thread prints on every launch; the grader must trim the output,
// stay within its time limits and still judge the numbers (this kernel computes C correctly).
#include <cstdio>
constexpr int TILE = 32;
extern "C" __constant__ int mmNaive_launch[5] = {TILE, TILE, TILE, TILE, 0};
extern "C" __global__ void mmNaive(const float* A, const float* B, float* C, int N)
{
    const int row = blockIdx.y * TILE + threadIdx.x;
    const int col = blockIdx.x * TILE + threadIdx.y;
    float acc = 0.0f;
    for (int k = 0; k < N; ++k) acc += A[row * N + k] * B[k * N + col];
    printf("thread (%d, %d) of block (%d, %d) says hello with %f\n", threadIdx.x, threadIdx.y, blockIdx.x, blockIdx.y, acc);
    C[row * N + col] = acc;
}
