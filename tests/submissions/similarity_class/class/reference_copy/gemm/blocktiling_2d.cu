// Stage 4b: outer-product register tiling.
constexpr int BM = 128;
constexpr int BN = 128;
constexpr int BK = 8;
constexpr int TM = 8;
constexpr int TN = 8;
constexpr int NT = (BM / TM) * (BN / TN);
constexpr int STEP_A = NT / BK;
constexpr int STEP_B = NT / BN;

static_assert(BM % TM == 0 && BN % TN == 0, "the thread tiles must tile the block tile");
static_assert(NT <= 1024 && NT % 32 == 0, "threads per block: a whole number of warps, at most 1024");
static_assert(NT % BK == 0 && BM % STEP_A == 0, "the A tile (BM x BK) must split evenly over the threads");
static_assert(NT % BN == 0 && BK % STEP_B == 0, "the B tile (BK x BN) must split evenly over the threads");
static_assert((BM * BK + BK * BN) * sizeof(float) <= 48 * 1024, "static shared memory is limited to 48 KiB");
static_assert(256 % BM == 0 && 256 % BN == 0 && 256 % BK == 0, "tiles must divide 256 (N is a multiple of 256)");

extern "C" __constant__ int mm2DBlocktiling_launch[5] = {NT, 1, BM, BN, 0};

extern "C" __global__ void mm2DBlocktiling(const float* A, const float* B, float* C, int N)
{
    __shared__ float tileA[BM][BK];
    __shared__ float tileB[BK][BN];

    const int me = threadIdx.x;
    const int ra = me / BK, ca = me % BK;
    const int rb = me / BN, cb = me % BN;
    const int ty = me / (BN / TN);
    const int tx = me % (BN / TN);

    const int by = blockIdx.y * BM;
    const int bx = blockIdx.x * BN;

    float out[TM][TN] = {};
    float colA[TM];
    float rowB[TN];

    for (int k0 = 0; k0 < N; k0 += BK) {
        for (int r = 0; r < BM; r += STEP_A)
            tileA[ra + r][ca] = A[(by + ra + r) * N + k0 + ca];
        for (int r = 0; r < BK; r += STEP_B)
            tileB[rb + r][cb] = B[(k0 + rb + r) * N + bx + cb];
        __syncthreads();

        for (int k = 0; k < BK; ++k) {
            for (int i = 0; i < TM; ++i) colA[i] = tileA[ty * TM + i][k];
            for (int j = 0; j < TN; ++j) rowB[j] = tileB[k][tx * TN + j];
            for (int i = 0; i < TM; ++i)
                for (int j = 0; j < TN; ++j)
                    out[i][j] += colA[i] * rowB[j];
        }
        __syncthreads();
    }

    for (int i = 0; i < TM; ++i)
        for (int j = 0; j < TN; ++j)
            C[(by + ty * TM + i) * N + bx + tx * TN + j] = out[i][j];
}
