// occ.cu -- occupancy exercises 2, 4 and 6 (reference solution).
//
// Build:  nvcc -O2 -arch=sm_90a -o occ occ.cu          (sm_75 on a T4, sm_80 on an A100, ...)
// Run:    ./occ                 every section
//         ./occ ex2 ex4         only the sections named (ex2, ex4, ex6)
// The grader also builds the file at several register caps for exercise 6:
//         nvcc -O2 -arch=sm_90a -maxrregcount=64 -DREGCAP=64 -o occ_r64 occ.cu && ./occ_r64 ex6
//
// Output: one JSON document on stdout (a readable table goes to stderr):
// {
//   "format": "occupancy-v1",
//   "device": {"name": str, "cc": "9.0", "sm_count": int, "warp_size": int,
//              "max_threads_per_sm": int, "max_blocks_per_sm": int, "regs_per_sm": int,
//              "smem_per_sm": int, "smem_per_block_optin": int, "reserved_smem_per_block": int},
//   "work":   {"registers": int, "static_smem": int, "local_bytes": int},
//   "ex2":    {"block": int, "smem": int, "blocks": int, "occupancy": float,
//              "best_block": int, "min_grid": int},
//   "ex4":    {"smem_sweep":  [point, ...], "block_sweep": [point, ...]},
//   "ex6":    {"kernel": "heavy", "regcap": int, "registers": int, "local_bytes": int,
//              "block": int, "smem": int, "blocks": int, "occupancy": float,
//              "grid": int, "iters": int, "time_ms": float}
// }
// where a sweep point is
//   {"block": int, "smem": int, "grid": int, "iters": int, "blocks": int,
//    "occupancy": float, "time_ms": float}.
// Sizes are bytes, "occupancy" is a fraction (active warps / max warps per SM),
// "blocks" is cudaOccupancyMaxActiveBlocksPerMultiprocessor's result, "time_ms" is
// the fastest of several timed runs, and "regcap" is the -maxrregcount the file was
// built with (0: none). A value not measured is null. Only the sections asked for appear.

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

#define CUDA_CHECK(call)                                                          \
    do {                                                                          \
        cudaError_t status_ = (call);                                             \
        if (status_ != cudaSuccess) {                                             \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,  \
                    cudaGetErrorString(status_));                                 \
            exit(EXIT_FAILURE);                                                   \
        }                                                                         \
    } while (0)

#ifndef REGCAP
#define REGCAP 0  // set with -DREGCAP=N next to -maxrregcount=N
#endif
// Ex 2's launch. When the course gives each student their own numbers, the grader builds the program
// with -DEX2_BLOCK=... -DEX2_SMEM=... (`python -m grader variant --student ID` prints yours).
#ifndef EX2_BLOCK
#define EX2_BLOCK 32
#endif
#ifndef EX2_SMEM
#define EX2_SMEM (12 * 1024)
#endif

// ---------------------------------------------------------------------------------
// Kernels. Both keep extern "C" names: the grader loads them from the compiled file.
// ---------------------------------------------------------------------------------

// Streams through `in`, one long chain of dependent multiply-adds per thread, so each
// warp spends most of its time waiting on loads. Its dynamic shared memory is only
// there to take up room on the SM: the launch decides how much, the kernel stages
// its result through as much of it as exists.
extern "C" __global__ void work(const float* __restrict__ in, float* __restrict__ out,
                                int n, int iters)
{
    extern __shared__ float staging[];
    unsigned dyn_bytes;
    asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn_bytes));

    const int gid = blockIdx.x * blockDim.x + threadIdx.x;
    int idx = gid % n;
    float sum = 0.0f;
    for (int step = 0; step < iters; ++step) {
        sum = fmaf(in[idx], 1.0009f, sum);  // waits for the previous sum
        idx = (idx + 1 == n) ? 0 : idx + 1;
    }
    const bool staged = threadIdx.x < dyn_bytes / sizeof(float);
    if (staged) staging[threadIdx.x] = sum;
    __syncthreads();
    if (gid < n) out[gid] = staged ? staging[threadIdx.x] : sum;
}

