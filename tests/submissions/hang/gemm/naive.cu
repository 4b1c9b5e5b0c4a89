// Broken submission (hang): every thread spins forever on a volatile read the compiler cannot remove; the grader must kill stage "naive" at its time limit, report a timeout, and still grade the other stages.
constexpr int TILE = 32;

extern "C" __constant__ int mmNaive_launch[5] = {TILE, TILE, TILE, TILE, 0};

extern "C" __global__ void mmNaive(const float* A, const float* B, float* C, int N)
{
    const int row = blockIdx.y * TILE + threadIdx.x;
    const int col = blockIdx.x * TILE + threadIdx.y;
    // Two volatile loads of the same word are always equal (A is never
    // written), but the compiler must perform both on every iteration.
    const volatile int* p = reinterpret_cast<const volatile int*>(A);
    while (p[0] == p[0]) {
    }
    float acc = 0.0f;
    for (int k = 0; k < N; ++k) acc += A[row * N + k] * B[k * N + col];
    C[row * N + col] = acc;
}
