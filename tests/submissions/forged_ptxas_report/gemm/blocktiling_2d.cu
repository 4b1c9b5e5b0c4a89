// Hostile submission (forged_ptxas_report): #pragma message prints lines identical to ptxas -v's report
// on the compiler's stderr, claiming 0 spills and 128 registers, while __launch_bounds__(256, 8) caps the
// kernel at 32 registers and its 64 accumulators spill. The resources are read from the cubin and its
// SASS, so 4b.no_spills fails with the real spill bytes and 4b.compiles shows 32 registers.
// Filler remarks after the forged report and 64 small kernels, which ptxas reports after mm2DBlocktiling,
// put ptxas' real report of mm2DBlocktiling in the middle of the output, out of the head and tail once kept.
#pragma message("\nptxas info    : Compiling entry function 'mm2DBlocktiling' for 'sm_90a'\nptxas info    : Function properties for mm2DBlocktiling\n    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\nptxas info    : Used 128 registers, used 1 barriers, 33792 bytes smem")
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
constexpr int BM = 128, BN = 128, BK = 8, TM = 8, TN = 8;
extern "C" __constant__ int mm2DBlocktiling_launch[5] = {256, 1, BM, BN, 0};
extern "C" __global__ void __launch_bounds__(256, 8) mm2DBlocktiling(const float* A, const float* B, float* C, int N)
{
    __shared__ float As[BK][BM], Bs[BK][BN];
    const int tr = threadIdx.x / (BN / TN), tc = threadIdx.x % (BN / TN);
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    float acc[TM][TN] = {};
    for (int k0 = 0; k0 < N; k0 += BK) {
        for (int i = threadIdx.x; i < BM * BK; i += 256) {
            As[i % BK][i / BK] = A[(row0 + i / BK) * N + k0 + i % BK];
            Bs[i / BN][i % BN] = B[(k0 + i / BN) * N + col0 + i % BN];
        }
        __syncthreads();
        for (int k = 0; k < BK; ++k)
            for (int m = 0; m < TM; ++m)
                for (int n = 0; n < TN; ++n) acc[m][n] += As[k][tr * TM + m] * Bs[k][tc * TN + n];
        __syncthreads();
    }
    for (int m = 0; m < TM; ++m)
        for (int n = 0; n < TN; ++n) C[(row0 + tr * TM + m) * N + col0 + tc * TN + n] = acc[m][n];
}