// Register-heavy: HEAVY_LIVE values stay live across the whole loop, and every
// update reads a neighbour, so the compiler needs a register for each of them.
// Capping registers below that forces the rest out to local memory (spills).
#define HEAVY_LIVE 80
extern "C" __global__ void heavy(const float* __restrict__ in, float* __restrict__ out,
                                 int n, int iters)
{
    const int gid = blockIdx.x * blockDim.x + threadIdx.x;
    float v[HEAVY_LIVE];
#pragma unroll
    for (int j = 0; j < HEAVY_LIVE; ++j) v[j] = in[(gid + 977 * j) % n];
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int j = 0; j < HEAVY_LIVE; ++j)
            v[j] = fmaf(v[(j + 1) % HEAVY_LIVE], 0.25f, v[j] * 0.75f);
    }
    float total = 0.0f;
#pragma unroll
    for (int j = 0; j < HEAVY_LIVE; ++j) total += v[j] * (1.0f + j);
    if (gid < n) out[gid] = total;
}

// ---------------------------------------------------------------------------------
// Host helpers (given): JSON output and event timing.
// ---------------------------------------------------------------------------------

enum : int {
    kN = 1 << 20,            // elements of in/out
    kTotalThreads = 1 << 20, // grid * block, the same at every sweep point
    kIters = 256,            // loads per thread, the same at every sweep point
    kReps = 5,               // timed launches per measurement
};

struct Point {
    int block, smem, grid, iters, blocks;
    float time_ms;
};

// Active warps over the SM's maximum for `blocks` resident blocks; -1 if unknown.
static double occupancy_of(int blocks, int block, const cudaDeviceProp& prop)
{
    if (blocks < 0 || prop.warpSize <= 0 || prop.maxThreadsPerMultiProcessor <= 0) return -1.0;
    const int warps_per_block = (block + prop.warpSize - 1) / prop.warpSize;
    return (double)(blocks * warps_per_block) / (prop.maxThreadsPerMultiProcessor / prop.warpSize);
}

static void json_point(const Point& p, const cudaDeviceProp& prop, bool last)
{
    const double occupancy = occupancy_of(p.blocks, p.block, prop);
    printf("      {\"block\": %d, \"smem\": %d, \"grid\": %d, \"iters\": %d, ", p.block, p.smem,
           p.grid, p.iters);
    if (occupancy >= 0)
        printf("\"blocks\": %d, \"occupancy\": %.6f, ", p.blocks, occupancy);
    else
        printf("\"blocks\": null, \"occupancy\": null, ");
    if (p.time_ms >= 0) printf("\"time_ms\": %.5f}%s\n", p.time_ms, last ? "" : ",");
    else printf("\"time_ms\": null}%s\n", last ? "" : ",");
}

// Fastest of kReps timed calls of `launch` (which checks its own launch), after one
// untimed warm-up.
template <class Launch>
static float fastest_ms(Launch launch)
{
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    launch();  // each launch checks itself
    CUDA_CHECK(cudaDeviceSynchronize());
    float best = -1.0f;
    for (int r = 0; r < kReps; ++r) {
        CUDA_CHECK(cudaEventRecord(start));
        launch();
        CUDA_CHECK(cudaEventRecord(stop));
        CUDA_CHECK(cudaEventSynchronize(stop));
        float ms = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        if (best < 0.0f || ms < best) best = ms;
    }
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    return best;
}

static bool wanted(int argc, char** argv, const char* section)
{
    if (argc < 2) return true;
    for (int i = 1; i < argc; ++i)
        if (strcmp(argv[i], section) == 0) return true;
    return false;
}

// Blocks per SM from the Occupancy API; raises the kernel's dynamic shared-memory
// limit first when the launch needs more than the default 48 KiB.
static int api_blocks(const void* kernel, int block, int smem)
{
    if (smem > 48 * 1024)
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    int blocks = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, block, smem));
    return blocks;
}

