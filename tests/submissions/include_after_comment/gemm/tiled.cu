// Hostile submission (include_after_comment): a comment before the '#' still makes a directive
// (comments become spaces before directives are read), so a check that wants '#' first on the line misses it.
// The grader must refuse the #include; the secret file's lines must appear nowhere in its outputs.
/**/#include "/tmp/gemm-grader-attack-secret.h"
constexpr int TILE = 32;
static_assert(TILE * TILE <= 1024, "a TILE x TILE block must not exceed 1024 threads");
static_assert(2 * TILE * TILE * sizeof(float) <= 48 * 1024, "static shared memory is limited to 48 KiB");

// {blockDim.x, blockDim.y, BM (rows of C per block), BN (cols of C per block), dynamic smem bytes}
extern "C" __constant__ int mmTiled_launch[5] = {TILE, TILE, TILE, TILE, 0};

extern "C" __global__ void mmTiled(const float* A, const float* B, float* C, int N)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];

    const int tx = threadIdx.x;  // column inside the tile (coalesced direction)
    const int ty = threadIdx.y;  // row inside the tile
    const int row = blockIdx.y * TILE + ty;
    const int col = blockIdx.x * TILE + tx;

    float acc = 0.0f;
    for (int t = 0; t < N; t += TILE) {
        // Each thread copies one element of each tile; lanes of a warp read
        // consecutive addresses, so both loads are coalesced.
        As[ty][tx] = A[row * N + (t + tx)];
        Bs[ty][tx] = B[(t + ty) * N + col];
        // Barrier 1: the tiles must be complete before anyone reads them.
        __syncthreads();

        // As[ty][k] is one address per warp (broadcast); Bs[k][tx] is 32
        // consecutive words (one per bank): no bank conflicts.
        for (int k = 0; k < TILE; ++k)
            acc += As[ty][k] * Bs[k][tx];
        // Barrier 2: nobody may overwrite the tiles for the next step while
        // a slower warp is still reading them.
        __syncthreads();
    }
    C[row * N + col] = acc;
}
