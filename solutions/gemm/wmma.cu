// Stage 5 -- tensor cores through the nvcuda::wmma API.
// C = A * B with A, B row-major N x N in FP16, accumulation and C in FP32.
//
// A warp-level wmma::mma_sync multiplies 16x16x16 fragments on the tensor
// cores, an order of magnitude more arithmetic per cycle than FFMA. A kernel
// that feeds the fragments straight from global memory therefore starves
// the tensor cores: each fragment element is fetched from L2 again for every
// product it takes part in. This kernel removes the feeding bottlenecks:
//
// 1. Reuse through a large block tile. A block of 4 warps owns a
//    BM x BN = 128 x 128 tile of C; every warp owns a 64 x 64 sub-tile,
//    i.e. 4 x 4 accumulator fragments. Per 16-wide k step a warp loads
//    4 A fragments and 4 B fragments and issues 16 mma_sync: each loaded
//    fragment is used 4 times from registers, and each element staged in
//    shared memory is read by 2 warps. Global traffic per FLOP is
//    proportional to 1/BM + 1/BN: large tiles, little traffic. Two such
//    blocks fit on an SM (registers and 74 KiB of shared memory each), so
//    one block's barrier wait is covered by the other block's MMAs.
//    Measured on an H200 at N = 4096 (docs/measurements/2026-11-29-h200-
//    spine-and-kernels.md): 327 TFLOP/s; a 128 x 256 tile of 8 warps (one
//    block per SM) gave 271, and 4 warps of 64 x 32 instead of 64 x 64
//    (less fragment reuse) 285.
//
// 2. Global -> shared copies without registers (cp.async, 16 bytes). The
//    data goes from global memory into shared memory without passing
//    through registers, so no registers are held for in-flight tiles (the
//    128 accumulator registers per thread leave little room) and no warp
//    stalls on a load before it can store the data.
//
// 3. Latency hiding by multi-buffering (STAGES = 4 slots). Tiles k+1 ..
//    k+STAGES-1 are in flight while tile k is multiplied (3 slots measured
//    322 TFLOP/s, 4 and 5 slots 327: the copies are then fully hidden). One barrier per
//    k-step suffices: the slot refilled at step k was read at step k-1, and
//    every warp passed this step's barrier only after finishing step k-1.
//
// 4. Bank conflicts. A fragment load (an ldmatrix underneath) reads 16-byte
//    pieces of 8 consecutive tile rows at a time. With unpadded rows of 64
//    or 512 bytes those pieces fall in the same 4 banks (a 4- or 8-way
//    conflict). Each row is padded by 8 halves (16 bytes): the row stride
//    becomes an odd number of 16-byte bank groups (5 for A, 33 for B), so
//    8 consecutive rows land in 8 different groups, covering all 32 banks.
//    The padding keeps the row strides multiples of 16 bytes, as wmma and
//    cp.async require, and every fragment pointer 32-byte aligned.
//
// 5. Dynamic shared memory. STAGES x (A slot + B slot) exceeds the 48 KiB a
//    static __shared__ array may use; the launch array's last field asks
//    the grader for it (it raises the kernel's limit first).
//
// 6. Epilogue straight to global memory. store_matrix_sync writes each
//    16x16 FP32 accumulator fragment to C: no shared round trip and no
//    barrier at the end. (C is written once, so its cost is small next to
//    the N/BK k-steps.)
//
// Launch: block (NT, 1) with NT = 32 * (BM/WM) * (BN/WN) = 128,
// grid = (N / BN, N / BM), dynamic shared memory SMEM_BYTES.
// N is assumed to be a multiple of 256 (so of BM, BN and BK): no bounds
// checks.

#include <cuda_fp16.h>
#include <mma.h>

using namespace nvcuda;

