// Stage 2 -- coalesced global memory access.
//
// Bottleneck of stage 1: the 32 threads of a warp read addresses that are N
// floats apart, so every load instruction touches 32 different 32-byte
// sectors and uses 4 bytes of each. Task: same computation, but map
// threadIdx.x to the COLUMN of C so that the lanes of a warp read and write
// consecutive addresses (one 128-byte segment per warp).
//
// Contract (the grader checks all of it):
//   * keep the exact signature below (extern "C", name mmCoalesced);
//   * C = A * B (row-major N x N fp32), no alpha/beta;
//   * N is always a multiple of 256, so no bounds checks are needed;
//   * launch shape: mmCoalesced_launch = {blockDim.x, blockDim.y, BM, BN,
//     dynamic smem bytes}; grid = (N / BN, N / BM); each block computes a
//     BM x BN tile of C.

constexpr int TILE = 32;

// {blockDim.x, blockDim.y, BM (rows of C per block), BN (cols of C per block), dynamic smem bytes}
extern "C" __constant__ int mmCoalesced_launch[5] = {TILE, TILE, TILE, TILE, 0};

extern "C" __global__ void mmCoalesced(const float* A, const float* B, float* C, int N)
{
    // TODO: as in stage 1, but threadIdx.x selects the column of C.
}
