// Stage 1 (textbook) -- naive GEMM, C = A * B, row-major N x N fp32.
//
// One thread per element of C, a plain dot product over k. The mapping is the
// one the handout starts from: threadIdx.x, the index that changes fastest
// inside a warp, selects the ROW of C. The 32 lanes of a warp therefore read
// A from 32 different rows (N floats apart) and write C down a column: every
// access to A and C is uncoalesced. That cost is what stage 2 measures.
//
// Launch: block (TILE, TILE), one TILE x TILE tile of C per block,
// grid (N / TILE, N / TILE). N is a multiple of 256 in grading, so TILE
// divides it and no bounds checks are needed.

constexpr int TILE = 32;  // rows and columns of C per block
static_assert(TILE * TILE <= 1024, "a TILE x TILE block may have at most 1024 threads");
static_assert(256 % TILE == 0, "TILE must divide 256 (N is a multiple of 256)");

// {blockDim.x, blockDim.y, BM (rows of C per block), BN (cols of C per block), dynamic smem bytes}
extern "C" __constant__ int mmNaive_launch[5] = {TILE, TILE, TILE, TILE, 0};

extern "C" __global__ void mmNaive(const float* A, const float* B, float* C, int N)
{
    // blockIdx.y walks the rows of C and blockIdx.x its columns (grid = (N / BN, N / BM));
    // inside the block, threadIdx.x picks the row: the uncoalesced mapping on purpose.
    const int row = blockIdx.y * TILE + threadIdx.x;
    const int col = blockIdx.x * TILE + threadIdx.y;

    float sum = 0.0f;
    for (int k = 0; k < N; ++k)
        sum += A[row * N + k] * B[k * N + col];
    C[row * N + col] = sum;
}