#ifndef TUNE_BM
#define TUNE_BM 128
#endif
#ifndef TUNE_BN
#define TUNE_BN 128
#endif
#ifndef TUNE_BK
#define TUNE_BK 32
#endif
#ifndef TUNE_WM
#define TUNE_WM 64
#endif
#ifndef TUNE_WN
#define TUNE_WN 64
#endif
#ifndef TUNE_STAGES
#define TUNE_STAGES 4
#endif
#ifndef TUNE_MINB
#define TUNE_MINB 2
#endif

constexpr int BM = TUNE_BM;          // rows of C per block
constexpr int BN = TUNE_BN;          // columns of C per block
constexpr int BK = TUNE_BK;          // depth of one pipeline stage
constexpr int WM = TUNE_WM;          // rows of C per warp
constexpr int WN = TUNE_WN;          // columns of C per warp
constexpr int STAGES = TUNE_STAGES;  // shared-memory slots in the pipeline
constexpr int MINB = TUNE_MINB;      // blocks per SM that __launch_bounds__ asks for
constexpr int FRAG = 16;             // wmma fragment edge (m16n16k16)
constexpr int FM = WM / FRAG;        // accumulator fragments per warp, along M
constexpr int FN = WN / FRAG;        // ... along N
constexpr int WARPS_M = BM / WM;
constexpr int WARPS_N = BN / WN;
constexpr int NT = 32 * WARPS_M * WARPS_N;  // threads per block
constexpr int PAD = 8;                      // halves of padding per shared row (16 bytes)
constexpr int LDA = BK + PAD;               // shared row stride of the A tile (halves)
constexpr int LDB = BN + PAD;               // shared row stride of the B tile (halves)
constexpr int A_SLOT = BM * LDA;            // halves per A slot
constexpr int B_SLOT = BK * LDB;            // halves per B slot
constexpr int SLOT = A_SLOT + B_SLOT;       // halves per pipeline slot
constexpr int SMEM_BYTES = STAGES * SLOT * 2;
constexpr int CHUNK = 8;                    // halves per 16-byte cp.async
constexpr int A_CHUNKS = BM * BK / CHUNK;   // 16-byte copies per A tile
constexpr int B_CHUNKS = BK * BN / CHUNK;   // 16-byte copies per B tile

static_assert(BM % 16 == 0 && BN % 16 == 0 && BK % 16 == 0,
              "BM, BN and BK must be multiples of 16 for WMMA fragments");
static_assert(WM % 16 == 0 && WN % 16 == 0, "the warp tile must be a whole number of 16x16 fragments");
static_assert(BM % WM == 0 && BN % WN == 0, "the block tile must be a whole number of warp tiles");
static_assert(NT >= 32 && NT <= 1024, "threads per block must be between 32 and 1024");
static_assert(STAGES >= 2, "the pipeline needs at least two slots");
static_assert(A_CHUNKS % NT == 0 && B_CHUNKS % NT == 0,
              "each tile must split evenly into 16-byte copies over the threads");
static_assert((LDA * 2) % 16 == 0 && (LDB * 2) % 16 == 0,
              "shared row strides must be multiples of 16 bytes (wmma ldm, cp.async alignment)");
static_assert((16 * LDA * 2) % 32 == 0 && (16 * LDB * 2) % 32 == 0 && (A_SLOT * 2) % 32 == 0 && (SLOT * 2) % 32 == 0,
              "every fragment pointer must stay 32-byte aligned");
static_assert(SMEM_BYTES <= 227 * 1024, "the pipeline must fit in the 227 KiB of shared memory a block may use");
static_assert(MINB * (SMEM_BYTES + 1024) <= 228 * 1024, "MINB blocks must fit in an SM's 228 KiB of shared memory");
static_assert(256 % BM == 0 && 256 % BN == 0 && 256 % BK == 0, "tiles must divide 256 (N is a multiple of 256)");

// {blockDim.x, blockDim.y, BM (rows of C per block), BN (cols of C per block), dynamic smem bytes}
extern "C" __constant__ int mmWMMA_launch[5] = {NT, 1, BM, BN, SMEM_BYTES};

