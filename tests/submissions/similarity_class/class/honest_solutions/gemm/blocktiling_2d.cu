// Stage 4b -- 2D register blocktiling, C = A * B (row-major N x N, fp32).
//
// FP32 CUDA cores only: every multiply-add is an FFMA, no tensor-core
// instruction and no TF32.
//
// The idea of the stage: each thread computes an 8 x 8 tile of C. For every
// k it loads 8 values of A and 8 values of B from shared memory into
// registers and performs 8 * 8 = 64 FFMAs with them (an outer product), so a
// value loaded from shared memory is reused 8 times in both directions.
// Around that idea, this kernel removes the remaining bottlenecks one by one:
//
// 1. Shared-memory instructions. A is stored transposed (As[k][m]) so that
//    the 8 A values a thread needs for one k are contiguous, like its 8 B
//    values in Bs[k][n]. Both are then read as float4: 4 shared load
//    instructions per 64 FFMAs instead of 16.
//
// 2. Bank conflicts of those float4 reads (warp tiling). A 128-bit shared
//    load is served a quarter warp (8 lanes) at a time; it is conflict-free
//    when those 8 lanes read either one address (broadcast) or 8 distinct
//    16-byte words that fill the 32 banks. If a thread's 8 columns were
//    contiguous, lanes would read addresses 32 bytes apart: two lanes per
//    bank group, a 2-way conflict. So each thread's 8 x 8 is split into
//    2 x 2 sub-tiles of 4 x 4 that lie half a warp tile apart. Lanes
//    0..7 of a quarter warp own neighbouring 4-wide column groups (8 float4
//    = 128 contiguous bytes of Bs) and share the same rows (one broadcast
//    float4 of As). The 32 lanes of a warp form a LANES_M x LANES_N grid
//    covering a (8 * LANES_M) x (8 * LANES_N) warp tile.
//
// 3. Global-load instructions and their latency. Tiles are fetched with
//    128-bit loads (a quarter of the instructions). The loads for the NEXT
//    k-step are issued into registers before the FFMAs of the current one,
//    so their global-memory latency is hidden behind 512 FFMAs per thread
//    instead of stalling the block at a barrier.
//
// 4. Barriers. Two shared buffers alternate: the block computes from one
//    while it stores the prefetched tile into the other. A buffer is
//    rewritten only after the barrier that ends the k-step which read it,
//    so ONE __syncthreads per k-step is enough (the textbook scheme needs
//    two: one before reading, one before overwriting).
//
// 5. Conflicts of the transposing stores. Each As row is padded by 4 floats
//    (16 banks' shift between consecutive k), and lanes pair up on the two
//    float4 of one 32-byte sector of A: the 32 scalar stores of a warp land
//    in 32 distinct banks. The padding is a multiple of 4, so rows stay
//    16-byte aligned for the float4 reads.
//
// 6. Registers. 64 accumulators + 2 x 16 fragment registers (the fragments
//    of step k+1 are loaded while step k computes) + the prefetched tile
//    need roughly 120-130 registers. __launch_bounds__(NT, MINB) with MINB = 2
//    caps them at 128 so that two blocks (16 warps) fit on an SM without
//    spilling: the 64 independent FFMAs per k give each warp enough
//    instruction-level parallelism that 16 warps keep the FMA pipes busy,
//    and the second block runs its global loads and barrier while the
//    other computes. Measured on an H200 at N = 4096 (docs/measurements/scripts/tune_kernels.py,
//    docs/measurements/2026-11-29-h200-spine-and-kernels.md): 93.9% of
//    cuBLAS SGEMM with the cap, 67.2% without it (130 registers, 1 block/SM).
//
// 7. Tile shape. BM = BN = 128 gives each element loaded from global memory
//    128 uses, keeping L2 traffic well below what the FMA rate needs, and a
//    grid of (N/128)^2 blocks that fills 132 SMs many times over at
//    N = 4096. BK = 8 keeps the prefetch to 2 float4 per thread (a larger BK
//    means more registers and fewer resident blocks: BK = 16 needed 155
//    registers, 1 block/SM, and measured 64.4% of cuBLAS). Smaller tiles
//    with more resident blocks lose reuse: 64 x 128 gave 85.7%, 128 x 64
//    74.6%.
//
// Launch: block (NT, 1) with NT = BM * BN / 64, a BM x BN tile of C per
// block, grid = (N / BN, N / BM). N is assumed to be a multiple of 256 (so of
// BM, BN and BK): no bounds checks.

#ifndef TUNE_BM
#define TUNE_BM 128
#endif
#ifndef TUNE_BN
#define TUNE_BN 128
#endif
#ifndef TUNE_BK
#define TUNE_BK 8
#endif
#ifndef TUNE_LANES_M
#define TUNE_LANES_M 4
#endif
#ifndef TUNE_MINB
#define TUNE_MINB 2
#endif