// ---------------------------------------------------------------------------------
// Exercise 2: the Occupancy API for Ex 2's block and dynamic shared memory (EX2_BLOCK, EX2_SMEM).
// ---------------------------------------------------------------------------------
static void run_ex2(const cudaDeviceProp& prop, bool last)
{
    const int block = EX2_BLOCK, smem = EX2_SMEM;
    const int blocks = api_blocks((const void*)work, block, smem);
    const double occupancy = occupancy_of(blocks, block, prop);
    int min_grid = 0, best_block = 0;
    CUDA_CHECK(cudaOccupancyMaxPotentialBlockSize(&min_grid, &best_block, work, smem, 0));
    fprintf(stderr, "ex2: block %d, %d B dynamic smem -> %d blocks/SM, occupancy %.1f%%; "
            "suggested block %d (min grid %d)\n", block, smem, blocks, 100.0 * occupancy,
            best_block, min_grid);
    printf("  \"ex2\": {\"block\": %d, \"smem\": %d, \"blocks\": %d, \"occupancy\": %.6f, "
           "\"best_block\": %d, \"min_grid\": %d}%s\n", block, smem, blocks, occupancy,
           best_block, min_grid, last ? "" : ",");
}

// ---------------------------------------------------------------------------------
// Exercise 4: two sweeps, occupancy against run time, equal total work everywhere.
// ---------------------------------------------------------------------------------
static Point measure_work(const float* in, float* out, int block, int smem)
{
    Point p;
    p.block = block;
    p.smem = smem;
    p.grid = kTotalThreads / block;  // grid * block * iters stays constant
    p.iters = kIters;
    p.blocks = api_blocks((const void*)work, block, smem);
    p.time_ms = fastest_ms([&] {
        work<<<p.grid, block, smem>>>(in, out, kN, kIters);
        CUDA_CHECK(cudaGetLastError());
    });
    return p;
}

static void run_ex4(const cudaDeviceProp& prop, const float* in, float* out, bool last)
{
    const int smem_kib[] = {0, 2, 4, 8, 16, 32, 48};
    const int blocks[] = {32, 64, 128, 256, 512, 1024};
    const int n_smem = sizeof(smem_kib) / sizeof(smem_kib[0]);
    const int n_block = sizeof(blocks) / sizeof(blocks[0]);

    printf("  \"ex4\": {\n    \"smem_sweep\": [\n");
    fprintf(stderr, "ex4 smem sweep (block 128)\n  smem_KB | occupancy%% | time_ms\n");
    for (int i = 0; i < n_smem; ++i) {
        Point p = measure_work(in, out, 128, smem_kib[i] * 1024);
        fprintf(stderr, "  %7d | %10.1f | %.4f\n", smem_kib[i],
                100.0 * occupancy_of(p.blocks, p.block, prop), p.time_ms);
        json_point(p, prop, i == n_smem - 1);
    }
    printf("    ],\n    \"block_sweep\": [\n");
    fprintf(stderr, "ex4 block sweep (no dynamic smem)\n    block | occupancy%% | time_ms\n");
    for (int i = 0; i < n_block; ++i) {
        Point p = measure_work(in, out, blocks[i], 0);
        fprintf(stderr, "  %7d | %10.1f | %.4f\n", blocks[i],
                100.0 * occupancy_of(p.blocks, p.block, prop), p.time_ms);
        json_point(p, prop, i == n_block - 1);
    }
    printf("    ]\n  }%s\n", last ? "" : ",");
}

