// Stage 4b (textbook, warp tiling) -- 2D register blocktiling organised in three
// levels: block tile, warp tile, thread tile. C = A * B, row-major N x N fp32.
//
// On top of the vectorized 2D kernel (float4 global loads, A transposed in
// shared memory, float4 shared loads), the block tile is split explicitly
// among its warps:
//   * block tile BM x BN: what the block stages in shared memory per k-step;
//   * warp tile WM x WN: the part of it one warp computes. The warp covers it
//     in WMITER x WNITER sub-tiles of WSUBM x WSUBN, one after the other;
//   * thread tile TM x TN: each lane's part of one warp sub-tile.
// A lane therefore holds (WMITER * TM) x (WNITER * TN) results. Per k it loads
// WMITER * TM values of A and WNITER * TN values of B into registers and does
// every product between them. Within a sub-tile, the 8 lanes that share a
// row group read 8 neighbouring float4 of B (128 contiguous bytes) and one
// float4 of A (a broadcast): no shared-memory bank conflicts. Because each
// warp owns a compact region of C, the shared memory it reads is a small,
// fixed part of the tiles, which is the point of the warp level.
// FP32 CUDA cores only: every multiply-add is an FFMA.
//
// Launch: block (NT, 1), one BM x BN tile of C per block, grid (N / BN, N / BM).
// N is a multiple of 256 in grading, so BM, BN and BK divide it: no bounds checks.

constexpr int BM = 128;                        // rows of C per block
constexpr int BN = 128;                        // columns of C per block
constexpr int BK = 16;                         // depth of one k-step
constexpr int WM = 64;                         // rows of C per warp
constexpr int WN = 64;                         // columns of C per warp
constexpr int WMITER = 2;                      // warp sub-tiles along M
constexpr int WNITER = 2;                      // warp sub-tiles along N
constexpr int TM = 8;                          // rows of one sub-tile per lane
constexpr int TN = 4;                          // columns of one sub-tile per lane
constexpr int WSUBM = WM / WMITER;             // rows of a warp sub-tile: 32
constexpr int WSUBN = WN / WNITER;             // columns of a warp sub-tile: 32
constexpr int LANES_N = WSUBN / TN;            // lanes along the columns of a sub-tile: 8
constexpr int LANES_M = WSUBM / TM;            // lanes along its rows: 4
constexpr int WARPS_N = BN / WN;               // warps along the columns of the block tile
constexpr int WARPS_M = BM / WM;
constexpr int NT = 32 * WARPS_M * WARPS_N;     // threads per block: 128
constexpr int A_F4 = BM * BK / 4;              // float4 in one A tile
constexpr int B_F4 = BK * BN / 4;              // float4 in one B tile

static_assert(BM % WM == 0 && BN % WN == 0, "the warp tiles must tile the block tile");
static_assert(WM % WMITER == 0 && WN % WNITER == 0, "the sub-tiles must tile the warp tile");
static_assert(WSUBM % TM == 0 && WSUBN % TN == 0, "the thread tiles must tile a sub-tile");
static_assert(LANES_M * LANES_N == 32, "the 32 lanes of a warp must cover one sub-tile exactly");
static_assert(TM % 4 == 0 && TN % 4 == 0, "a lane's A and B values are read from shared memory as float4");
static_assert(NT <= 1024, "a block may have at most 1024 threads");
static_assert(BK % 4 == 0 && BN % 4 == 0, "tile rows are copied as whole float4");
static_assert(A_F4 % NT == 0 && B_F4 % NT == 0, "each tile must split evenly into float4 copies over the threads");
static_assert((BM * BK + BK * BN) * sizeof(float) <= 48 * 1024, "static shared memory is limited to 48 KiB");
static_assert(256 % BM == 0 && 256 % BN == 0 && 256 % BK == 0, "tiles must divide 256 (N is a multiple of 256)");

// {blockDim.x, blockDim.y, BM (rows of C per block), BN (cols of C per block), dynamic smem bytes}
extern "C" __constant__ int mm2DBlocktiling_launch[5] = {NT, 1, BM, BN, 0};

