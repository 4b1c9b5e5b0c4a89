// Stage 5 (textbook) -- Tensor Cores with WMMA, C = A * B: A, B row-major N x N
// half, accumulation and C in float.
//
// The first WMMA kernel: one warp per 16 x 16 tile of C. The warp walks along
// k in steps of 16; at each step it loads a 16 x 16 fragment of A and one of
// B straight from global memory (wmma::load_matrix_sync with the matrix's
// own row stride N), multiplies them on the Tensor Cores into its FP32
// accumulator fragment (wmma::mma_sync), and at the end stores the fragment
// to C. No shared memory: every fragment element comes from L1/L2 again for
// every product that needs it, which is what the next refinement (staging
// tiles in shared memory) removes.
//
// A block holds WARPS_M x WARPS_N such warps side by side, so it covers a
// BM x BN = (16 * WARPS_M) x (16 * WARPS_N) tile of C.
//
// Launch: block (32 * WARPS_M * WARPS_N, 1), grid (N / BN, N / BM). N is a
// multiple of 256 in grading, so the tiles divide it: no bounds checks.

#include <cuda_fp16.h>
#include <mma.h>

using namespace nvcuda;

constexpr int FRAG = 16;                    // WMMA fragment edge (m16n16k16)
constexpr int WARPS_M = 2;                  // warps per block along the rows of C
constexpr int WARPS_N = 2;                  // warps per block along the columns of C
constexpr int BM = FRAG * WARPS_M;          // rows of C per block: 32
constexpr int BN = FRAG * WARPS_N;          // columns of C per block: 32
constexpr int NT = 32 * WARPS_M * WARPS_N;  // threads per block: 128

static_assert(NT <= 1024, "a block may have at most 1024 threads");
static_assert(256 % BM == 0 && 256 % BN == 0 && 256 % FRAG == 0, "tiles must divide 256 (N is a multiple of 256)");

// {blockDim.x, blockDim.y, BM (rows of C per block), BN (cols of C per block), dynamic smem bytes}
extern "C" __constant__ int mmWMMA_launch[5] = {NT, 1, BM, BN, 0};

extern "C" __global__ void mmWMMA(const half* A, const half* B, float* C, int N)
{
    const int warp = threadIdx.x / 32;
    // The 16 x 16 tile of C this warp owns.
    const int row0 = blockIdx.y * BM + (warp / WARPS_N) * FRAG;
    const int col0 = blockIdx.x * BN + (warp % WARPS_N) * FRAG;

    wmma::fragment<wmma::matrix_a, FRAG, FRAG, FRAG, half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, FRAG, FRAG, FRAG, half, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, FRAG, FRAG, FRAG, float> acc;
    wmma::fill_fragment(acc, 0.0f);

    for (int k = 0; k < N; k += FRAG) {
        // Fragment pointers must be 32-byte aligned: row0 * N + k and k * N + col0 are
        // multiples of 16 halves because N, k, row0 and col0 are.
        wmma::load_matrix_sync(a, A + row0 * N + k, N);  // A[row0 .. +15][k .. +15]
        wmma::load_matrix_sync(b, B + k * N + col0, N);  // B[k .. +15][col0 .. +15]
        wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(C + row0 * N + col0, acc, N, wmma::mem_row_major);
}
