// Stage 3 (textbook) -- shared-memory tiling, C = A * B, row-major N x N fp32.
//
// In the coalesced kernel every operand of every multiply-add comes from the
// memory system. Here the block walks along k one TILE x TILE tile at a time:
// each thread copies one element of the A tile and one of the B tile into
// shared memory, the block waits, and every thread then does TILE
// multiply-adds from shared memory. Each element loaded from global memory is
// reused TILE times. Two barriers per tile: one so that nobody reads a tile
// before it is complete, one so that nobody overwrites it while a slower warp
// still reads it.
//
// Launch: block (TILE, TILE), one TILE x TILE tile of C per block,
// grid (N / TILE, N / TILE). N is a multiple of 256 in grading: no bounds checks.

constexpr int TILE = 32;  // edge of the shared tiles and of the block's tile of C
static_assert(TILE * TILE <= 1024, "a TILE x TILE block may have at most 1024 threads");
static_assert(2 * TILE * TILE * sizeof(float) <= 48 * 1024, "static shared memory is limited to 48 KiB");
static_assert(256 % TILE == 0, "TILE must divide 256 (N is a multiple of 256)");

// {blockDim.x, blockDim.y, BM (rows of C per block), BN (cols of C per block), dynamic smem bytes}
extern "C" __constant__ int mmTiled_launch[5] = {TILE, TILE, TILE, TILE, 0};

extern "C" __global__ void mmTiled(const float* A, const float* B, float* C, int N)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];

    const int tx = threadIdx.x;  // column inside the tile: the coalesced direction
    const int ty = threadIdx.y;  // row inside the tile
    const int row = blockIdx.y * TILE + ty;
    const int col = blockIdx.x * TILE + tx;

    float sum = 0.0f;
    for (int t = 0; t < N; t += TILE) {
        // One element of each tile per thread; a warp reads 32 consecutive floats of a row.
        As[ty][tx] = A[row * N + t + tx];
        Bs[ty][tx] = B[(t + ty) * N + col];
        __syncthreads();  // the tiles are complete before anyone reads them

        for (int k = 0; k < TILE; ++k)
            sum += As[ty][k] * Bs[k][tx];  // As[ty][k]: one word per warp (broadcast)
        __syncthreads();  // everyone is done reading before the next tile overwrites them
    }
    C[row * N + col] = sum;
}