extern "C" __global__ void mm2DBlocktiling(const float* A, const float* B, float* C, int N)
{
    __shared__ __align__(16) float As[BK][BM];  // the A tile, transposed: As[k][m]
    __shared__ __align__(16) float Bs[BK][BN];  // the B tile as in memory: Bs[k][n]

    const int tid = threadIdx.x;
    const int warp = tid / 32, lane = tid % 32;
    // The warp tile's origin inside the block tile.
    const int warpRow = (warp / WARPS_N) * WM;
    const int warpCol = (warp % WARPS_N) * WN;
    // The lane's thread tile inside each sub-tile: lanes 0..7 share a row group and take
    // neighbouring column groups.
    const int laneRow = lane / LANES_N;
    const int laneCol = lane % LANES_N;

    const int rowBase = blockIdx.y * BM;  // first row of C (and of A) of this block
    const int colBase = blockIdx.x * BN;  // first column of C (and of B) of this block

    float acc[WMITER * TM][WNITER * TN] = {};
    float regA[WMITER * TM];
    float regB[WNITER * TN];

    for (int k0 = 0; k0 < N; k0 += BK) {
        // A tile: float4 number f is row f / (BK / 4), columns 4 * (f % (BK / 4)) ... + 3, stored
        // into four rows of the transposed tile.
        for (int p = 0; p < A_F4 / NT; ++p) {  // a fixed number of copies per thread
            const int f = tid + p * NT;
            const int r = f / (BK / 4), c = 4 * (f % (BK / 4));
            const float4 v = *reinterpret_cast<const float4*>(&A[(rowBase + r) * N + k0 + c]);
            As[c + 0][r] = v.x;
            As[c + 1][r] = v.y;
            As[c + 2][r] = v.z;
            As[c + 3][r] = v.w;
        }
        // B tile: a row-major float4 copy.
        for (int p = 0; p < B_F4 / NT; ++p) {
            const int f = tid + p * NT;
            const int r = f / (BN / 4), c = 4 * (f % (BN / 4));
            *reinterpret_cast<float4*>(&Bs[r][c]) = *reinterpret_cast<const float4*>(&B[(k0 + r) * N + colBase + c]);
        }
        __syncthreads();  // both tiles complete before anyone reads them

        for (int k = 0; k < BK; ++k) {
            // The lane's A values for every sub-tile row, then its B values for every sub-tile column.
            for (int wm = 0; wm < WMITER; ++wm)
                for (int i = 0; i < TM; i += 4)
                    *reinterpret_cast<float4*>(&regA[wm * TM + i]) =
                        *reinterpret_cast<const float4*>(&As[k][warpRow + wm * WSUBM + laneRow * TM + i]);
            for (int wn = 0; wn < WNITER; ++wn)
                for (int j = 0; j < TN; j += 4)
                    *reinterpret_cast<float4*>(&regB[wn * TN + j]) =
                        *reinterpret_cast<const float4*>(&Bs[k][warpCol + wn * WSUBN + laneCol * TN + j]);
            // Every product between them: (WMITER * TM) x (WNITER * TN) multiply-adds.
            for (int i = 0; i < WMITER * TM; ++i)
                for (int j = 0; j < WNITER * TN; ++j)
                    acc[i][j] += regA[i] * regB[j];
        }
        __syncthreads();  // everyone done reading before the next k-step overwrites the tiles
    }

    // acc[wm * TM + i][wn * TN + j] is row warpRow + wm * WSUBM + laneRow * TM + i and column
    // warpCol + wn * WSUBN + laneCol * TN + j of the block tile.
    for (int wm = 0; wm < WMITER; ++wm)
        for (int i = 0; i < TM; ++i)
            for (int wn = 0; wn < WNITER; ++wn)
                for (int j = 0; j < TN; j += 4) {
                    const int row = rowBase + warpRow + wm * WSUBM + laneRow * TM + i;
                    const int col = colBase + warpCol + wn * WSUBN + laneCol * TN + j;
                    const float* r = &acc[wm * TM + i][wn * TN + j];
                    *reinterpret_cast<float4*>(&C[row * N + col]) = make_float4(r[0], r[1], r[2], r[3]);
                }
}
