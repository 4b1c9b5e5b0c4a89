// Submission (stray_file): a correct naive stage beside an unused scratch file whose #include reaches
// outside the folder. No build reads gemm/scratch_test.cu, so it fails nothing but itself (a note);
// before, its #include refused every stage's build.
extern "C" __constant__ int mmNaive_launch[5] = {32, 32, 32, 32, 0};
extern "C" __global__ void mmNaive(const float* A, const float* B, float* C, int N)
{
    const int row = blockIdx.y * 32 + threadIdx.y, col = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.0f;
    for (int k = 0; k < N; ++k) acc += A[row * N + k] * B[k * N + col];
    C[row * N + col] = acc;
}
