// Broken submission (race_missing_sync): the barrier after the inner product is missing, so fast warps overwrite tiles others still read; numbers may pass by luck, and the grader must fail stage "tiled" through the race checker (shared-memory hazard), not only through the numbers.
constexpr int TILE = 32;

extern "C" __constant__ int mmTiled_launch[5] = {TILE, TILE, TILE, TILE, 0};

extern "C" __global__ void mmTiled(const float* A, const float* B, float* C, int N)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty;
    const int col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int t = 0; t < N; t += TILE) {
        As[ty][tx] = A[row * N + t + tx];
        Bs[ty][tx] = B[(t + ty) * N + col];
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];
        // bug: no __syncthreads() here before the next iteration overwrites As/Bs
    }
    C[row * N + col] = acc;
}
