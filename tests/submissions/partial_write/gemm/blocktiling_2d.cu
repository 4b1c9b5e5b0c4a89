// Broken submission (partial_write): the last row of blocks returns early, so the bottom BM rows of C keep the NaN poison; the grader must fail stage "blocktiling_2d" on correctness (unwritten/NaN elements) and drop its timing.
constexpr int BM = 128, BN = 128, BK = 8, TM = 8, TN = 8;
constexpr int NT = (BM / TM) * (BN / TN);  // 256 threads, one 8 x 8 tile of C each

extern "C" __constant__ int mm2DBlocktiling_launch[5] = {NT, 1, BM, BN, 0};

extern "C" __global__ void mm2DBlocktiling(const float* A, const float* B, float* C, int N)
{
    if (blockIdx.y == gridDim.y - 1) return;  // bug: skips the last block row of C

    __shared__ float As[BK][BM];  // A tile, transposed
    __shared__ float Bs[BK][BN];
    const int tid = threadIdx.x;
    const int r0 = (tid / (BN / TN)) * TM;  // first row of this thread's 8 x 8
    const int c0 = (tid % (BN / TN)) * TN;  // first column
    const float* Ab = A + blockIdx.y * BM * N;
    const float* Bb = B + blockIdx.x * BN;

    float acc[TM][TN] = {};
    for (int k0 = 0; k0 < N; k0 += BK) {
        for (int i = tid; i < BM * BK; i += NT) As[i % BK][i / BK] = Ab[(i / BK) * N + k0 + i % BK];
        for (int i = tid; i < BK * BN; i += NT) Bs[i / BN][i % BN] = Bb[(k0 + i / BN) * N + i % BN];
        __syncthreads();
        for (int k = 0; k < BK; ++k) {
            float a[TM], b[TN];
            for (int m = 0; m < TM; ++m) a[m] = As[k][r0 + m];
            for (int n = 0; n < TN; ++n) b[n] = Bs[k][c0 + n];
            for (int m = 0; m < TM; ++m)
                for (int n = 0; n < TN; ++n) acc[m][n] += a[m] * b[n];
        }
        __syncthreads();
    }
    float* Cb = C + (blockIdx.y * BM + r0) * N + blockIdx.x * BN + c0;
    for (int m = 0; m < TM; ++m)
        for (int n = 0; n < TN; ++n) Cb[m * N + n] = acc[m][n];
}
