// Stage 4a -- 1D register blocktiling, C = A * B (row-major N x N, fp32).
//
// Bottleneck of the tiled kernel: every multiply-add needs two shared-memory
// loads (one of A, one of B), so the shared-memory pipe, not the FMA units,
// sets the pace. Here each thread computes TM outputs that lie in ONE column
// of C. For every k it loads one B value from shared memory into a register
// and reuses it TM times against TM values of A. The A values a thread needs
// for one k are TM consecutive floats of the transposed A tile, read as
// TM / 4 128-bit loads that are the same address for the whole warp
// (broadcast). Shared loads per FFMA fall from 2 to (1 + TM/4) / TM.
//
// What this stage may use on top of the idea itself, and why:
//   * 128-bit (float4) global loads: a quarter of the load instructions and
//     address computations for the same bytes.
//   * A stored transposed (As[k][m]): makes a thread's TM values of A
//     contiguous, so they come in as float4 broadcasts instead of TM scalar
//     loads.
//   * BK = 16 (instead of 8): twice the FFMAs between the two barriers of a
//     k-step, so the block spends a smaller fraction of its time waiting at
//     __syncthreads and for the global loads that precede it.
//   * TM = 16 on a 128 x 64 tile (512 threads): shared loads per FFMA drop
//     from 3/8 (TM = 8) to 5/16, and each thread has 16 independent
//     accumulators to keep the FMA pipe fed between loads. About 55
//     registers per thread still lets two blocks (32 warps) share an SM.
// Measured on an H200 at N = 4096 (docs/measurements/2026-11-29-h200-spine-
// and-kernels.md): 6.17 ms, 43.4% of cuBLAS SGEMM, 2.49x the tiled kernel;
// the handout's 64 x 64 x 8, TM = 8 shape with the same loads gave 36.0%.
// It stays a 1D kernel: each thread owns a single column strip of TM
// outputs, so every FFMA still costs (1 + TM/4) / TM shared loads; stage 4b
// reuses values along both axes.
//
// Launch: block (BM * BN / TM, 1), a BM x BN tile of C per block,
// grid = (N / BN, N / BM). N is assumed to be a multiple of 256 (so of BM, BN
// and BK): no bounds checks.

#ifndef TUNE_BM
#define TUNE_BM 128
#endif
#ifndef TUNE_BN
#define TUNE_BN 64
#endif
#ifndef TUNE_BK
#define TUNE_BK 16
#endif
#ifndef TUNE_TM
#define TUNE_TM 16
#endif

constexpr int BM = TUNE_BM;  // rows of C per block
constexpr int BN = TUNE_BN;  // columns of C per block
constexpr int BK = TUNE_BK;  // depth of one k-step (shared tile width)
constexpr int TM = TUNE_TM;  // outputs per thread, all in one column
constexpr int NT = BM * BN / TM;  // threads per block
// Row padding of the transposed A tile. With 4 extra floats per row, two
// consecutive k rows start 16 banks apart, so the 32 scalar stores a warp
// makes when transposing (16 rows x 2 k values) hit 32 distinct banks. A
// multiple of 4 keeps every row 16-byte aligned for the float4 reads.
constexpr int A_PAD = 4;

static_assert(BM * BN % TM == 0, "BM * BN must be a multiple of TM");
static_assert(BM % TM == 0, "BM must be a multiple of TM (each thread owns TM rows of one column)");
static_assert(TM % 4 == 0, "TM must be a multiple of 4 (A is read as float4)");
static_assert(BN % 32 == 0, "BN must be a multiple of 32 so that a warp shares one row group (broadcast A reads)");
static_assert(NT % 32 == 0 && NT <= 1024, "threads per block must be a whole number of warps, at most 1024");
static_assert(BK % 8 == 0, "BK must be a multiple of 8 (A is loaded as pairs of float4 along k)");
static_assert((BM * BK / 4) % NT == 0 || NT % (BM * BK / 4) == 0,
              "the A tile (BM x BK floats) must split evenly into float4 loads over the threads");
