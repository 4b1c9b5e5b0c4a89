// Broken submission (compile_error): a missing semicolon; the grader must fail stage "tiled" as a compile error and show nvcc's message (no run, no timing).
constexpr int TILE = 32;

extern "C" __constant__ int mmTiled_launch[5] = {TILE, TILE, TILE, TILE, 0};

extern "C" __global__ void mmTiled(const float* A, const float* B, float* C, int N)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty;
    const int col = blockIdx.x * TILE + tx;
    float acc = 0.0f
    for (int t = 0; t < N; t += TILE) {
        As[ty][tx] = A[row * N + t + tx];
        Bs[ty][tx] = B[(t + ty) * N + col];
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    C[row * N + col] = acc;
}
