// Stage 5 -- tensor cores with the nvcuda::wmma API.
//
// Bottleneck of stage 4b: the FP32 units themselves; there is no faster
// FFMA. Task: compute C = A * B with FP16 inputs and FP32 accumulation on
// the tensor cores. A warp loads 16 x 16 fragments of A and B
// (wmma::load_matrix_sync), multiplies them (wmma::mma_sync) into a 16 x 16
// FP32 accumulator fragment, and stores it (wmma::store_matrix_sync).
// Results are compared with a relative tolerance of 2e-2 (FP16 inputs).
// A first version may load fragments straight from global memory; the
// speed comes from staging tiles in shared memory and reusing them.
//
// Contract (the grader checks all of it):
//   * keep the exact signature below (extern "C", name mmWMMA);
//   * A and B are row-major N x N half, C is row-major N x N float;
//     C = A * B, no alpha/beta;
//   * N is always a multiple of 256, so tiles that divide 256 need no
//     bounds checks;
//   * launch shape: mmWMMA_launch = {blockDim.x, blockDim.y, BM, BN,
//     dynamic smem bytes}; grid = (N / BN, N / BM); each block computes a
//     BM x BN tile of C. The default below is 4 warps (128 threads) per
//     64 x 64 tile: for example a 2 x 2 arrangement of warps, each owning a
//     32 x 32 sub-tile (2 x 2 fragments). More than 48 KiB of dynamic shared
//     memory is allowed: the grader raises the limit to the value you put in
//     the last field.

#include <cuda_fp16.h>
#include <mma.h>

using namespace nvcuda;

constexpr int BM = 64;
constexpr int BN = 64;
constexpr int THREADS = 128;  // 4 warps
static_assert(BM % 16 == 0 && BN % 16 == 0, "BM and BN must be multiples of 16 for WMMA fragments");

// {blockDim.x, blockDim.y, BM (rows of C per block), BN (cols of C per block), dynamic smem bytes}
extern "C" __constant__ int mmWMMA_launch[5] = {THREADS, 1, BM, BN, 0};

extern "C" __global__ void mmWMMA(const half* A, const half* B, float* C, int N)
{
    // TODO: declare wmma::fragment objects (matrix_a, matrix_b: half,
    // row_major; accumulator: float), fill the accumulators with zero,
    // loop over k in steps of 16 (load, mma_sync), then store to C.
}
