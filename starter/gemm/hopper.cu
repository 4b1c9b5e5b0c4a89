// Stage 6 (bonus, Hopper GPUs only) -- TMA + WGMMA.
//
// Bottleneck of stage 5: mma_sync is a warp-level instruction fed from registers; every fragment
// goes shared -> registers (ldmatrix) before the tensor cores see it, and the copies into shared
// memory cost the warps instructions too. Hopper (sm_90a) removes both: the tensor memory
// accelerator (TMA) copies whole tiles into shared memory on its own, and a warpgroup (4 warps)
// issues one asynchronous wgmma.mma_async whose operands come straight from shared memory.
//
// Contract (the grader checks all of it; this stage is graded only on an sm_90a GPU):
//   * keep the exact signature below (extern "C", name mmHopper);
//   * A is row-major N x N BF16, and B is given TRANSPOSED: Bt row-major N x N, Bt[n][k] = B[k][n]
//     (both operands K-major, the layout wgmma reads without a transpose). C = A * B, row-major
//     N x N float; results are compared with a relative tolerance of 1e-2;
//   * tmA and tmB are TMA descriptors (CUtensorMap) the grader builds for you from mmHopper_tma:
//     tmA copies a box of {box k-width} x {A box rows} elements of A at coordinates (k, row), tmB a
//     box of {box k-width} x {B box rows} of Bt, both with the swizzle you declare (0, 32, 64 or
//     128 bytes; with a swizzle the box's k-width in bytes may be at most the swizzle). Use them
//     with cp.async.bulk.tensor.2d ... [&tmA, {k, row}] and an mbarrier. A, Bt are the same data
//     as plain pointers;
//   * N is always a multiple of 256; launch shape: mmHopper_launch = {blockDim.x, blockDim.y, BM,
//     BN, dynamic smem bytes}; grid = (N / BN, N / BM). More than 48 KiB of dynamic shared memory
//     is allowed: the grader raises the limit to the value you put in the last field.
//
// Suggested path: one warpgroup of producers (one thread issues the TMA copies), one or two of
// consumers (wgmma m64nNk16 on shared-memory descriptors), a ring of shared-memory slots with a
// "full" and an "empty" mbarrier per slot; setmaxnreg to give the consumers the registers.

#include <cuda_bf16.h>

constexpr int THREADS = 128;  // one warpgroup
constexpr int BM = 64;
constexpr int BN = 64;
constexpr int BK = 64;        // 64 BF16 = 128 bytes: one row of the 128-byte swizzle
static_assert(BK * 2 <= 128, "with a 128-byte swizzle the box's k-width is at most 128 bytes");

// {blockDim.x, blockDim.y, BM (rows of C per block), BN (cols of C per block), dynamic smem bytes}
extern "C" __constant__ int mmHopper_launch[5] = {THREADS, 1, BM, BN, 0};
// {box k-width (elements), A box rows, B box rows, swizzle bytes}
extern "C" __constant__ int mmHopper_tma[4] = {BK, BM, BN, 128};

// The grader's CUtensorMap, opaque to you: 128 bytes, 64-byte aligned (cuda.h's type has this layout).
struct alignas(64) TmaDescriptor {
    unsigned char opaque[128];
};

extern "C" __global__ void mmHopper(const __grid_constant__ TmaDescriptor tmA,
                                    const __grid_constant__ TmaDescriptor tmB,
                                    const __nv_bfloat16* A, const __nv_bfloat16* Bt, float* C, int N)
{
    // TODO: initialise the mbarriers, load tiles with TMA, multiply them with wgmma, store C.
}
