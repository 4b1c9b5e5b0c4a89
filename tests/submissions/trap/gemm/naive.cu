// Broken submission (trap): the kernel executes __trap() in one thread; the grader must fail stage "naive" ("the kernel failed") and still grade the rest.
constexpr int TILE = 32;
extern "C" __constant__ int mmNaive_launch[5] = {TILE, TILE, TILE, TILE, 0};
extern "C" __global__ void mmNaive(const float* A, const float* B, float* C, int N)
{
    const int row = blockIdx.y * TILE + threadIdx.x;
    const int col = blockIdx.x * TILE + threadIdx.y;
    float acc = 0.0f;
    for (int k = 0; k < N; ++k) acc += A[row * N + k] * B[k * N + col];
    if (row == N - 1 && col == N - 1) __trap();
    C[row * N + col] = acc;
}
