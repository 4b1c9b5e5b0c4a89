// Hostile submission (sass_padded_hmma): the FP32 tiled stage multiplies with wmma (HMMA), and padding
// kernels make cuobjdump's listing larger than the 8 MB the grader once kept as head and tail, with
// mmTiled in the dropped middle (about 5 MB of listing either side). The whole listing must be counted: 3.fp32_only fails with HMMA.
#include <mma.h>
using namespace nvcuda;
template <int K> __global__ void pad(float* p)
{
    float v = p[threadIdx.x];
#pragma unroll
    for (int i = 0; i < 3000; ++i) v = fmaf(v, 1.0001f + i * K, 0.5f);
    p[threadIdx.x] = v;
}

template __global__ void pad<1>(float*);
template __global__ void pad<2>(float*);
template __global__ void pad<3>(float*);
template __global__ void pad<4>(float*);
template __global__ void pad<5>(float*);
template __global__ void pad<6>(float*);
template __global__ void pad<7>(float*);
template __global__ void pad<8>(float*);

extern "C" __constant__ int mmTiled_launch[5] = {32, 1, 16, 16, 0};  // one warp per 16 x 16 tile of C
extern "C" __global__ void mmTiled(const float* A, const float* B, float* C, int N)
{
    const int row0 = blockIdx.y * 16, col0 = blockIdx.x * 16;
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < N; k += 8) {
        wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> b;
        wmma::load_matrix_sync(a, A + row0 * N + k, N);
        wmma::load_matrix_sync(b, B + k * N + col0, N);
        wmma::mma_sync(acc, a, b, acc);
    }
    // one FFMA so the stage's "require FFMA" alone cannot fail it
    C[0] = C[0] * 0.0f + fmaf(A[0], 0.0f, C[0] * 0.0f);
    wmma::store_matrix_sync(C + row0 * N + col0, acc, N, wmma::mem_row_major);
}

// cuobjdump lists kernels last-defined first: these come before mmTiled in the listing, those above after it
template __global__ void pad<9>(float*);
template __global__ void pad<10>(float*);
template __global__ void pad<11>(float*);
template __global__ void pad<12>(float*);
template __global__ void pad<13>(float*);
template __global__ void pad<14>(float*);
template __global__ void pad<15>(float*);
template __global__ void pad<16>(float*);
