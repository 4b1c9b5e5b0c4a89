// Broken submission (zero_output): writes 0 everywhere; the grader must fail stage "naive" on correctness (wrong values, not NaN).
constexpr int TILE = 32;
extern "C" __constant__ int mmNaive_launch[5] = {TILE, TILE, TILE, TILE, 0};
extern "C" __global__ void mmNaive(const float* A, const float* B, float* C, int N)
{
    const int row = blockIdx.y * TILE + threadIdx.x;
    const int col = blockIdx.x * TILE + threadIdx.y;
    C[row * N + col] = 0.0f * A[0] * B[0];
}
