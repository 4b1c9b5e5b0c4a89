// Broken submission (tile_not_dividing): declares 96 x 96 tiles, which do not divide the sizes the grader
// uses (multiples of 256); the grader must fail stage "tiled" before running it and say why.
extern "C" __constant__ int mmTiled_launch[5] = {32, 32, 96, 96, 0};
extern "C" __global__ void mmTiled(const float* A, const float* B, float* C, int N) { C[0] = A[0] * B[0] * N; }
