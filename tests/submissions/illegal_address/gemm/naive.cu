// Broken submission (illegal_address): every store lands 4 TiB past the end of C; the grader must fail stage "naive" with a CUDA launch failure / illegal address (the runner process dies, the other stages still run).
constexpr int TILE = 32;

extern "C" __constant__ int mmNaive_launch[5] = {TILE, TILE, TILE, TILE, 0};

extern "C" __global__ void mmNaive(const float* A, const float* B, float* C, int N)
{
    const int row = blockIdx.y * TILE + threadIdx.x;
    const int col = blockIdx.x * TILE + threadIdx.y;
    float acc = 0.0f;
    for (int k = 0; k < N; ++k) acc += A[row * N + k] * B[k * N + col];
    C[(size_t)row * N + col + ((size_t)1 << 40)] = acc;  // bug: far out of bounds
}
