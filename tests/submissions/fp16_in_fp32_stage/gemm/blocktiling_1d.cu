// Hostile submission (fp16_in_fp32_stage): the FP32 1D stage rounds A and B to half and multiplies with
// FP16 wmma; the grader must fail the SASS item (HMMA in an FP32 stage), whatever the numbers say.
#include <mma.h>
#include <cuda_fp16.h>
using namespace nvcuda;
constexpr int BM = 64, BN = 64;
extern "C" __constant__ int mm1DBlocktiling_launch[5] = {512, 1, BM, BN, 0};  // 16 warps, 4 x 4 of 16 x 16
extern "C" __global__ void mm1DBlocktiling(const float* A, const float* B, float* C, int N)
{
    __shared__ half As[BM][16], Bs[16][BN];
    const int warp = threadIdx.x / 32;
    const int wr = (warp / 4) * 16, wc = (warp % 4) * 16;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < N; k += 16) {
        for (int i = threadIdx.x; i < BM * 16; i += blockDim.x) {
            As[i / 16][i % 16] = __float2half(A[(blockIdx.y * BM + i / 16) * N + k + i % 16]);
            Bs[i / BN][i % BN] = __float2half(B[(k + i / BN) * N + blockIdx.x * BN + i % BN]);
        }
        __syncthreads();
        wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> b;
        wmma::load_matrix_sync(a, &As[wr][0], 16);
        wmma::load_matrix_sync(b, &Bs[0][wc], BN);
        wmma::mma_sync(acc, a, b, acc);
        __syncthreads();
    }
    wmma::store_matrix_sync(C + (blockIdx.y * BM + wr) * N + blockIdx.x * BN + wc, acc, N, wmma::mem_row_major);
}
