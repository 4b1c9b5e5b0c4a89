// Broken submission (wrong_index): A is indexed as A[k][row], so the kernel computes A^T * B; it runs cleanly but the grader must fail stage "coalesced" on correctness (wrong values, no NaN) and drop its timing.
constexpr int TILE = 32;

extern "C" __constant__ int mmCoalesced_launch[5] = {TILE, TILE, TILE, TILE, 0};

extern "C" __global__ void mmCoalesced(const float* A, const float* B, float* C, int N)
{
    const int row = blockIdx.y * TILE + threadIdx.y;
    const int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int k = 0; k < N; ++k) acc += A[k * N + row] * B[k * N + col];  // bug: row and k swapped in A
    C[row * N + col] = acc;
}