constexpr int BM = TUNE_BM;  // rows of C per block
constexpr int BN = TUNE_BN;  // columns of C per block
constexpr int BK = TUNE_BK;  // depth of one k-step
constexpr int TM = 8;        // rows of C per thread (two groups of 4)
constexpr int TN = 8;        // columns of C per thread (two groups of 4)
constexpr int LANES_M = TUNE_LANES_M;   // lanes of a warp along M
constexpr int LANES_N = 32 / LANES_M;   // lanes of a warp along N
constexpr int WM = LANES_M * TM;        // warp tile rows
constexpr int WN = LANES_N * TN;        // warp tile columns
constexpr int WARPS_M = BM / WM;
constexpr int WARPS_N = BN / WN;
constexpr int NT = 32 * WARPS_M * WARPS_N;  // threads per block
constexpr int MINB = TUNE_MINB;             // blocks per SM that __launch_bounds__ asks for
constexpr int A_PAD = 4;                    // floats of padding per As row (see 5.)
constexpr int A_F4 = BM * BK / 4;            // float4 in one A tile
constexpr int B_F4 = BK * BN / 4;            // float4 in one B tile
constexpr int A_LOADS = (A_F4 + NT - 1) / NT;  // float4 of A each thread fetches per k-step
constexpr int B_LOADS = (B_F4 + NT - 1) / NT;  // float4 of B each thread fetches per k-step

static_assert(LANES_M >= 2 && LANES_M <= 16 && 32 % LANES_M == 0,
              "LANES_M must be 2, 4, 8 or 16 (a warp is a LANES_M x LANES_N grid of lanes, both at least 2)");
static_assert(BM % WM == 0 && BN % WN == 0, "BM and BN must be multiples of the warp tile (8*LANES_M x 8*LANES_N)");
static_assert(NT == BM * BN / (TM * TN), "one thread per 8 x 8 tile of C");
static_assert(NT >= 32 && NT <= 1024, "threads per block must be between 32 and 1024");
static_assert(BK % 8 == 0, "BK must be a multiple of 8 (A is loaded as pairs of float4 along k)");
static_assert(A_F4 % NT == 0 || NT % A_F4 == 0, "the A tile (BM x BK) must split evenly into float4 loads over the threads");
static_assert(B_F4 % NT == 0 || NT % B_F4 == 0, "the B tile (BK x BN) must split evenly into float4 loads over the threads");
static_assert(BM % 32 == 0, "BM must be a multiple of 32 for the conflict-free transposing store");
static_assert(2 * (BK * (BM + A_PAD) + BK * BN) * sizeof(float) <= 48 * 1024,
              "two static shared buffers must fit in 48 KiB");
static_assert(256 % BM == 0 && 256 % BN == 0 && 256 % BK == 0, "tiles must divide 256 (N is a multiple of 256)");

// {blockDim.x, blockDim.y, BM (rows of C per block), BN (cols of C per block), dynamic smem bytes}
extern "C" __constant__ int mm2DBlocktiling_launch[5] = {NT, 1, BM, BN, 0};

