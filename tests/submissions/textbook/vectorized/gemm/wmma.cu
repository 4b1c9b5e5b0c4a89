// Stage 5 (textbook, staged) -- Tensor Cores with WMMA, tiles staged through
// shared memory. C = A * B: A, B row-major N x N half, accumulation and C in float.
//
// The first WMMA kernel loads every fragment straight from global memory, so
// each element of A and B is fetched again for every warp that needs it. Here
// the block first copies a BM x BK tile of A and a BK x BN tile of B into
// shared memory (16-byte loads, consecutive threads on consecutive addresses),
// waits, and then each warp loads its fragments from shared memory:
//   * a block of WARPS_M x WARPS_N warps covers a BM x BN tile of C, every
//     warp a WM x WN sub-tile of FM x FN accumulator fragments;
//   * per 16-wide k step a warp loads FM fragments of A and FN of B and issues
//     FM * FN mma_sync, so each fragment it loads is used FN (or FM) times;
//   * two barriers per k-step, as in the FP32 tiled kernel: one before the
//     fragments are read, one before the tiles are overwritten.
// No padding, no asynchronous copies, no multi-buffering: those are the next
// refinements.
//
// Launch: block (32 * WARPS_M * WARPS_N, 1), grid (N / BN, N / BM). N is a
// multiple of 256 in grading, so the tiles divide it: no bounds checks.

#include <cuda_fp16.h>
#include <mma.h>

using namespace nvcuda;

constexpr int FRAG = 16;                    // WMMA fragment edge (m16n16k16)
constexpr int WARPS_M = 2;                  // warps per block along the rows of C
constexpr int WARPS_N = 2;                  // warps per block along the columns of C
constexpr int WM = 32;                      // rows of C per warp
constexpr int WN = 32;                      // columns of C per warp
constexpr int BM = WARPS_M * WM;            // rows of C per block: 64
constexpr int BN = WARPS_N * WN;            // columns of C per block: 64
constexpr int BK = 32;                      // depth of one k-step
constexpr int FM = WM / FRAG;               // accumulator fragments per warp, along M
constexpr int FN = WN / FRAG;               // ... along N
constexpr int NT = 32 * WARPS_M * WARPS_N;  // threads per block: 128
constexpr int CHUNK = 8;                    // halves per 16-byte copy
constexpr int A_CHUNKS = BM * BK / CHUNK;   // 16-byte copies per A tile
constexpr int B_CHUNKS = BK * BN / CHUNK;   // 16-byte copies per B tile

static_assert(WM % FRAG == 0 && WN % FRAG == 0 && BK % FRAG == 0, "warp tiles and BK are whole fragments");
static_assert(BK % CHUNK == 0 && BN % CHUNK == 0, "tile rows are copied as whole 16-byte chunks");
static_assert(A_CHUNKS % NT == 0 && B_CHUNKS % NT == 0, "each tile must split evenly into copies over the threads");
static_assert(NT <= 1024, "a block may have at most 1024 threads");
// wmma needs 32-byte aligned fragment pointers and a row stride (ldm) that is a multiple of 8 halves.
static_assert((FRAG * BK * 2) % 32 == 0 && (FRAG * 2) % 32 == 0 && (FRAG * BN * 2) % 32 == 0,
              "every fragment pointer into the tiles must stay 32-byte aligned");
static_assert(BK % 8 == 0 && BN % 8 == 0, "wmma's ldm must be a multiple of 8 halves");
static_assert((BM * BK + BK * BN) * 2 <= 48 * 1024, "static shared memory is limited to 48 KiB");
static_assert(256 % BM == 0 && 256 % BN == 0 && 256 % BK == 0, "tiles must divide 256 (N is a multiple of 256)");

// {blockDim.x, blockDim.y, BM (rows of C per block), BN (cols of C per block), dynamic smem bytes}
extern "C" __constant__ int mmWMMA_launch[5] = {NT, 1, BM, BN, 0};

extern "C" __global__ void mmWMMA(const half* A, const half* B, float* C, int N)
{
    __shared__ __align__(32) half As[BM][BK];  // the A tile as in memory: As[m][k]
    __shared__ __align__(32) half Bs[BK][BN];  // the B tile as in memory: Bs[k][n]

    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int warpRow = (warp / WARPS_N) * WM;  // this warp's sub-tile inside the block tile
    const int warpCol = (warp % WARPS_N) * WN;

    const int rowBase = blockIdx.y * BM;  // first row of C (and of A) of this block
    const int colBase = blockIdx.x * BN;  // first column of C (and of B) of this block

    wmma::fragment<wmma::accumulator, FRAG, FRAG, FRAG, float> acc[FM][FN];
    for (int i = 0; i < FM; ++i)
        for (int j = 0; j < FN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    for (int k0 = 0; k0 < N; k0 += BK) {
        // 16-byte copies (8 halves): chunk c is row c / (width / 8), columns 8 * (c % (width / 8)) ...
        for (int p = 0; p < A_CHUNKS / NT; ++p) {  // a fixed number of copies per thread
            const int c = tid + p * NT;
            const int r = c / (BK / CHUNK), col = CHUNK * (c % (BK / CHUNK));
            *reinterpret_cast<int4*>(&As[r][col]) = *reinterpret_cast<const int4*>(&A[(rowBase + r) * N + k0 + col]);
        }
        for (int p = 0; p < B_CHUNKS / NT; ++p) {
            const int c = tid + p * NT;
            const int r = c / (BN / CHUNK), col = CHUNK * (c % (BN / CHUNK));
            *reinterpret_cast<int4*>(&Bs[r][col]) = *reinterpret_cast<const int4*>(&B[(k0 + r) * N + colBase + col]);
        }
        __syncthreads();  // both tiles complete before any warp loads fragments from them

        for (int kk = 0; kk < BK; kk += FRAG) {
            wmma::fragment<wmma::matrix_a, FRAG, FRAG, FRAG, half, wmma::row_major> a[FM];
            wmma::fragment<wmma::matrix_b, FRAG, FRAG, FRAG, half, wmma::row_major> b[FN];
            for (int i = 0; i < FM; ++i) wmma::load_matrix_sync(a[i], &As[warpRow + i * FRAG][kk], BK);
            for (int j = 0; j < FN; ++j) wmma::load_matrix_sync(b[j], &Bs[kk][warpCol + j * FRAG], BN);
            for (int i = 0; i < FM; ++i)
                for (int j = 0; j < FN; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();  // every warp done with the tiles before the next k-step overwrites them
    }

    for (int i = 0; i < FM; ++i)
        for (int j = 0; j < FN; ++j)
            wmma::store_matrix_sync(&C[(rowBase + warpRow + i * FRAG) * N + colBase + warpCol + j * FRAG], acc[i][j], N,
                                    wmma::mem_row_major);
}
