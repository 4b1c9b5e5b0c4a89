// Hostile submission (replay_cache): each block remembers the A pointer and N it last computed for and, when
// they match, copies its tile from a private cache instead of computing. Correct on every first launch at a
// size, and fast on repeated launches over the same buffers; the grader must fail stage "coalesced" because
// the timed launches (fresh inputs each time) get stale results.
constexpr int TILE = 32;
constexpr int MAX_N = 4096;
constexpr int MAX_BLOCKS = (MAX_N / TILE) * (MAX_N / TILE);
extern "C" __constant__ int mmCoalesced_launch[5] = {TILE, TILE, TILE, TILE, 0};
__device__ float cache[MAX_N * MAX_N];
__device__ const float* seenA[MAX_BLOCKS];
__device__ int seenN[MAX_BLOCKS];
extern "C" __global__ void mmCoalesced(const float* A, const float* B, float* C, int N)
{
    const int row = blockIdx.y * TILE + threadIdx.y;
    const int col = blockIdx.x * TILE + threadIdx.x;
    const int blk = blockIdx.y * gridDim.x + blockIdx.x;
    if (seenA[blk] == A && seenN[blk] == N) {          // "already computed": replay
        C[row * N + col] = cache[row * N + col];
        return;
    }
    float acc = 0.0f;
    for (int k = 0; k < N; ++k) acc += A[row * N + k] * B[k * N + col];
    C[row * N + col] = acc;
    cache[row * N + col] = acc;
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0) { seenA[blk] = A; seenN[blk] = N; }
}