// 16-byte asynchronous copy global -> shared; .cg bypasses L1 (each tile
// is used once per block, so caching it in L1 only evicts other data).
__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* gmem_src)
{
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem_src) : "memory");
}

__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Wait until at most `Pending` of this thread's committed groups are still in flight.
template <int Pending>
__device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}

extern "C" __global__ void __launch_bounds__(NT, MINB)
mmWMMA(const half* __restrict__ A, const half* __restrict__ B, float* __restrict__ C, int N)
{
    extern __shared__ __align__(128) unsigned char smem_raw[];
    half* smem = reinterpret_cast<half*>(smem_raw);

    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int warpRow = (warp / WARPS_N) * WM;  // warp tile origin inside the block tile
    const int warpCol = (warp % WARPS_N) * WN;

    const half* Ablk = A + (size_t)blockIdx.y * BM * N;
    const half* Bblk = B + (size_t)blockIdx.x * BN;

    // Issue the copies of k-tile `kt` into slot `slot`. Consecutive threads
    // take consecutive 16-byte pieces of a row: coalesced global reads.
    auto load_tile = [&](int slot, int kt) {
        half* As = smem + slot * SLOT;
        half* Bs = As + A_SLOT;
        const int k0 = kt * BK;
#pragma unroll
        for (int i = 0; i < A_CHUNKS / NT; ++i) {
            const int c = tid + i * NT;
            const int r = c / (BK / CHUNK);
            const int col = (c % (BK / CHUNK)) * CHUNK;
            cp_async_16(As + r * LDA + col, Ablk + (size_t)r * N + k0 + col);
        }
#pragma unroll
        for (int i = 0; i < B_CHUNKS / NT; ++i) {
            const int c = tid + i * NT;
            const int r = c / (BN / CHUNK);
            const int col = (c % (BN / CHUNK)) * CHUNK;
            cp_async_16(Bs + r * LDB + col, Bblk + (size_t)(k0 + r) * N + col);
        }
    };

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FM][FN];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    const int KT = N / BK;

    // Prologue: put the first STAGES-1 tiles in flight. Every step commits
    // exactly one group (possibly empty), so "group g" is always k-tile g.
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < KT) load_tile(s, s);
        cp_async_commit();
    }

    for (int kt = 0; kt < KT; ++kt) {
        // Tile kt is group kt; STAGES-1+kt groups are committed, so allowing
        // STAGES-2 pending means this thread's copies of tile kt are done.
        cp_async_wait<STAGES - 2>();
        // After the barrier every thread's copies of tile kt are visible,
        // and every warp has finished computing on tile kt-1, whose slot
        // the next line refills.
        __syncthreads();

        const int pf = kt + STAGES - 1;
        if (pf < KT) load_tile(pf % STAGES, pf);
        cp_async_commit();

        const half* As = smem + (kt % STAGES) * SLOT;
        const half* Bs = As + A_SLOT;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a[FM];
#pragma unroll
            for (int i = 0; i < FM; ++i)
                wmma::load_matrix_sync(a[i], As + (warpRow + i * 16) * LDA + kk, LDA);
#pragma unroll
            for (int j = 0; j < FN; ++j) {
                // One B fragment at a time: it is used FM times and then
                // dropped, which keeps register use below the 255 limit.
                wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> b;
                wmma::load_matrix_sync(b, Bs + kk * LDB + warpCol + j * 16, LDB);
#pragma unroll
                for (int i = 0; i < FM; ++i) wmma::mma_sync(acc[i][j], a[i], b, acc[i][j]);
            }
        }
    }
    cp_async_wait<0>();  // nothing is left in flight (only empty groups remain)

    float* Cblk = C + ((size_t)blockIdx.y * BM + warpRow) * N + (size_t)blockIdx.x * BN + warpCol;
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j)
            wmma::store_matrix_sync(Cblk + (size_t)(i * 16) * N + j * 16, acc[i][j], N, wmma::mem_row_major);
}
