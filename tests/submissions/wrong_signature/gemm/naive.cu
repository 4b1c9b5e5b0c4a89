// Broken submission (wrong_signature): mmNaive takes (const float*, float*, int) instead of the contract's
// (const float*, const float*, float*, int); the grader must fail stage "naive" at compile time, naming both.
constexpr int TILE = 32;
extern "C" __constant__ int mmNaive_launch[5] = {TILE, TILE, TILE, TILE, 0};
extern "C" __global__ void mmNaive(const float* A, float* C, int N)
{
    C[blockIdx.x] = A[blockIdx.x] * N;
}