extern "C" __global__ void __launch_bounds__(NT, MINB)
mm2DBlocktiling(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int N)
{
    __shared__ __align__(16) float As[2][BK][BM + A_PAD];  // transposed A tiles: As[buf][k][m]
    __shared__ __align__(16) float Bs[2][BK][BN];          // B tiles: Bs[buf][k][n]

    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int lane = tid % 32;
    // Row/column of the thread's first 4 x 4 sub-tile inside the block tile;
    // the other sub-tiles start WM/2 rows and/or WN/2 columns further.
    const int rowT = (warp / WARPS_N) * WM + (lane / LANES_N) * 4;
    const int colT = (warp % WARPS_N) * WN + (lane % LANES_N) * 4;

    const float* Ablk = A + (size_t)blockIdx.y * BM * N;
    const float* Bblk = B + (size_t)blockIdx.x * BN;

    // ---- global -> registers -> shared, for one BM x BK tile of A and BK x BN of B
    float4 pa[A_LOADS], pb[B_LOADS];

    auto load_global = [&](int k0) {
#pragma unroll
        for (int i = 0; i < A_LOADS; ++i) {
            if (A_F4 % NT != 0 && tid >= A_F4) break;  // tile smaller than the block
            // float4 number idx holds row r, columns 4q..4q+3 of the A tile;
            // lanes 2j and 2j+1 read the two halves of one 32-byte sector.
            const int idx = tid + i * NT;
            const int r = (idx >> 1) % BM;
            const int q = (idx & 1) + 2 * (idx / (2 * BM));
            pa[i] = __ldg(reinterpret_cast<const float4*>(Ablk + (size_t)r * N + k0 + 4 * q));
        }
#pragma unroll
        for (int i = 0; i < B_LOADS; ++i) {
            if (B_F4 % NT != 0 && tid >= B_F4) break;
            const int idx = tid + i * NT;
            const int kk = idx / (BN / 4);
            const int c4 = idx % (BN / 4);
            pb[i] = __ldg(reinterpret_cast<const float4*>(Bblk + (size_t)(k0 + kk) * N + 4 * c4));
        }
    };

    auto store_shared = [&](int buf) {
#pragma unroll
        for (int i = 0; i < A_LOADS; ++i) {
            if (A_F4 % NT != 0 && tid >= A_F4) break;
            const int idx = tid + i * NT;
            const int r = (idx >> 1) % BM;
            const int q = (idx & 1) + 2 * (idx / (2 * BM));
            As[buf][4 * q + 0][r] = pa[i].x;
            As[buf][4 * q + 1][r] = pa[i].y;
            As[buf][4 * q + 2][r] = pa[i].z;
            As[buf][4 * q + 3][r] = pa[i].w;
        }
#pragma unroll
        for (int i = 0; i < B_LOADS; ++i) {
            if (B_F4 % NT != 0 && tid >= B_F4) break;
            const int idx = tid + i * NT;
            const int kk = idx / (BN / 4);
            const int c4 = idx % (BN / 4);
            *reinterpret_cast<float4*>(&Bs[buf][kk][4 * c4]) = pb[i];
        }
    };

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    load_global(0);
    store_shared(0);
    __syncthreads();

    int buf = 0;
    for (int k0 = 0; k0 < N; k0 += BK) {
        const bool more = k0 + BK < N;
        // Issue the next tile's global loads now; they are consumed only
        // after this k-step's FFMAs, which hide their latency.
        if (more) load_global(k0 + BK);

        // Fragments of A (rows) and B (columns) for one k, double-buffered
        // in registers: step k+1's shared loads are issued before step k's
        // FFMAs, so their latency overlaps arithmetic.
        float4 fa[2][2], fb[2][2];
        const float* as = &As[buf][0][0];
        const float* bs = &Bs[buf][0][0];
        fa[0][0] = *reinterpret_cast<const float4*>(as + rowT);
        fa[0][1] = *reinterpret_cast<const float4*>(as + rowT + WM / 2);
        fb[0][0] = *reinterpret_cast<const float4*>(bs + colT);
        fb[0][1] = *reinterpret_cast<const float4*>(bs + colT + WN / 2);

#pragma unroll
        for (int k = 0; k < BK; ++k) {
            const int cur = k & 1;
            if (k + 1 < BK) {
                const int nxt = cur ^ 1;
                const float* an = as + (k + 1) * (BM + A_PAD);
                const float* bn = bs + (k + 1) * BN;
                fa[nxt][0] = *reinterpret_cast<const float4*>(an + rowT);
                fa[nxt][1] = *reinterpret_cast<const float4*>(an + rowT + WM / 2);
                fb[nxt][0] = *reinterpret_cast<const float4*>(bn + colT);
                fb[nxt][1] = *reinterpret_cast<const float4*>(bn + colT + WN / 2);
            }
            const float a[TM] = {fa[cur][0].x, fa[cur][0].y, fa[cur][0].z, fa[cur][0].w,
                                 fa[cur][1].x, fa[cur][1].y, fa[cur][1].z, fa[cur][1].w};
            const float b[TN] = {fb[cur][0].x, fb[cur][0].y, fb[cur][0].z, fb[cur][0].w,
                                 fb[cur][1].x, fb[cur][1].y, fb[cur][1].z, fb[cur][1].w};
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }

        // The other buffer was last read in the previous k-step, which ended
        // with a barrier: it is free to overwrite.
        if (more) store_shared(buf ^ 1);
        // One barrier: the new tile is visible to all, and no thread starts
        // overwriting the buffer just read before everyone has finished it.
        __syncthreads();
        buf ^= 1;
    }

    // Epilogue: each 4-wide row segment is one 128-bit store; the 8 lanes of
    // a quarter warp write 128 contiguous bytes.
    float* Cblk = C + (size_t)blockIdx.y * BM * N + (size_t)blockIdx.x * BN;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int r = rowT + (i / 4) * (WM / 2) + (i % 4);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int c = colT + h * (WN / 2);
            *reinterpret_cast<float4*>(Cblk + (size_t)r * N + c) =
                make_float4(acc[i][4 * h + 0], acc[i][4 * h + 1], acc[i][4 * h + 2], acc[i][4 * h + 3]);
        }
    }
}