static_assert((BK * BN / 4) % NT == 0 || NT % (BK * BN / 4) == 0,
              "the B tile (BK x BN floats) must split evenly into float4 loads over the threads");
static_assert((BK * (BM + A_PAD) + BK * BN) * sizeof(float) <= 48 * 1024,
              "static shared memory is limited to 48 KiB");
static_assert(256 % BM == 0 && 256 % BN == 0 && 256 % BK == 0, "tiles must divide 256 (N is a multiple of 256)");

// {blockDim.x, blockDim.y, BM (rows of C per block), BN (cols of C per block), dynamic smem bytes}
extern "C" __constant__ int mm1DBlocktiling_launch[5] = {NT, 1, BM, BN, 0};

extern "C" __global__ void
mm1DBlocktiling(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int N)
{
    __shared__ __align__(16) float As[BK][BM + A_PAD];  // transposed: As[k][m]
    __shared__ __align__(16) float Bs[BK][BN];          // as in memory: Bs[k][n]

    const int tid = threadIdx.x;
    const int threadCol = tid % BN;         // output column inside the tile
    const int threadRow0 = (tid / BN) * TM;  // first of this thread's TM rows

    const float* Ablk = A + (size_t)blockIdx.y * BM * N;
    const float* Bblk = B + (size_t)blockIdx.x * BN;

    float acc[TM];
#pragma unroll
    for (int m = 0; m < TM; ++m) acc[m] = 0.0f;

    for (int k0 = 0; k0 < N; k0 += BK) {
        // A tile (BM x BK): float4 number idx covers row r, columns 4q..4q+3.
        // Two neighbouring lanes take the two float4 of one 32-byte sector
        // (q and q+1), the rest of the warp walks down the rows.
#pragma unroll
        for (int i = 0; i < (BM * BK / 4 + NT - 1) / NT; ++i) {
            const int idx = tid + i * NT;
            if ((BM * BK / 4) % NT != 0 && idx >= BM * BK / 4) break;
            const int r = (idx >> 1) % BM;
            const int q = (idx & 1) + 2 * (idx / (2 * BM));
            const float4 v = *reinterpret_cast<const float4*>(Ablk + (size_t)r * N + k0 + 4 * q);
            As[4 * q + 0][r] = v.x;
            As[4 * q + 1][r] = v.y;
            As[4 * q + 2][r] = v.z;
            As[4 * q + 3][r] = v.w;
        }
        // B tile (BK x BN): row-major float4 copy, consecutive lanes on
        // consecutive addresses both in global and in shared memory.
#pragma unroll
        for (int i = 0; i < (BK * BN / 4 + NT - 1) / NT; ++i) {
            const int idx = tid + i * NT;
            if ((BK * BN / 4) % NT != 0 && idx >= BK * BN / 4) break;
            const int kk = idx / (BN / 4);
            const int c4 = idx % (BN / 4);
            *reinterpret_cast<float4*>(&Bs[kk][4 * c4]) =
                *reinterpret_cast<const float4*>(Bblk + (size_t)(k0 + kk) * N + 4 * c4);
        }
        __syncthreads();  // tiles complete before anyone reads them

#pragma unroll
        for (int k = 0; k < BK; ++k) {
            const float b = Bs[k][threadCol];  // one shared load ...
#pragma unroll
            for (int m = 0; m < TM; m += 4) {  // ... reused TM times
                const float4 a = *reinterpret_cast<const float4*>(&As[k][threadRow0 + m]);
                acc[m + 0] += a.x * b;
                acc[m + 1] += a.y * b;
                acc[m + 2] += a.z * b;
                acc[m + 3] += a.w * b;
            }
        }
        __syncthreads();  // everyone done reading before the next overwrite
    }

    // Lanes of a warp hold consecutive columns: each store is coalesced.
    float* Cblk = C + ((size_t)blockIdx.y * BM + threadRow0) * N + (size_t)blockIdx.x * BN + threadCol;
#pragma unroll
    for (int m = 0; m < TM; ++m) Cblk[(size_t)m * N] = acc[m];
}
