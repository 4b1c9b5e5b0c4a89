// Shifted-submission stand-in for the Hopper stage (copied by grader/instructor/shifted.py).
// Stage 5's WMMA reference algorithm, ported to stage 6's contract: BF16 operands, both K-major
// (A row-major, B given transposed), the tensor maps accepted but unused, every tile copied with
// cp.async and multiplied with wmma::mma_sync (HMMA). No WGMMA and no TMA: the Hopper stage's
// criteria must reject it, while it stays correct under the BF16 tolerance.
//
// Same choices as solutions/gemm/wmma.cu: a 128 x 128 tile per block of 4 warps (64 x 64 each,
// 4 x 4 fragments), BK = 32, a 4-slot cp.async ring, rows padded by 16 bytes. The only change
// is B's layout: B^T rows are K-contiguous, so B tiles are staged like A tiles (BN rows of BK)
// and read as col_major fragments.
#include <cuda_bf16.h>
#include <mma.h>

using namespace nvcuda;

constexpr int BM = 128, BN = 128, BK = 32, WM = 64, WN = 64, STAGES = 4;
constexpr int FM = WM / 16, FN = WN / 16, WARPS_N = BN / WN;
constexpr int NT = 32 * (BM / WM) * (BN / WN);  // 128 threads
constexpr int LDK = BK + 8;                     // padded row (elements) of both tiles
constexpr int A_SLOT = BM * LDK, B_SLOT = BN * LDK, SLOT = A_SLOT + B_SLOT;
constexpr int SMEM_BYTES = STAGES * SLOT * 2;
constexpr int CHUNK = 8;  // BF16 per 16-byte copy
static_assert((BM * BK / CHUNK) % NT == 0 && (BN * BK / CHUNK) % NT == 0, "copies split evenly");
static_assert(SMEM_BYTES <= 227 * 1024, "fits in shared memory");

extern "C" __constant__ int @KERNEL@_launch[5] = {NT, 1, BM, BN, SMEM_BYTES};
extern "C" __constant__ int @KERNEL@_tma[4] = {64, 128, 128, 128};  // declared, never used

struct alignas(64) TmaDescriptor {
    unsigned char opaque[128];
};

__device__ __forceinline__ void cp_async_16(void* dst, const void* src)
{
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
}

extern "C" __global__ void __launch_bounds__(NT, 2)
@KERNEL@(const __grid_constant__ TmaDescriptor tmA, const __grid_constant__ TmaDescriptor tmB,
         const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ Bt, float* __restrict__ C, int N)
{
    extern __shared__ __align__(128) unsigned char smem_raw[];
    __nv_bfloat16* smem = reinterpret_cast<__nv_bfloat16*>(smem_raw);
    const int tid = threadIdx.x, warp = tid / 32;
    const int warpRow = (warp / WARPS_N) * WM, warpCol = (warp % WARPS_N) * WN;
    const __nv_bfloat16* Ablk = A + (size_t)blockIdx.y * BM * N;
    const __nv_bfloat16* Bblk = Bt + (size_t)blockIdx.x * BN * N;

    auto load_tile = [&](int slot, int kt) {
        __nv_bfloat16* As = smem + slot * SLOT;
        __nv_bfloat16* Bs = As + A_SLOT;
        const int k0 = kt * BK;
#pragma unroll
        for (int i = 0; i < BM * BK / CHUNK / NT; ++i) {
            const int c = tid + i * NT, r = c / (BK / CHUNK), col = (c % (BK / CHUNK)) * CHUNK;
            cp_async_16(As + r * LDK + col, Ablk + (size_t)r * N + k0 + col);
        }
#pragma unroll
        for (int i = 0; i < BN * BK / CHUNK / NT; ++i) {
            const int c = tid + i * NT, r = c / (BK / CHUNK), col = (c % (BK / CHUNK)) * CHUNK;
            cp_async_16(Bs + r * LDK + col, Bblk + (size_t)r * N + k0 + col);
        }
    };

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FM][FN];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    const int KT = N / BK;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < KT) load_tile(s, s);
        asm volatile("cp.async.commit_group;\n" ::: "memory");
    }
    for (int kt = 0; kt < KT; ++kt) {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 2) : "memory");
        __syncthreads();
        const int pf = kt + STAGES - 1;
        if (pf < KT) load_tile(pf % STAGES, pf);
        asm volatile("cp.async.commit_group;\n" ::: "memory");
        const __nv_bfloat16* As = smem + (kt % STAGES) * SLOT;
        const __nv_bfloat16* Bs = As + A_SLOT;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a[FM];
#pragma unroll
            for (int i = 0; i < FM; ++i) wmma::load_matrix_sync(a[i], As + (warpRow + i * 16) * LDK + kk, LDK);
#pragma unroll
            for (int j = 0; j < FN; ++j) {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;
                wmma::load_matrix_sync(b, Bs + (warpCol + j * 16) * LDK + kk, LDK);
#pragma unroll
                for (int i = 0; i < FM; ++i) wmma::mma_sync(acc[i][j], a[i], b, acc[i][j]);
            }
        }
    }
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    float* Cblk = C + ((size_t)blockIdx.y * BM + warpRow) * N + (size_t)blockIdx.x * BN + warpCol;
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j)
            wmma::store_matrix_sync(Cblk + (size_t)(i * 16) * N + j * 16, acc[i][j], N, wmma::mem_row_major);
}
