// Broken submission (wrong_name): the kernel is called mmCoalesce, not mmCoalesced; the grader must fail stage "coalesced" with "kernel mmCoalesced not found" (naming the entry it did find) before running anything.
constexpr int TILE = 32;

extern "C" __constant__ int mmCoalesce_launch[5] = {TILE, TILE, TILE, TILE, 0};

extern "C" __global__ void mmCoalesce(const float* A, const float* B, float* C, int N)
{
    const int row = blockIdx.y * TILE + threadIdx.y;
    const int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int k = 0; k < N; ++k) acc += A[row * N + k] * B[k * N + col];
    C[row * N + col] = acc;
}
