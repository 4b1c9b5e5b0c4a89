// Stage 6 (textbook, bonus) -- a first TMA + WGMMA kernel, without a pipeline.
// C = A * B with A (N x N) and Bt = B^T (N x N) row-major BF16, i.e. both operands
// K-major, FP32 accumulation, C row-major N x N float.
//
// One warpgroup (4 warps, 128 threads) per BM x BN tile of C, and ONE shared
// buffer per operand. For every k-tile of BK elements:
//   1. thread 0 tells the mbarrier how many bytes to expect and asks the
//      tensor memory accelerator (TMA) for the BM x BK tile of A and the
//      BN x BK tile of Bt (cp.async.bulk.tensor); the copy engine writes them
//      in the 128-byte swizzled layout and counts the bytes on the mbarrier;
//   2. every thread waits on the mbarrier until the bytes have landed;
//   3. the warpgroup issues BK / 16 wgmma.mma_async m64nBNk16 products that
//      read both tiles straight from shared memory through descriptors, and
//      waits for them to finish;
//   4. a barrier, so that no warp is still reading when thread 0 starts the
//      next copies into the same buffers.
// Copies and products never overlap: that is what the next refinement (a ring
// of several buffers, with producer and consumer warps) adds.
//
// The grader builds tmA and tmB from mmHopper_tma: boxes of BK x BM elements
// of A and BK x BN elements of Bt at coordinates {k, row}, 128-byte swizzle.
//
// Launch: block (128, 1), grid (N / BN, N / BM), SMEM_BYTES of dynamic shared
// memory. N is a multiple of 256 in grading, so the tiles divide it: no bounds checks.

#include <cstdint>
#include <cuda.h>       // CUtensorMap
#include <cuda_bf16.h>

constexpr int THREADS = 128;       // one warpgroup
constexpr int BM = 64;             // rows of C per block: the M of one wgmma
constexpr int BN = 64;             // columns of C per block: the N of one wgmma
constexpr int BK = 64;             // k-depth of one tile: 64 BF16 = 128 bytes, one swizzle row
constexpr int WK = 16;             // k-depth of one wgmma (BF16)
constexpr int SWIZZLE = 128;       // bytes; the TMA boxes and the wgmma descriptors must agree
constexpr int ELEM = 2;            // bytes per BF16
constexpr int A_BYTES = BM * BK * ELEM;
constexpr int B_BYTES = BN * BK * ELEM;
constexpr int TILE_ALIGN = 1024;   // the 128-byte swizzle repeats every 8 rows = 1024 bytes
constexpr int SMEM_BYTES = TILE_ALIGN + A_BYTES + B_BYTES;  // slack to align the first tile
constexpr int ACC = BM * BN / THREADS;                      // FP32 accumulators per thread

static_assert(BM == 64, "one warpgroup's wgmma covers exactly 64 rows");
static_assert(BN % 8 == 0 && BN >= 8 && BN <= 256, "wgmma N is a multiple of 8, at most 256");
static_assert(BN == 64, "the wgmma below is written out for N = 64");
static_assert(BK * ELEM == SWIZZLE, "one tile row must be exactly one 128-byte swizzle row");
static_assert(BK % WK == 0, "a tile is a whole number of wgmma k-steps");
static_assert(A_BYTES % TILE_ALIGN == 0, "the B tile after the A tile must start on a 1024-byte boundary");
static_assert(SMEM_BYTES <= 227 * 1024, "a block may use at most 227 KiB of shared memory");
static_assert(256 % BM == 0 && 256 % BN == 0 && 256 % BK == 0, "tiles must divide 256 (N is a multiple of 256)");

// {blockDim.x, blockDim.y, BM (rows of C per block), BN (cols of C per block), dynamic smem bytes}
extern "C" __constant__ int mmHopper_launch[5] = {THREADS, 1, BM, BN, SMEM_BYTES};
// {box k-width (elements), A box rows, B box rows, swizzle bytes}
extern "C" __constant__ int mmHopper_tma[4] = {BK, BM, BN, SWIZZLE};

