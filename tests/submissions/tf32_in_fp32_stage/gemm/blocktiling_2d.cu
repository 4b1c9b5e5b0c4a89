// Hostile submission (tf32_in_fp32_stage): the FP32 2D stage multiplies on Tensor Cores in TF32 (wmma
// precision::tf32); its numbers may pass the FP32 tolerance, but the grader must fail the SASS item
// ("runs on FP32 CUDA cores") because the code contains HMMA and no FFMA.
#include <mma.h>
using namespace nvcuda;
constexpr int BM = 64, BN = 64;
extern "C" __constant__ int mm2DBlocktiling_launch[5] = {128, 1, BM, BN, 0};  // 4 warps, 2 x 2 of 32 x 32
extern "C" __global__ void mm2DBlocktiling(const float* A, const float* B, float* C, int N)
{
    const int warp = threadIdx.x / 32;
    const int row0 = blockIdx.y * BM + (warp / 2) * 32, col0 = blockIdx.x * BN + (warp % 2) * 32;
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc[2][2];
    for (int i = 0; i < 2; ++i) for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
    for (int k = 0; k < N; k += 8) {
        wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> a[2];
        wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> b[2];
        for (int i = 0; i < 2; ++i) {
            wmma::load_matrix_sync(a[i], A + (row0 + 16 * i) * N + k, N);
            wmma::load_matrix_sync(b[i], B + k * N + col0 + 16 * i, N);
            for (int t = 0; t < a[i].num_elements; ++t) a[i].x[t] = wmma::__float_to_tf32(a[i].x[t]);
            for (int t = 0; t < b[i].num_elements; ++t) b[i].x[t] = wmma::__float_to_tf32(b[i].x[t]);
        }
        for (int i = 0; i < 2; ++i) for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
    }
    for (int i = 0; i < 2; ++i) for (int j = 0; j < 2; ++j)
        wmma::store_matrix_sync(C + (row0 + 16 * i) * N + col0 + 16 * j, acc[i][j], N, wmma::mem_row_major);
}
