// Hostile submission (forged_ptxas_report): #pragma message prints lines identical to ptxas -v's report
// on the compiler's stderr, claiming 0 spills and 128 registers, while __launch_bounds__(256, 8) caps the
// kernel at 32 registers and its 64 accumulators spill. The resources are read from the cubin and its
// SASS, so 4b.no_spills fails with the real spill bytes and 4b.compiles shows 32 registers.
#pragma message("\nptxas info    : Compiling entry function 'mm2DBlocktiling' for 'sm_90a'\nptxas info    : Function properties for mm2DBlocktiling\n    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\nptxas info    : Used 128 registers, used 1 barriers, 33792 bytes smem")
constexpr int BM = 128, BN = 128, BK = 8, TM = 8, TN = 8;
extern "C" __constant__ int mm2DBlocktiling_launch[5] = {256, 1, BM, BN, 0};
extern "C" __global__ void __launch_bounds__(256, 8) mm2DBlocktiling(const float* A, const float* B, float* C, int N)
{
    __shared__ float As[BK][BM], Bs[BK][BN];
    const int tr = threadIdx.x / (BN / TN), tc = threadIdx.x % (BN / TN);
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    float acc[TM][TN] = {};
    for (int k0 = 0; k0 < N; k0 += BK) {
        for (int i = threadIdx.x; i < BM * BK; i += 256) {
            As[i % BK][i / BK] = A[(row0 + i / BK) * N + k0 + i % BK];
            Bs[i / BN][i % BN] = B[(k0 + i / BN) * N + col0 + i % BN];
        }
        __syncthreads();
        for (int k = 0; k < BK; ++k)
            for (int m = 0; m < TM; ++m)
                for (int n = 0; n < TN; ++n) acc[m][n] += As[k][tr * TM + m] * Bs[k][tc * TN + n];
        __syncthreads();
    }
    for (int m = 0; m < TM; ++m)
        for (int n = 0; n < TN; ++n) C[(row0 + tr * TM + m) * N + col0 + tc * TN + n] = acc[m][n];
}
