// Hostile submission (n_branch_timed_path): at N = 2048, the size Nsight Compute profiles, it is the
// shared-memory tiled kernel, so the profile shows this stage's technique (reuse through shared memory,
// exactly N^3 FFMA); at every other size, the benchmark's 4096 among them, it takes another path, with no
// shared memory, that computes each element three times over (still correct). The grader must not credit
// the technique items for a path it never timed: the rate at 2048 against the rate at 4096 gives it away.
constexpr int TILE = 32;
constexpr int PROFILED_N = 2048;
extern "C" __constant__ int mmTiled_launch[5] = {TILE, TILE, TILE, TILE, 0};

extern "C" __global__ void mmTiled(const float* A, const float* B, float* C, int N)
{
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty;
    const int col = blockIdx.x * TILE + tx;
    if (N != PROFILED_N) {
        float sum = 0.0f;
#pragma unroll 1
        for (int pass = 0; pass < 3; ++pass) {  // each pass starts its k loop elsewhere: none can be folded
            float acc = 0.0f;
            int k = (pass * N) / 3;
            for (int j = 0; j < N; ++j) {
                acc += A[row * N + k] * B[k * N + col];
                if (++k == N) k = 0;
            }
            sum += acc;
        }
        C[row * N + col] = sum / 3.0f;
        return;
    }
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    float acc = 0.0f;
    for (int t = 0; t < N; t += TILE) {
        As[ty][tx] = A[row * N + t + tx];
        Bs[ty][tx] = B[(t + ty) * N + col];
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    C[row * N + col] = acc;
}
