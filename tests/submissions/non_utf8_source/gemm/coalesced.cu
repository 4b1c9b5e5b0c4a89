// Broken-input submission (non_utf8_source): this comment holds Latin-1 bytes (été, naïve); the stage must compile and grade normally.
// Stage 2 -- coalesced GEMM, C = A * B (row-major N x N, fp32).
//
// Same arithmetic as the naive kernel; the only change is the mapping of
// threads to elements of C: threadIdx.x now selects the COLUMN. Inside a warp
// the 32 lanes then
//   * read B[k][col .. col+31]: 32 consecutive floats, 128 bytes, the minimum
//     number of 32-byte sectors per request (coalesced);
//   * read the same A[row][k]: one address, broadcast to the whole warp;
//   * write C[row][col .. col+31]: one contiguous 128-byte store.
// Memory traffic per useful byte drops several-fold, but every operand is
// still fetched from global memory (L1/L2) once per multiply-add: the kernel
// remains bound by the memory system, which stage 3 attacks.
// Measured on an H200 (docs/measurements/): 21.8 ms at N = 4096, 12.6x the
// naive kernel; ncu at N = 2048: 2.5 sectors per global-load request (from
// 16.5) but still 537 million global-load requests, one per FFMA per warp.
//
// Launch: block (32, 32), 32 x 32 tile of C per block, grid = (N / 32, N / 32).
// N is assumed to be a multiple of 32 (the grader uses multiples of 256).

constexpr int TILE = 32;
static_assert(TILE == 32, "TILE must equal the warp size so that one warp covers one row segment of C");

// {blockDim.x, blockDim.y, BM (rows of C per block), BN (cols of C per block), dynamic smem bytes}
extern "C" __constant__ int mmCoalesced_launch[5] = {TILE, TILE, TILE, TILE, 0};

extern "C" __global__ void mmCoalesced(const float* A, const float* B, float* C, int N)
{
    // threadIdx.x -> column: consecutive lanes touch consecutive addresses.
    const int row = blockIdx.y * TILE + threadIdx.y;
    const int col = blockIdx.x * TILE + threadIdx.x;

    float acc = 0.0f;
    for (int k = 0; k < N; ++k)
        acc += A[row * N + k] * B[k * N + col];
    C[row * N + col] = acc;
}