__device__ __forceinline__ uint32_t shared_address(const void* p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Wait until the mbarrier at `bar` has completed the phase of the given parity.
__device__ __forceinline__ void wait_phase(uint32_t bar, uint32_t parity)
{
    uint32_t ready = 0;
    while (!ready) {
        asm volatile(
            "{\n\t.reg .pred complete;\n\t"
            "mbarrier.try_wait.parity.shared::cta.b64 complete, [%1], %2;\n\t"
            "selp.u32 %0, 1, 0, complete;\n\t}"
            : "=r"(ready) : "r"(bar), "r"(parity) : "memory");
    }
}

// A wgmma shared-memory descriptor for a K-major tile in the 128-byte swizzle (PTX ISA, "matrix
// descriptor"): bits 0-13 start address / 16; bits 16-29 leading byte offset / 16 (not used by a
// K-major swizzled operand; 1 by convention); bits 32-45 stride byte offset / 16: 1024 bytes from
// one group of 8 rows to the next; bits 62-63 layout: 1 = 128-byte swizzle.
__device__ __forceinline__ uint64_t tile_descriptor(uint32_t address)
{
    const uint64_t start = (address & 0x3FFFF) >> 4;
    const uint64_t leading = 1;
    const uint64_t stride = 1024 >> 4;
    const uint64_t swizzle_128 = 1;
    return start | (leading << 16) | (stride << 32) | (swizzle_128 << 62);
}

// acc[64 x 64] += A[64 x 16] * B[16 x 64], both read from shared memory through descriptors,
// B given K-major (as Bt rows): no transpose of either operand (the two trailing 0s).
__device__ __forceinline__ void wgmma_m64n64k16(float (&acc)[ACC], uint64_t a_desc, uint64_t b_desc)
{
    asm volatile(
        "{\n\t.reg .pred accumulate;\n\t"
        "setp.ne.b32 accumulate, %34, 0;\n\t"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "%32, %33, accumulate, 1, 1, 0, 0;\n\t}"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3]), "+f"(acc[4]), "+f"(acc[5]), "+f"(acc[6]),
          "+f"(acc[7]), "+f"(acc[8]), "+f"(acc[9]), "+f"(acc[10]), "+f"(acc[11]), "+f"(acc[12]), "+f"(acc[13]),
          "+f"(acc[14]), "+f"(acc[15]), "+f"(acc[16]), "+f"(acc[17]), "+f"(acc[18]), "+f"(acc[19]), "+f"(acc[20]),
          "+f"(acc[21]), "+f"(acc[22]), "+f"(acc[23]), "+f"(acc[24]), "+f"(acc[25]), "+f"(acc[26]), "+f"(acc[27]),
          "+f"(acc[28]), "+f"(acc[29]), "+f"(acc[30]), "+f"(acc[31])
        : "l"(a_desc), "l"(b_desc), "r"(1)
        : "memory");
}

extern "C" __global__ void mmHopper(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
                                    const __nv_bfloat16* A, const __nv_bfloat16* Bt, float* C, int N)
{
    extern __shared__ unsigned char smem[];
    __shared__ uint64_t tiles_ready;  // the mbarrier: completes once per k-tile, when both copies landed

    // Swizzled tiles must start on a 1024-byte boundary; the launch asks for that much slack.
    const uint32_t a_tile = (shared_address(smem) + TILE_ALIGN - 1) & ~uint32_t(TILE_ALIGN - 1);
    const uint32_t b_tile = a_tile + A_BYTES;
    const uint32_t bar = shared_address(&tiles_ready);

    const int tid = threadIdx.x;
    const int m0 = blockIdx.y * BM;  // first row of C (and of A)
    const int n0 = blockIdx.x * BN;  // first column of C (and row of Bt)

    if (tid == 0) {
        // One arrival per phase: thread 0's arrive.expect_tx; the copies' bytes complete it.
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
        // Make the initialised barrier visible to the copy engine (the async proxy).
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    float acc[ACC];
    for (int i = 0; i < ACC; ++i) acc[i] = 0.0f;

    uint32_t parity = 0;  // the phase of the mbarrier this k-tile completes
    for (int k0 = 0; k0 < N; k0 += BK) {
        if (tid == 0) {
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                         ::"r"(bar), "r"(A_BYTES + B_BYTES) : "memory");
            asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                         " [%0], [%1, {%2, %3}], [%4];"
                         ::"r"(a_tile), "l"(&tmA), "r"(k0), "r"(m0), "r"(bar) : "memory");
            asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                         " [%0], [%1, {%2, %3}], [%4];"
                         ::"r"(b_tile), "l"(&tmB), "r"(k0), "r"(n0), "r"(bar) : "memory");
        }
        wait_phase(bar, parity);  // both tiles are in shared memory
        parity ^= 1;
        __syncwarp();  // lanes leave the wait loop at different times; wgmma needs the warp converged

        // Order the accumulators' register writes before the asynchronous products read them.
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
        for (int kk = 0; kk < BK; kk += WK) {
            // The next 16 k-elements are 32 bytes further along every (swizzled) 128-byte row.
            wgmma_m64n64k16(acc, tile_descriptor(a_tile + kk * ELEM), tile_descriptor(b_tile + kk * ELEM));
        }
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");  // the products are done with the tiles
        __syncthreads();  // every warp is done before thread 0 overwrites the tiles
    }

    // Accumulator layout of wgmma m64nNk16 with FP32 D (PTX ISA, "wgmma register fragments"):
    // warp w, lane l holds, for each group i of 8 columns, rows 16 w + l / 4 (acc[4i], acc[4i+1])
    // and 16 w + l / 4 + 8 (acc[4i+2], acc[4i+3]), at columns 8 i + 2 (l % 4) and the next one.
    const int warp = tid / 32, lane = tid % 32;
    const int row = m0 + 16 * warp + lane / 4;
    for (int i = 0; i < BN / 8; ++i) {
        const int col = n0 + 8 * i + 2 * (lane % 4);
        C[row * N + col] = acc[4 * i];
        C[row * N + col + 1] = acc[4 * i + 1];
        C[(row + 8) * N + col] = acc[4 * i + 2];
        C[(row + 8) * N + col + 1] = acc[4 * i + 3];
    }
}
