// Broken submission (bad_launch_array): asks for 2048 x 1 threads per block (the limit is 1024); the grader
// must fail stage "naive" before running it, naming the launch array.
constexpr int TILE = 32;
extern "C" __constant__ int mmNaive_launch[5] = {2048, 1, TILE, TILE, 0};
extern "C" __global__ void mmNaive(const float* A, const float* B, float* C, int N) { C[0] = A[0] * B[0] * N; }
