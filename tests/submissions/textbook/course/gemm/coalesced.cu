// Stage 2 (textbook) -- global memory coalescing, C = A * B, row-major N x N fp32.
//
// The same dot product as the naive kernel; only the thread -> element
// mapping changes: threadIdx.x now selects the COLUMN of C. The 32 lanes of a
// warp then read 32 consecutive floats of a row of B (one 128-byte request),
// all read the same element of A (a broadcast), and write 32 consecutive
// floats of C. The number of load instructions is unchanged; each one costs
// far fewer memory sectors.
//
// Launch: block (TILE, TILE), one TILE x TILE tile of C per block,
// grid (N / TILE, N / TILE). N is a multiple of 256 in grading: no bounds checks.

constexpr int TILE = 32;  // rows and columns of C per block
static_assert(TILE == 32, "TILE must be the warp size so that a warp covers one row segment of C");
static_assert(256 % TILE == 0, "TILE must divide 256 (N is a multiple of 256)");

// {blockDim.x, blockDim.y, BM (rows of C per block), BN (cols of C per block), dynamic smem bytes}
extern "C" __constant__ int mmCoalesced_launch[5] = {TILE, TILE, TILE, TILE, 0};

extern "C" __global__ void mmCoalesced(const float* A, const float* B, float* C, int N)
{
    // threadIdx.x picks the column: neighbouring lanes touch neighbouring addresses of B and C.
    const int row = blockIdx.y * TILE + threadIdx.y;
    const int col = blockIdx.x * TILE + threadIdx.x;

    float sum = 0.0f;
    for (int k = 0; k < N; ++k)
        sum += A[row * N + k] * B[k * N + col];
    C[row * N + col] = sum;
}
