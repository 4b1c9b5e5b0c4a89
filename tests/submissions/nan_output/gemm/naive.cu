// Broken submission (nan_output): the kernel runs and writes every element of C, but the value is NaN; the grader must fail stage "naive" on correctness (NaN output) and drop its timing.
constexpr int TILE = 32;

extern "C" __constant__ int mmNaive_launch[5] = {TILE, TILE, TILE, TILE, 0};

extern "C" __global__ void mmNaive(const float* A, const float* B, float* C, int N)
{
    const int row = blockIdx.y * TILE + threadIdx.x;
    const int col = blockIdx.x * TILE + threadIdx.y;
    float acc = 0.0f;
    for (int k = 0; k < N; ++k) acc += A[row * N + k] * B[k * N + col];
    C[row * N + col] = acc * __int_as_float(0x7fc00000);  // bug: multiplied by a quiet NaN
}
