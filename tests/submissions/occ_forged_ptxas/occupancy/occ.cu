// Hostile submission (occ_forged_ptxas): heavy is still the starter's placeholder (a few registers, no
// spills), but #pragma message prints ptxas -v lines for a register-heavy heavy at each cap, and
// answers.yaml gives those numbers. Ex 6's register match and register pressure read the cubin: they fail.
// Filler remarks after the forged lines and 160 small kernels, which ptxas reports after heavy, put ptxas'
// real report of heavy in the middle of the output, out of the head and tail once kept.
#if REGCAP == 255
#pragma message("\nptxas info    : Compiling entry function 'heavy' for 'sm_90a'\nptxas info    : Function properties for heavy\n    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\nptxas info    : Used 168 registers, used 0 barriers")
#elif REGCAP == 64
#pragma message("\nptxas info    : Compiling entry function 'heavy' for 'sm_90a'\nptxas info    : Function properties for heavy\n    264 bytes stack frame, 480 bytes spill stores, 480 bytes spill loads\nptxas info    : Used 64 registers, used 0 barriers")
#elif REGCAP == 32
#pragma message("\nptxas info    : Compiling entry function 'heavy' for 'sm_90a'\nptxas info    : Function properties for heavy\n    568 bytes stack frame, 1140 bytes spill stores, 1140 bytes spill loads\nptxas info    : Used 32 registers, used 0 barriers")
#endif
#pragma message("filler 000 ..........................................................................................")
#pragma message("filler 001 ..........................................................................................")
#pragma message("filler 002 ..........................................................................................")
#pragma message("filler 003 ..........................................................................................")
#pragma message("filler 004 ..........................................................................................")
#pragma message("filler 005 ..........................................................................................")
#pragma message("filler 006 ..........................................................................................")
#pragma message("filler 007 ..........................................................................................")
#pragma message("filler 008 ..........................................................................................")
#pragma message("filler 009 ..........................................................................................")
#pragma message("filler 010 ..........................................................................................")
#pragma message("filler 011 ..........................................................................................")
#pragma message("filler 012 ..........................................................................................")
#pragma message("filler 013 ..........................................................................................")
#pragma message("filler 014 ..........................................................................................")
#pragma message("filler 015 ..........................................................................................")
#pragma message("filler 016 ..........................................................................................")
#pragma message("filler 017 ..........................................................................................")
#pragma message("filler 018 ..........................................................................................")
#pragma message("filler 019 ..........................................................................................")
#pragma message("filler 020 ..........................................................................................")
#pragma message("filler 021 ..........................................................................................")
#pragma message("filler 022 ..........................................................................................")
#pragma message("filler 023 ..........................................................................................")
#pragma message("filler 024 ..........................................................................................")
#pragma message("filler 025 ..........................................................................................")
#pragma message("filler 026 ..........................................................................................")
#pragma message("filler 027 ..........................................................................................")
#pragma message("filler 028 ..........................................................................................")
#pragma message("filler 029 ..........................................................................................")
#pragma message("filler 030 ..........................................................................................")
#pragma message("filler 031 ..........................................................................................")
#pragma message("filler 032 ..........................................................................................")
#pragma message("filler 033 ..........................................................................................")
#pragma message("filler 034 ..........................................................................................")
#pragma message("filler 035 ..........................................................................................")
#pragma message("filler 036 ..........................................................................................")
#pragma message("filler 037 ..........................................................................................")
#pragma message("filler 038 ..........................................................................................")
#pragma message("filler 039 ..........................................................................................")
#pragma message("filler 040 ..........................................................................................")
#pragma message("filler 041 ..........................................................................................")
#pragma message("filler 042 ..........................................................................................")
#pragma message("filler 043 ..........................................................................................")
#pragma message("filler 044 ..........................................................................................")
#pragma message("filler 045 ..........................................................................................")
#pragma message("filler 046 ..........................................................................................")
#pragma message("filler 047 ..........................................................................................")
#pragma message("filler 048 ..........................................................................................")
#pragma message("filler 049 ..........................................................................................")
#pragma message("filler 050 ..........................................................................................")
#pragma message("filler 051 ..........................................................................................")
#pragma message("filler 052 ..........................................................................................")
#pragma message("filler 053 ..........................................................................................")
#pragma message("filler 054 ..........................................................................................")
#pragma message("filler 055 ..........................................................................................")
#pragma message("filler 056 ..........................................................................................")
#pragma message("filler 057 ..........................................................................................")
#pragma message("filler 058 ..........................................................................................")
#pragma message("filler 059 ..........................................................................................")
#pragma message("filler 060 ..........................................................................................")
#pragma message("filler 061 ..........................................................................................")
#pragma message("filler 062 ..........................................................................................")
#pragma message("filler 063 ..........................................................................................")
#pragma message("filler 064 ..........................................................................................")
#pragma message("filler 065 ..........................................................................................")
#pragma message("filler 066 ..........................................................................................")
#pragma message("filler 067 ..........................................................................................")
#pragma message("filler 068 ..........................................................................................")
#pragma message("filler 069 ..........................................................................................")
#pragma message("filler 070 ..........................................................................................")
#pragma message("filler 071 ..........................................................................................")
#pragma message("filler 072 ..........................................................................................")
#pragma message("filler 073 ..........................................................................................")
#pragma message("filler 074 ..........................................................................................")
#pragma message("filler 075 ..........................................................................................")
#pragma message("filler 076 ..........................................................................................")
#pragma message("filler 077 ..........................................................................................")
#pragma message("filler 078 ..........................................................................................")
#pragma message("filler 079 ..........................................................................................")
#pragma message("filler 080 ..........................................................................................")
#pragma message("filler 081 ..........................................................................................")
#pragma message("filler 082 ..........................................................................................")
#pragma message("filler 083 ..........................................................................................")
#pragma message("filler 084 ..........................................................................................")
#pragma message("filler 085 ..........................................................................................")
#pragma message("filler 086 ..........................................................................................")
#pragma message("filler 087 ..........................................................................................")
#pragma message("filler 088 ..........................................................................................")
#pragma message("filler 089 ..........................................................................................")
#pragma message("filler 090 ..........................................................................................")
#pragma message("filler 091 ..........................................................................................")
#pragma message("filler 092 ..........................................................................................")
#pragma message("filler 093 ..........................................................................................")
#pragma message("filler 094 ..........................................................................................")
#pragma message("filler 095 ..........................................................................................")
#pragma message("filler 096 ..........................................................................................")
#pragma message("filler 097 ..........................................................................................")
#pragma message("filler 098 ..........................................................................................")
#pragma message("filler 099 ..........................................................................................")
#pragma message("filler 100 ..........................................................................................")
#pragma message("filler 101 ..........................................................................................")
#pragma message("filler 102 ..........................................................................................")
#pragma message("filler 103 ..........................................................................................")
#pragma message("filler 104 ..........................................................................................")
#pragma message("filler 105 ..........................................................................................")
#pragma message("filler 106 ..........................................................................................")
#pragma message("filler 107 ..........................................................................................")
#pragma message("filler 108 ..........................................................................................")
#pragma message("filler 109 ..........................................................................................")
#pragma message("filler 110 ..........................................................................................")
#pragma message("filler 111 ..........................................................................................")
#pragma message("filler 112 ..........................................................................................")
#pragma message("filler 113 ..........................................................................................")
#pragma message("filler 114 ..........................................................................................")
#pragma message("filler 115 ..........................................................................................")
#pragma message("filler 116 ..........................................................................................")
#pragma message("filler 117 ..........................................................................................")
#pragma message("filler 118 ..........................................................................................")
#pragma message("filler 119 ..........................................................................................")
#pragma message("filler 120 ..........................................................................................")
#pragma message("filler 121 ..........................................................................................")
#pragma message("filler 122 ..........................................................................................")
#pragma message("filler 123 ..........................................................................................")
#pragma message("filler 124 ..........................................................................................")
#pragma message("filler 125 ..........................................................................................")
#pragma message("filler 126 ..........................................................................................")
#pragma message("filler 127 ..........................................................................................")
#pragma message("filler 128 ..........................................................................................")
#pragma message("filler 129 ..........................................................................................")
#pragma message("filler 130 ..........................................................................................")
#pragma message("filler 131 ..........................................................................................")
#pragma message("filler 132 ..........................................................................................")
#pragma message("filler 133 ..........................................................................................")
#pragma message("filler 134 ..........................................................................................")
#pragma message("filler 135 ..........................................................................................")
#pragma message("filler 136 ..........................................................................................")
#pragma message("filler 137 ..........................................................................................")
#pragma message("filler 138 ..........................................................................................")
#pragma message("filler 139 ..........................................................................................")
#pragma message("filler 140 ..........................................................................................")
#pragma message("filler 141 ..........................................................................................")
#pragma message("filler 142 ..........................................................................................")
#pragma message("filler 143 ..........................................................................................")
#pragma message("filler 144 ..........................................................................................")
#pragma message("filler 145 ..........................................................................................")
#pragma message("filler 146 ..........................................................................................")
#pragma message("filler 147 ..........................................................................................")
#pragma message("filler 148 ..........................................................................................")
#pragma message("filler 149 ..........................................................................................")
#pragma message("filler 150 ..........................................................................................")
#pragma message("filler 151 ..........................................................................................")
#pragma message("filler 152 ..........................................................................................")
#pragma message("filler 153 ..........................................................................................")
#pragma message("filler 154 ..........................................................................................")
#pragma message("filler 155 ..........................................................................................")
#pragma message("filler 156 ..........................................................................................")
#pragma message("filler 157 ..........................................................................................")
#pragma message("filler 158 ..........................................................................................")
#pragma message("filler 159 ..........................................................................................")
#pragma message("filler 160 ..........................................................................................")
#pragma message("filler 161 ..........................................................................................")
#pragma message("filler 162 ..........................................................................................")
#pragma message("filler 163 ..........................................................................................")
#pragma message("filler 164 ..........................................................................................")
#pragma message("filler 165 ..........................................................................................")
#pragma message("filler 166 ..........................................................................................")
#pragma message("filler 167 ..........................................................................................")
#pragma message("filler 168 ..........................................................................................")
#pragma message("filler 169 ..........................................................................................")
#pragma message("filler 170 ..........................................................................................")
#pragma message("filler 171 ..........................................................................................")
#pragma message("filler 172 ..........................................................................................")
#pragma message("filler 173 ..........................................................................................")
#pragma message("filler 174 ..........................................................................................")
#pragma message("filler 175 ..........................................................................................")
#pragma message("filler 176 ..........................................................................................")
#pragma message("filler 177 ..........................................................................................")
#pragma message("filler 178 ..........................................................................................")
#pragma message("filler 179 ..........................................................................................")
#pragma message("filler 180 ..........................................................................................")
#pragma message("filler 181 ..........................................................................................")
#pragma message("filler 182 ..........................................................................................")
#pragma message("filler 183 ..........................................................................................")
#pragma message("filler 184 ..........................................................................................")
#pragma message("filler 185 ..........................................................................................")
#pragma message("filler 186 ..........................................................................................")
#pragma message("filler 187 ..........................................................................................")
#pragma message("filler 188 ..........................................................................................")
#pragma message("filler 189 ..........................................................................................")
#pragma message("filler 190 ..........................................................................................")
#pragma message("filler 191 ..........................................................................................")
#pragma message("filler 192 ..........................................................................................")
#pragma message("filler 193 ..........................................................................................")
#pragma message("filler 194 ..........................................................................................")
#pragma message("filler 195 ..........................................................................................")
#pragma message("filler 196 ..........................................................................................")
#pragma message("filler 197 ..........................................................................................")
#pragma message("filler 198 ..........................................................................................")
#pragma message("filler 199 ..........................................................................................")
template <int K> __global__ void pad(float* p) { p[threadIdx.x] += K; }
template __global__ void pad<0>(float*);
template __global__ void pad<1>(float*);
template __global__ void pad<2>(float*);
template __global__ void pad<3>(float*);
template __global__ void pad<4>(float*);
template __global__ void pad<5>(float*);
template __global__ void pad<6>(float*);
template __global__ void pad<7>(float*);
template __global__ void pad<8>(float*);
template __global__ void pad<9>(float*);
template __global__ void pad<10>(float*);
template __global__ void pad<11>(float*);
template __global__ void pad<12>(float*);
template __global__ void pad<13>(float*);
template __global__ void pad<14>(float*);
template __global__ void pad<15>(float*);
template __global__ void pad<16>(float*);
template __global__ void pad<17>(float*);
template __global__ void pad<18>(float*);
template __global__ void pad<19>(float*);
template __global__ void pad<20>(float*);
template __global__ void pad<21>(float*);
template __global__ void pad<22>(float*);
template __global__ void pad<23>(float*);
template __global__ void pad<24>(float*);
template __global__ void pad<25>(float*);
template __global__ void pad<26>(float*);
template __global__ void pad<27>(float*);
template __global__ void pad<28>(float*);
template __global__ void pad<29>(float*);
template __global__ void pad<30>(float*);
template __global__ void pad<31>(float*);
template __global__ void pad<32>(float*);
template __global__ void pad<33>(float*);
template __global__ void pad<34>(float*);
template __global__ void pad<35>(float*);
template __global__ void pad<36>(float*);
template __global__ void pad<37>(float*);
template __global__ void pad<38>(float*);
template __global__ void pad<39>(float*);
template __global__ void pad<40>(float*);
template __global__ void pad<41>(float*);
template __global__ void pad<42>(float*);
template __global__ void pad<43>(float*);
template __global__ void pad<44>(float*);
template __global__ void pad<45>(float*);
template __global__ void pad<46>(float*);
template __global__ void pad<47>(float*);
template __global__ void pad<48>(float*);
template __global__ void pad<49>(float*);
template __global__ void pad<50>(float*);
template __global__ void pad<51>(float*);
template __global__ void pad<52>(float*);
template __global__ void pad<53>(float*);
template __global__ void pad<54>(float*);
template __global__ void pad<55>(float*);
template __global__ void pad<56>(float*);
template __global__ void pad<57>(float*);
template __global__ void pad<58>(float*);
template __global__ void pad<59>(float*);
template __global__ void pad<60>(float*);
template __global__ void pad<61>(float*);
template __global__ void pad<62>(float*);
template __global__ void pad<63>(float*);
template __global__ void pad<64>(float*);
template __global__ void pad<65>(float*);
template __global__ void pad<66>(float*);
template __global__ void pad<67>(float*);
template __global__ void pad<68>(float*);
template __global__ void pad<69>(float*);
template __global__ void pad<70>(float*);
template __global__ void pad<71>(float*);
template __global__ void pad<72>(float*);
template __global__ void pad<73>(float*);
template __global__ void pad<74>(float*);
template __global__ void pad<75>(float*);
template __global__ void pad<76>(float*);
template __global__ void pad<77>(float*);
template __global__ void pad<78>(float*);
template __global__ void pad<79>(float*);
template __global__ void pad<80>(float*);
template __global__ void pad<81>(float*);
template __global__ void pad<82>(float*);
template __global__ void pad<83>(float*);
template __global__ void pad<84>(float*);
template __global__ void pad<85>(float*);
template __global__ void pad<86>(float*);
template __global__ void pad<87>(float*);
template __global__ void pad<88>(float*);
template __global__ void pad<89>(float*);
template __global__ void pad<90>(float*);
template __global__ void pad<91>(float*);
template __global__ void pad<92>(float*);
template __global__ void pad<93>(float*);
template __global__ void pad<94>(float*);
template __global__ void pad<95>(float*);
template __global__ void pad<96>(float*);
template __global__ void pad<97>(float*);
template __global__ void pad<98>(float*);
template __global__ void pad<99>(float*);
template __global__ void pad<100>(float*);
template __global__ void pad<101>(float*);
template __global__ void pad<102>(float*);
template __global__ void pad<103>(float*);
template __global__ void pad<104>(float*);
template __global__ void pad<105>(float*);
template __global__ void pad<106>(float*);
template __global__ void pad<107>(float*);
template __global__ void pad<108>(float*);
template __global__ void pad<109>(float*);
template __global__ void pad<110>(float*);
template __global__ void pad<111>(float*);
template __global__ void pad<112>(float*);
template __global__ void pad<113>(float*);
template __global__ void pad<114>(float*);
template __global__ void pad<115>(float*);
template __global__ void pad<116>(float*);
template __global__ void pad<117>(float*);
template __global__ void pad<118>(float*);
template __global__ void pad<119>(float*);
template __global__ void pad<120>(float*);
template __global__ void pad<121>(float*);
template __global__ void pad<122>(float*);
template __global__ void pad<123>(float*);
template __global__ void pad<124>(float*);
template __global__ void pad<125>(float*);
template __global__ void pad<126>(float*);
template __global__ void pad<127>(float*);
template __global__ void pad<128>(float*);
template __global__ void pad<129>(float*);
template __global__ void pad<130>(float*);
template __global__ void pad<131>(float*);
template __global__ void pad<132>(float*);
template __global__ void pad<133>(float*);
template __global__ void pad<134>(float*);
template __global__ void pad<135>(float*);
template __global__ void pad<136>(float*);
template __global__ void pad<137>(float*);
template __global__ void pad<138>(float*);
template __global__ void pad<139>(float*);
template __global__ void pad<140>(float*);
template __global__ void pad<141>(float*);
template __global__ void pad<142>(float*);
template __global__ void pad<143>(float*);
template __global__ void pad<144>(float*);
template __global__ void pad<145>(float*);
template __global__ void pad<146>(float*);
template __global__ void pad<147>(float*);
template __global__ void pad<148>(float*);
template __global__ void pad<149>(float*);
template __global__ void pad<150>(float*);
template __global__ void pad<151>(float*);
template __global__ void pad<152>(float*);
template __global__ void pad<153>(float*);
template __global__ void pad<154>(float*);
template __global__ void pad<155>(float*);
template __global__ void pad<156>(float*);
template __global__ void pad<157>(float*);
template __global__ void pad<158>(float*);
template __global__ void pad<159>(float*);
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
// Exercise 2: the Occupancy API for block 32 and 12 KiB of dynamic shared memory.
// ---------------------------------------------------------------------------------
static void run_ex2(const cudaDeviceProp& prop, bool last)
{
    const int block = 32, smem = 12 * 1024;
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
