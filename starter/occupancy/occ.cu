// occ.cu -- occupancy exercises 2, 4 and 6. Complete every TODO; keep the output format.
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
//
// Rules: check every CUDA runtime call (wrap it in CUDA_CHECK) and follow every kernel
// launch with CUDA_CHECK(cudaGetLastError()); the grader reports unchecked calls by line.
// Keep the kernels' extern "C" names and parameters: the grader loads them by name.

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

// TODO(ex6): make this kernel register-heavy: keep many floats (64 or more) live
// across a loop of dependent operations, so that ptxas -v reports 80 or more
// registers with no spills when uncapped, and spills at -maxrregcount=32.
// Keep the name and the parameters.
extern "C" __global__ void heavy(const float* __restrict__ in, float* __restrict__ out,
                                 int n, int iters)
{
    const int gid = blockIdx.x * blockDim.x + threadIdx.x;
    if (gid < n) out[gid] = in[gid];  // placeholder
}

// ---------------------------------------------------------------------------------
// Host helpers: JSON output (given); event timing and the API call (yours).
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

// Fastest of kReps timed launches of `launch`, after one untimed warm-up.
template <class Launch>
static float fastest_ms(Launch launch)
{
    // TODO(ex4): time `launch()` with cudaEvent_t: one untimed warm-up call, then kReps
    // timed calls, and return the fastest in ms. Let each launch check itself, e.g.
    //   fastest_ms([&] { work<<<grid, block, smem>>>(...); CUDA_CHECK(cudaGetLastError()); });
    (void)launch;
    return -1.0f;  // -1 prints as null
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
    // TODO(ex2): return cudaOccupancyMaxActiveBlocksPerMultiprocessor's result for this
    // kernel, block size and dynamic shared memory. Above 48 KiB, raise the kernel's
    // cudaFuncAttributeMaxDynamicSharedMemorySize first.
    (void)kernel; (void)block; (void)smem;
    return -1;  // -1 prints as null
}

// ---------------------------------------------------------------------------------
// Exercise 2: the Occupancy API for Ex 2's block and dynamic shared memory (EX2_BLOCK, EX2_SMEM).
// ---------------------------------------------------------------------------------
static void run_ex2(const cudaDeviceProp& prop, bool last)
{
    const int block = EX2_BLOCK, smem = EX2_SMEM;
    (void)prop;
    (void)api_blocks;
    // TODO(ex2): blocks per SM from the Occupancy API (api_blocks), the occupancy it gives
    // (blocks * warps per block / max warps per SM), and the block size and minimum grid
    // that cudaOccupancyMaxPotentialBlockSize suggests for `work` with the same smem.
    // Print them in the format below instead of null.
    printf("  \"ex2\": {\"block\": %d, \"smem\": %d, \"blocks\": null, \"occupancy\": null, "
           "\"best_block\": null, \"min_grid\": null}%s\n", block, smem, last ? "" : ",");
}

// ---------------------------------------------------------------------------------
// Exercise 4: two sweeps, occupancy against run time, equal total work everywhere.
// ---------------------------------------------------------------------------------
static Point measure_work(const float* in, float* out, int block, int smem)
{
    Point p;
    p.block = block;
    p.smem = smem;
    // TODO(ex4): choose the grid so that grid * block * iters is the same at every point
    // of both sweeps (kTotalThreads, kIters), get blocks per SM from the Occupancy API,
    // and time work<<<grid, block, smem>>>(in, out, kN, iters) with fastest_ms.
    (void)in; (void)out;
    p.grid = 0;
    p.iters = 0;
    p.blocks = -1;
    p.time_ms = -1.0f;
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
    (void)prop; (void)in; (void)out; (void)iters; (void)grid;
    // TODO(ex6): read heavy's registers and local memory with cudaFuncGetAttributes, its
    // blocks per SM and occupancy at this block size, and its time (fastest_ms), and print
    // them in the format below instead of null. REGCAP says which cap this build has.
    printf("  \"ex6\": {\"kernel\": \"heavy\", \"regcap\": %d, \"registers\": null, "
           "\"local_bytes\": null, \"block\": %d, \"smem\": 0, \"blocks\": null, "
           "\"occupancy\": null, \"grid\": %d, \"iters\": %d, \"time_ms\": null}%s\n",
           REGCAP, block, grid, iters, last ? "" : ",");
}

int main(int argc, char** argv)
{
    const bool ex2 = wanted(argc, argv, "ex2"), ex4 = wanted(argc, argv, "ex4"),
               ex6 = wanted(argc, argv, "ex6");

    CUDA_CHECK(cudaSetDevice(0));
    cudaDeviceProp prop;
    memset(&prop, 0, sizeof(prop));
    // TODO(ex2): fill `prop` with cudaGetDeviceProperties and print (to stderr)
    // maxThreadsPerMultiProcessor, regsPerMultiprocessor, sharedMemPerMultiprocessor
    // and warpSize.

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
