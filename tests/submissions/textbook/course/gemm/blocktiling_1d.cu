// Stage 4a (textbook) -- 1D register blocktiling, C = A * B, row-major N x N fp32.
//
// In the tiled kernel every multiply-add needs two shared-memory loads, so the
// shared-memory pipe sets the pace. Here each thread computes TM results that
// lie in ONE column of C. For every k it loads one value of B from shared
// memory into a register and uses it for TM multiply-adds, against TM values
// of A read from the shared A tile. Written with the handout's parameters:
// a 64 x 64 tile of C per block, BK = 8, TM = 8, so 512 threads; plain scalar
// loads, A stored in shared memory as it is in global memory (not transposed).
//
// Launch: block (NT, 1), one BM x BN tile of C per block, grid (N / BN, N / BM).
// N is a multiple of 256 in grading, so BM, BN and BK divide it: no bounds checks.

constexpr int BM = 64;            // rows of C per block
constexpr int BN = 64;            // columns of C per block
constexpr int BK = 8;             // depth of one k-step: the width of the A tile, the height of the B tile
constexpr int TM = 8;             // results per thread, all in one column of C
constexpr int NT = BM * BN / TM;  // threads per block: 512

static_assert(BM % TM == 0, "each thread owns TM rows of one column: TM must divide BM");
static_assert(NT <= 1024 && NT % 32 == 0, "threads per block: a whole number of warps, at most 1024");
// The loads below give every thread exactly one element of each tile.
static_assert(BM * BK == NT, "one element of the A tile (BM x BK) per thread");
static_assert(BK * BN == NT, "one element of the B tile (BK x BN) per thread");
static_assert(BN % 32 == 0, "a warp must cover one row group, so that its A reads are broadcasts");
static_assert((BM * BK + BK * BN) * sizeof(float) <= 48 * 1024, "static shared memory is limited to 48 KiB");
static_assert(256 % BM == 0 && 256 % BN == 0 && 256 % BK == 0, "tiles must divide 256 (N is a multiple of 256)");

// {blockDim.x, blockDim.y, BM (rows of C per block), BN (cols of C per block), dynamic smem bytes}
extern "C" __constant__ int mm1DBlocktiling_launch[5] = {NT, 1, BM, BN, 0};

extern "C" __global__ void mm1DBlocktiling(const float* A, const float* B, float* C, int N)
{
    __shared__ float As[BM][BK];  // the A tile as in memory: As[m][k]
    __shared__ float Bs[BK][BN];  // the B tile as in memory: Bs[k][n]

    const int tid = threadIdx.x;
    // Which element of each tile this thread copies.
    const int aRow = tid / BK, aCol = tid % BK;
    const int bRow = tid / BN, bCol = tid % BN;
    // Which results it computes: column threadCol, rows threadRow * TM ... + TM - 1 of the tile.
    // Consecutive threads take consecutive columns, so a warp shares one threadRow.
    const int threadCol = tid % BN;
    const int threadRow = tid / BN;

    const int rowBase = blockIdx.y * BM;  // first row of C (and of A) of this block
    const int colBase = blockIdx.x * BN;  // first column of C (and of B) of this block

    float acc[TM];
    for (int i = 0; i < TM; ++i) acc[i] = 0.0f;

    for (int k0 = 0; k0 < N; k0 += BK) {
        As[aRow][aCol] = A[(rowBase + aRow) * N + k0 + aCol];
        Bs[bRow][bCol] = B[(k0 + bRow) * N + colBase + bCol];
        __syncthreads();  // both tiles complete before anyone reads them

        for (int k = 0; k < BK; ++k) {
            const float b = Bs[k][threadCol];  // one shared load of B ...
            for (int i = 0; i < TM; ++i)      // ... reused for TM multiply-adds
                acc[i] += As[threadRow * TM + i][k] * b;
        }
        __syncthreads();  // everyone done reading before the next k-step overwrites the tiles
    }

    // Lanes of a warp hold consecutive columns: each of the TM stores is coalesced.
    for (int i = 0; i < TM; ++i)
        C[(rowBase + threadRow * TM + i) * N + colBase + threadCol] = acc[i];
}
