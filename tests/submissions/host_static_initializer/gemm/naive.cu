// Hostile submission (host_static_initializer): host code with a static constructor that would write a file
// if it ever ran. The grader compiles device code only (a cubin) and never runs a student's host code, so
// the stage grades normally and /tmp/gemm-grader-host-code-ran must never appear.
#include <cstdio>
struct Sneaky { Sneaky() { if (FILE* f = fopen("/tmp/gemm-grader-host-code-ran", "w")) { fputs("ran\n", f); fclose(f); } } };
static Sneaky sneaky;
constexpr int TILE = 32;
extern "C" __constant__ int mmNaive_launch[5] = {TILE, TILE, TILE, TILE, 0};
extern "C" __global__ void mmNaive(const float* A, const float* B, float* C, int N)
{
    const int row = blockIdx.y * TILE + threadIdx.x;
    const int col = blockIdx.x * TILE + threadIdx.y;
    float acc = 0.0f;
    for (int k = 0; k < N; ++k) acc += A[row * N + k] * B[k * N + col];
    C[row * N + col] = acc;
}
