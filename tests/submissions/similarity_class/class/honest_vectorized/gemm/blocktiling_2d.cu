// Stage 4b (textbook, vectorized) -- 2D register blocktiling with 128-bit loads
// and a transposed A tile, C = A * B, row-major N x N fp32.
//
// The same outer-product scheme as the plain 2D kernel (each thread computes a
// TM x TN tile of C; per k it reads TM values of A and TN of B from shared
// memory into registers and does TM * TN multiply-adds), with the handout's
// next two refinements:
//   * float4 (128-bit) global loads and stores: a quarter of the load
//     instructions and address computations for the same bytes;
//   * the A tile stored TRANSPOSED in shared memory (As[k][m]): the TM values
//     of A a thread needs for one k are then contiguous, like its TN values of
//     B, so both come in as float4 shared loads (TM / 4 + TN / 4 loads per
//     TM * TN multiply-adds instead of TM + TN).
// Parameters as the handout's: a 128 x 128 tile per block, BK = 8,
// TM = TN = 8, 256 threads. FP32 CUDA cores only: every multiply-add is an FFMA.
//
// Launch: block (NT, 1), one BM x BN tile of C per block, grid (N / BN, N / BM).
// N is a multiple of 256 in grading, so BM, BN and BK divide it: no bounds checks.

constexpr int BM = 128;                    // rows of C per block
constexpr int BN = 128;                    // columns of C per block
constexpr int BK = 8;                      // depth of one k-step
constexpr int TM = 8;                      // rows of C per thread
constexpr int TN = 8;                      // columns of C per thread
constexpr int NT = (BM / TM) * (BN / TN);  // threads per block: 256
constexpr int A_F4 = BM * BK / 4;          // float4 in one A tile
constexpr int B_F4 = BK * BN / 4;          // float4 in one B tile

static_assert(BM % TM == 0 && BN % TN == 0, "the thread tiles must tile the block tile");
static_assert(NT <= 1024 && NT % 32 == 0, "threads per block: a whole number of warps, at most 1024");
static_assert(BK % 4 == 0 && BN % 4 == 0, "tile rows are copied as whole float4");
static_assert(TM % 4 == 0 && TN % 4 == 0, "a thread's A and B values are read from shared memory as float4");
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
    // Which TM x TN results this thread computes: rows threadRow * TM ..., columns threadCol * TN ...
    const int threadRow = tid / (BN / TN);
    const int threadCol = tid % (BN / TN);

    const int rowBase = blockIdx.y * BM;  // first row of C (and of A) of this block
    const int colBase = blockIdx.x * BN;  // first column of C (and of B) of this block

    float acc[TM][TN] = {};
    float regA[TM];
    float regB[TN];

    for (int k0 = 0; k0 < N; k0 += BK) {
        // A tile: float4 number f is row f / (BK / 4), columns 4 * (f % (BK / 4)) ... + 3; its four
        // values go to four rows of the transposed tile.
        for (int p = 0; p < A_F4 / NT; ++p) {  // a fixed number of copies per thread
            const int f = tid + p * NT;
            const int r = f / (BK / 4), c = 4 * (f % (BK / 4));
            const float4 v = *reinterpret_cast<const float4*>(&A[(rowBase + r) * N + k0 + c]);
            As[c + 0][r] = v.x;
            As[c + 1][r] = v.y;
            As[c + 2][r] = v.z;
            As[c + 3][r] = v.w;
        }
        // B tile: a row-major float4 copy, consecutive threads on consecutive addresses.
        for (int p = 0; p < B_F4 / NT; ++p) {
            const int f = tid + p * NT;
            const int r = f / (BN / 4), c = 4 * (f % (BN / 4));
            *reinterpret_cast<float4*>(&Bs[r][c]) = *reinterpret_cast<const float4*>(&B[(k0 + r) * N + colBase + c]);
        }
        __syncthreads();  // both tiles complete before anyone reads them

        for (int k = 0; k < BK; ++k) {
            // TM / 4 + TN / 4 float4 shared loads ...
            for (int i = 0; i < TM; i += 4)
                *reinterpret_cast<float4*>(&regA[i]) = *reinterpret_cast<const float4*>(&As[k][threadRow * TM + i]);
            for (int j = 0; j < TN; j += 4)
                *reinterpret_cast<float4*>(&regB[j]) = *reinterpret_cast<const float4*>(&Bs[k][threadCol * TN + j]);
            // ... feed TM * TN multiply-adds (the outer product).
            for (int i = 0; i < TM; ++i)
                for (int j = 0; j < TN; ++j)
                    acc[i][j] += regA[i] * regB[j];
        }
        __syncthreads();  // everyone done reading before the next k-step overwrites the tiles
    }

    for (int i = 0; i < TM; ++i)
        for (int j = 0; j < TN; j += 4)
            *reinterpret_cast<float4*>(&C[(rowBase + threadRow * TM + i) * N + colBase + threadCol * TN + j]) =
                make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]);
}
