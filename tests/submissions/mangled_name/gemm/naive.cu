// Broken submission (mangled_name): the kernel is not declared extern "C", so its name is C++-mangled; the
// grader must fail stage "naive" and hint at extern "C".
constexpr int TILE = 32;
extern "C" __constant__ int mmNaive_launch[5] = {TILE, TILE, TILE, TILE, 0};
__global__ void mmNaive(const float* A, const float* B, float* C, int N) { C[0] = A[0] * B[0] * N; }
