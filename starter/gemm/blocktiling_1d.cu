// Stage 4a -- 1D register blocktiling.
//
// Bottleneck of stage 3: each multiply-add reads two values from shared
// memory, so the shared-memory pipe, not the FP32 units, limits the speed.
// Task: let each thread compute TM outputs in ONE column of C. For each k,
// load one value of B from shared memory into a register and reuse it
// against TM values of A: TM multiply-adds per B load. Choose the block
// tile (BM x BN), the k-step BK and TM; the defaults below follow the
// handout (64 x 64 tile, BK = 8, TM = 8, 512 threads).
//
// Contract (the grader checks all of it):
//   * keep the exact signature below (extern "C", name mm1DBlocktiling);
//   * C = A * B (row-major N x N fp32), no alpha/beta;
//   * N is always a multiple of 256, so tiles that divide 256 need no
//     bounds checks;
//   * launch shape: mm1DBlocktiling_launch = {blockDim.x, blockDim.y, BM, BN,
//     dynamic smem bytes}; grid = (N / BN, N / BM); each block computes a
//     BM x BN tile of C. If you change the tile sizes, update the array.

constexpr int BM = 64;
constexpr int BN = 64;
constexpr int BK = 8;
constexpr int TM = 8;
constexpr int NT = BM * BN / TM;  // threads per block
static_assert(NT <= 1024, "a block may have at most 1024 threads");
static_assert(256 % BM == 0 && 256 % BN == 0 && 256 % BK == 0, "tiles must divide 256 (N is a multiple of 256)");

// {blockDim.x, blockDim.y, BM (rows of C per block), BN (cols of C per block), dynamic smem bytes}
extern "C" __constant__ int mm1DBlocktiling_launch[5] = {NT, 1, BM, BN, 0};

extern "C" __global__ void mm1DBlocktiling(const float* A, const float* B, float* C, int N)
{
    // TODO: stage BM x BK of A and BK x BN of B in shared memory; each
    // thread accumulates TM results in registers; store them to C.
}
