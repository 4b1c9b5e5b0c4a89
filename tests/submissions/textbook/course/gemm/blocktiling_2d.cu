// Stage 4b (textbook) -- 2D register blocktiling, C = A * B, row-major N x N fp32.
//
// The 1D kernel reuses only B from a register: every A value it reads from
// shared memory still feeds a single multiply-add. Here each thread computes
// a TM x TN tile of C as a sum of outer products: for every k it copies TM
// values of A and TN values of B from shared memory into registers and does
// TM * TN multiply-adds with them, so each value read from shared memory is
// used TN (or TM) times. Written with the handout's parameters: a 128 x 128
// tile of C per block, BK = 8, TM = TN = 8, so 256 threads; plain scalar
// loads, A stored in shared memory as it is in global memory (not transposed).
// FP32 CUDA cores only: every multiply-add is an FFMA.
//
// Launch: block (NT, 1), one BM x BN tile of C per block, grid (N / BN, N / BM).
// N is a multiple of 256 in grading, so BM, BN and BK divide it: no bounds checks.

constexpr int BM = 128;                    // rows of C per block
constexpr int BN = 128;                    // columns of C per block
constexpr int BK = 8;                      // depth of one k-step
constexpr int TM = 8;                      // rows of C per thread
constexpr int TN = 8;                      // columns of C per thread
constexpr int NT = (BM / TM) * (BN / TN);  // threads per block: 256
// Each thread copies several elements of each tile per k-step: the block covers
// A_ROWS_PER_PASS rows of the A tile (and B_ROWS_PER_PASS of the B tile) per pass.
constexpr int A_ROWS_PER_PASS = NT / BK;
constexpr int B_ROWS_PER_PASS = NT / BN;

static_assert(BM % TM == 0 && BN % TN == 0, "the thread tiles must tile the block tile");
static_assert(NT <= 1024 && NT % 32 == 0, "threads per block: a whole number of warps, at most 1024");
static_assert(NT % BK == 0 && BM % A_ROWS_PER_PASS == 0, "the A tile (BM x BK) must split evenly over the threads");
static_assert(NT % BN == 0 && BK % B_ROWS_PER_PASS == 0, "the B tile (BK x BN) must split evenly over the threads");
static_assert((BM * BK + BK * BN) * sizeof(float) <= 48 * 1024, "static shared memory is limited to 48 KiB");
static_assert(256 % BM == 0 && 256 % BN == 0 && 256 % BK == 0, "tiles must divide 256 (N is a multiple of 256)");

// {blockDim.x, blockDim.y, BM (rows of C per block), BN (cols of C per block), dynamic smem bytes}
extern "C" __constant__ int mm2DBlocktiling_launch[5] = {NT, 1, BM, BN, 0};

extern "C" __global__ void mm2DBlocktiling(const float* A, const float* B, float* C, int N)
{
    __shared__ float As[BM][BK];  // the A tile as in memory: As[m][k]
    __shared__ float Bs[BK][BN];  // the B tile as in memory: Bs[k][n]

    const int tid = threadIdx.x;
    // Where this thread copies from: column aCol of rows aRow, aRow + A_ROWS_PER_PASS, ... of the
    // A tile; column bCol of rows bRow, bRow + B_ROWS_PER_PASS, ... of the B tile.
    const int aRow = tid / BK, aCol = tid % BK;
    const int bRow = tid / BN, bCol = tid % BN;
    // Which TM x TN results it computes: rows threadRow * TM ..., columns threadCol * TN ... of the tile.
    const int threadRow = tid / (BN / TN);
    const int threadCol = tid % (BN / TN);

    const int rowBase = blockIdx.y * BM;  // first row of C (and of A) of this block
    const int colBase = blockIdx.x * BN;  // first column of C (and of B) of this block

    float acc[TM][TN] = {};  // the thread's results, kept in registers for the whole k loop
    float regA[TM];          // one column of the thread's A rows, for one k
    float regB[TN];          // one row of the thread's B columns, for one k

    for (int k0 = 0; k0 < N; k0 += BK) {
        for (int r = 0; r < BM; r += A_ROWS_PER_PASS)
            As[aRow + r][aCol] = A[(rowBase + aRow + r) * N + k0 + aCol];
        for (int r = 0; r < BK; r += B_ROWS_PER_PASS)
            Bs[bRow + r][bCol] = B[(k0 + bRow + r) * N + colBase + bCol];
        __syncthreads();  // both tiles complete before anyone reads them

        for (int k = 0; k < BK; ++k) {
            // TM + TN shared loads ...
            for (int i = 0; i < TM; ++i) regA[i] = As[threadRow * TM + i][k];
            for (int j = 0; j < TN; ++j) regB[j] = Bs[k][threadCol * TN + j];
            // ... feed TM * TN multiply-adds (the outer product).
            for (int i = 0; i < TM; ++i)
                for (int j = 0; j < TN; ++j)
                    acc[i][j] += regA[i] * regB[j];
        }
        __syncthreads();  // everyone done reading before the next k-step overwrites the tiles
    }

    for (int i = 0; i < TM; ++i)
        for (int j = 0; j < TN; ++j)
            C[(rowBase + threadRow * TM + i) * N + colBase + threadCol * TN + j] = acc[i][j];
}
