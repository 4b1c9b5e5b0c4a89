// Stage 1 -- naive GEMM (the baseline).
//
// Task: compute C = A * B for row-major N x N fp32 matrices, one thread per
// element of C: the thread reads a row of A and a column of B and writes
// their dot product. Use the handout's mapping threadIdx.x -> ROW of C. It
// is deliberately not coalesced: the next stage measures what that costs.
//
// Contract (the grader checks all of it):
//   * keep the exact signature below (extern "C", name mmNaive);
//   * C = A * B, no alpha/beta; write every element of C exactly once;
//   * N is always a multiple of 256, so no bounds checks are needed;
//   * launch shape: the array mmNaive_launch below holds
//     {blockDim.x, blockDim.y, BM, BN, dynamic shared memory bytes}; the
//     grader launches grid = (N / BN, N / BM) blocks of that shape, so each
//     block computes a BM x BN tile of C (BM rows, BN columns).

constexpr int TILE = 32;  // one 32 x 32 block of threads per 32 x 32 tile of C

// {blockDim.x, blockDim.y, BM (rows of C per block), BN (cols of C per block), dynamic smem bytes}
extern "C" __constant__ int mmNaive_launch[5] = {TILE, TILE, TILE, TILE, 0};

extern "C" __global__ void mmNaive(const float* A, const float* B, float* C, int N)
{
    // TODO: compute the row and column of C this thread owns (threadIdx.x
    // selects the row), accumulate the dot product over k, store it in C.
}