// ---------------------------------------------------------------------------------
// Exercise 6: the register-heavy kernel at this build's register cap.
// ---------------------------------------------------------------------------------
static void run_ex6(const cudaDeviceProp& prop, const float* in, float* out, bool last)
{
    const int block = 256, iters = 64, grid = kTotalThreads / block;
    cudaFuncAttributes attr;
    CUDA_CHECK(cudaFuncGetAttributes(&attr, heavy));
    const int blocks = api_blocks((const void*)heavy, block, 0);
    const double occupancy = occupancy_of(blocks, block, prop);
    const float ms = fastest_ms([&] {
        heavy<<<grid, block>>>(in, out, kN, iters);
        CUDA_CHECK(cudaGetLastError());
    });
    fprintf(stderr, "ex6: regcap %d: %d registers, %zu B local, %d blocks/SM (%.1f%%), %.4f ms\n",
            REGCAP, attr.numRegs, (size_t)attr.localSizeBytes, blocks, 100.0 * occupancy, ms);
    printf("  \"ex6\": {\"kernel\": \"heavy\", \"regcap\": %d, \"registers\": %d, "
           "\"local_bytes\": %zu, \"block\": %d, \"smem\": 0, \"blocks\": %d, "
           "\"occupancy\": %.6f, \"grid\": %d, \"iters\": %d, \"time_ms\": %.5f}%s\n",
           REGCAP, attr.numRegs, (size_t)attr.localSizeBytes, block, blocks, occupancy, grid,
           iters, ms, last ? "" : ",");
}

int main(int argc, char** argv)
{
    const bool ex2 = wanted(argc, argv, "ex2"), ex4 = wanted(argc, argv, "ex4"),
               ex6 = wanted(argc, argv, "ex6");

    CUDA_CHECK(cudaSetDevice(0));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    fprintf(stderr, "%s: maxThreadsPerMultiProcessor %d, regsPerMultiprocessor %d, "
            "sharedMemPerMultiprocessor %zu, warpSize %d\n", prop.name,
            prop.maxThreadsPerMultiProcessor, prop.regsPerMultiprocessor,
            (size_t)prop.sharedMemPerMultiprocessor, prop.warpSize);

    cudaFuncAttributes work_attr;
    CUDA_CHECK(cudaFuncGetAttributes(&work_attr, work));

    float *in = nullptr, *out = nullptr;
    CUDA_CHECK(cudaMalloc(&in, kN * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&out, kN * sizeof(float)));
    CUDA_CHECK(cudaMemset(in, 0, kN * sizeof(float)));

    char name[sizeof(prop.name) + 1];
    int k = 0;
    for (const char* c = prop.name; *c && k < (int)sizeof(prop.name) - 1; ++c)
        if (*c != '"' && *c != '\\') name[k++] = *c;
    name[k] = '\0';

    printf("{\n  \"format\": \"occupancy-v1\",\n");
    printf("  \"device\": {\"name\": \"%s\", \"cc\": \"%d.%d\", \"sm_count\": %d, \"warp_size\": %d, "
           "\"max_threads_per_sm\": %d, \"max_blocks_per_sm\": %d, \"regs_per_sm\": %d, "
           "\"smem_per_sm\": %zu, \"smem_per_block_optin\": %zu, \"reserved_smem_per_block\": %zu},\n",
           name, prop.major, prop.minor, prop.multiProcessorCount, prop.warpSize,
           prop.maxThreadsPerMultiProcessor, prop.maxBlocksPerMultiProcessor,
           prop.regsPerMultiprocessor, (size_t)prop.sharedMemPerMultiprocessor,
           (size_t)prop.sharedMemPerBlockOptin, (size_t)prop.reservedSharedMemPerBlock);
    printf("  \"work\": {\"registers\": %d, \"static_smem\": %zu, \"local_bytes\": %zu}%s\n",
           work_attr.numRegs, (size_t)work_attr.sharedSizeBytes, (size_t)work_attr.localSizeBytes,
           (ex2 || ex4 || ex6) ? "," : "");
    if (ex2) run_ex2(prop, !(ex4 || ex6));
    if (ex4) run_ex4(prop, in, out, !ex6);
    if (ex6) run_ex6(prop, in, out, true);
    printf("}\n");

    CUDA_CHECK(cudaFree(in));
    CUDA_CHECK(cudaFree(out));
    return 0;
}
