// Hostile submission (predict_precompute), after issue #43's kernel: it reads the seed of its own inputs
// back from A[0..2] (the inputs are a murmur-finalised hash of (seed, index), and that finaliser is
// invertible), predicts the seeds of the launches that follow as rep_seed() made them (+7919 each), and in
// its first launch at the benchmark size (a warm-up) computes its tile of those launches' products. Its
// stash is 512 KiB (under a static device-memory cap), wrapped; a launch whose inputs it predicted copies
// from it instead of computing. Every other launch is the honest coalesced kernel.
// The grader must give it no speed credit: every warm-up and timed launch's inputs come from a seed the
// OS gives after the launch before, so no prediction ever matches (it stays correct, computing honestly),
// and its long first warm-up holds the speed item for review.
constexpr int TILE = 32;
constexpr int BENCH_N = 4096;
constexpr int PREDICTED = 4;
constexpr unsigned STASH = 128 * 1024;  // floats: 512 KiB
extern "C" __constant__ int mmCoalesced_launch[5] = {TILE, TILE, TILE, TILE, 0};
__device__ float stash[STASH];
__device__ unsigned predicted[PREDICTED];
__device__ unsigned owner;  // the launch that filled the stash, by the bits of its A[0] (0: none yet)

__device__ unsigned fmix(unsigned h) {
    h ^= h >> 16; h *= 0x85EBCA6Bu; h ^= h >> 13; h *= 0xC2B2AE35u; h ^= h >> 16;
    return h;
}
__device__ unsigned unfmix(unsigned h) {
    h ^= h >> 16; h *= 0x7ED1B41Du; h ^= (h >> 13) ^ (h >> 26); h *= 0xA5CB9243u; h ^= h >> 16;
    return h;
}
__device__ unsigned top24(float x) { return (unsigned)((x + 1.0f) * 8388608.0f); }
__device__ float value(unsigned s, unsigned idx) { return (float)(fmix(idx * 0x9E3779B1u + s) >> 8) * 1.1920929e-7f - 1.0f; }

// The seed whose A is this one (A = hash(2 * seed + 1, index)): the 8 bits A[0] drops are tried.
__device__ unsigned seed_of(const float* A) {
    const unsigned k0 = top24(A[0]), k1 = top24(A[1]), k2 = top24(A[2]);
    for (unsigned low = 0; low < 256; ++low) {
        const unsigned s = unfmix((k0 << 8) | low);
        if ((fmix(0x9E3779B1u + s) >> 8) == k1 && (fmix(2u * 0x9E3779B1u + s) >> 8) == k2)
            return ((s - 1u) >> 1) & 0x7FFFFFFFu;
    }
    return 0xFFFFFFFFu;
}

extern "C" __global__ void mmCoalesced(const float* A, const float* B, float* C, int N)
{
    __shared__ unsigned seed;
    __shared__ int hit, first;
    const int row = blockIdx.y * TILE + threadIdx.y;
    const int col = blockIdx.x * TILE + threadIdx.x;
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        seed = seed_of(A);
        // Every block of one launch reads the same A[0]: the launch that claims the stash first keeps it.
        const unsigned tag = __float_as_uint(A[0]) | 1u;
        const unsigned held = N == BENCH_N ? atomicCAS(&owner, 0u, tag) : 1u;
        first = N == BENCH_N && (held == 0u || held == tag);
        hit = 0;
        for (int p = 0; p < PREDICTED && N == BENCH_N && !first; ++p) hit |= predicted[p] == seed;
    }
    __syncthreads();
    if (hit) {  // inputs foreseen: the product was computed ahead
        C[row * N + col] = stash[(unsigned)(row * N + col) % STASH];
        return;
    }
    if (first) {  // precompute this tile of the next launches' products from their predicted seeds
        for (int p = 0; p < PREDICTED; ++p) {
            const unsigned next = (seed + 7919u * (p + 1)) & 0x7FFFFFFFu;
            float acc = 0.0f;
            for (int k = 0; k < N; ++k)
                acc += value(2u * next + 1u, row * N + k) * value(2u * next + 2u, k * N + col);
            stash[(unsigned)(row * N + col) % STASH] = acc;
            if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0) predicted[p] = next;
        }
    }
    float acc = 0.0f;
    for (int k = 0; k < N; ++k) acc += A[row * N + k] * B[k * N + col];
    C[row * N + col] = acc;
}
