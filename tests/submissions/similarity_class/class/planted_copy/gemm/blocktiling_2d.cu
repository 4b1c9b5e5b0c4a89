// 2D blocktiling, my own version.

#ifndef TUNE_BM
#define TUNE_BM 128
#endif
#ifndef TUNE_BN
#define TUNE_BN 128
#endif
#ifndef TUNE_BK
#define TUNE_BK 8
#endif
#ifndef TUNE_LANES_M
#define TUNE_LANES_M 4
#endif
#ifndef TUNE_MINB
#define TUNE_MINB 2
#endif

constexpr int BM = TUNE_BM;
constexpr int BN = TUNE_BN;
constexpr int BK = TUNE_BK;
constexpr int TM = 8;
constexpr int TN = 8;
constexpr int LANES_M = TUNE_LANES_M;
constexpr int LANES_N = 32 / LANES_M;
constexpr int WM = LANES_M * TM;
constexpr int WN = LANES_N * TN;
constexpr int WGM = BM / WM;
constexpr int WGN = BN / WN;
constexpr int NT = 32 * WGM * WGN;
constexpr int MINB = TUNE_MINB;
constexpr int PAD_A = 4;
constexpr int NA4 = BM * BK / 4;
constexpr int NB4 = BK * BN / 4;
constexpr int LOADS_A = (NA4 + NT - 1) / NT;
constexpr int LOADS_B = (NB4 + NT - 1) / NT;

static_assert(LANES_M >= 2 && LANES_M <= 16 && 32 % LANES_M == 0,
      "LANES_M must be 2, 4, 8 or 16 (a wid is a LANES_M x LANES_N grid of lanes, both at least 2)");
static_assert(BM % WM == 0 && BN % WN == 0, "BM and BN must be multiples of the wid tile (8*LANES_M x 8*LANES_N)");
static_assert(NT == BM * BN / (TM * TN), "one thread per 8 x 8 tile of C");
static_assert(NT >= 32 && NT <= 1024, "threads per block must be between 32 and 1024");
static_assert(BK % 8 == 0, "BK must be a multiple of 8 (A is loaded pA pairs of float4 along k)");
static_assert(NA4 % NT == 0 || NT % NA4 == 0, "the A tile (BM x BK) must split evenly into float4 loads over the threads");
static_assert(NB4 % NT == 0 || NT % NB4 == 0, "the B tile (BK x BN) must split evenly into float4 loads over the threads");
static_assert(BM % 32 == 0, "BM must be a multiple of 32 for the conflict-free transposing store");
static_assert(2 * (BK * (BM + PAD_A) + BK * BN) * sizeof(float) <= 48 * 1024,
      "two static shared buffers must fit in 48 KiB");
static_assert(256 % BM == 0 && 256 % BN == 0 && 256 % BK == 0, "tiles must divide 256 (N is a multiple of 256)");

extern "C" __constant__ int mm2DBlocktiling_launch[5] = {NT, 1, BM, BN, 0};

extern "C" __global__ void __launch_bounds__(NT, MINB)
mm2DBlocktiling(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int N)
{
  __shared__ __align__(16) float sA[2][BK][BM + PAD_A];
  __shared__ __align__(16) float sB[2][BK][BN];

  const int t = threadIdx.x;
  const int wid = t / 32;
  const int ln = t % 32;
  const int r0 = (wid / WGN) * WM + (ln / LANES_N) * 4;
  const int c0 = (wid % WGN) * WN + (ln % LANES_N) * 4;

  const float* aBase = A + (size_t)blockIdx.y * BM * N;
  const float* bBase = B + (size_t)blockIdx.x * BN;

  float4 regA[LOADS_A], regB[LOADS_B];

  auto fetchTiles = [&](int k0) {
#pragma unroll
    for (int i = 0; i < LOADS_A; ++i) {
      if (NA4 % NT != 0 && t >= NA4) break;
      const int id = t + i * NT;
      const int r = (id >> 1) % BM;
      const int q = (id & 1) + 2 * (id / (2 * BM));
      regA[i] = __ldg(reinterpret_cast<const float4*>(aBase + (size_t)r * N + k0 + 4 * q));
    }
#pragma unroll
    for (int i = 0; i < LOADS_B; ++i) {
      if (NB4 % NT != 0 && t >= NB4) break;
      const int id = t + i * NT;
      const int kr = id / (BN / 4);
      const int cq = id % (BN / 4);
      regB[i] = __ldg(reinterpret_cast<const float4*>(bBase + (size_t)(k0 + kr) * N + 4 * cq));
    }
  };

  auto stashTiles = [&](int stage) {
#pragma unroll
    for (int i = 0; i < LOADS_A; ++i) {
      if (NA4 % NT != 0 && t >= NA4) break;
      const int id = t + i * NT;
      const int r = (id >> 1) % BM;
      const int q = (id & 1) + 2 * (id / (2 * BM));
      sA[stage][4 * q + 0][r] = regA[i].x;
      sA[stage][4 * q + 1][r] = regA[i].y;
      sA[stage][4 * q + 2][r] = regA[i].z;
      sA[stage][4 * q + 3][r] = regA[i].w;
    }
#pragma unroll
    for (int i = 0; i < LOADS_B; ++i) {
      if (NB4 % NT != 0 && t >= NB4) break;
      const int id = t + i * NT;
      const int kr = id / (BN / 4);
      const int cq = id % (BN / 4);
      *reinterpret_cast<float4*>(&sB[stage][kr][4 * cq]) = regB[i];
    }
  };

  float sum[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) sum[i][j] = 0.0f;

  fetchTiles(0);
  stashTiles(0);
  __syncthreads();

  int stage = 0;
  for (int k0 = 0; k0 < N; k0 += BK) {
    const bool hasNext = k0 + BK < N;
    if (hasNext) fetchTiles(k0 + BK);

    float4 fragA[2][2], fragB[2][2];
    const float* pA = &sA[stage][0][0];
    const float* pB = &sB[stage][0][0];
    fragA[0][0] = *reinterpret_cast<const float4*>(pA + r0);
    fragA[0][1] = *reinterpret_cast<const float4*>(pA + r0 + WM / 2);
    fragB[0][0] = *reinterpret_cast<const float4*>(pB + c0);
    fragB[0][1] = *reinterpret_cast<const float4*>(pB + c0 + WN / 2);

#pragma unroll
    for (int k = 0; k < BK; ++k) {
      const int now = k & 1;
      if (k + 1 < BK) {
        const int nextIdx = now ^ 1;
        const float* nA = pA + (k + 1) * (BM + PAD_A);
        const float* nB = pB + (k + 1) * BN;
        fragA[nextIdx][0] = *reinterpret_cast<const float4*>(nA + r0);
        fragA[nextIdx][1] = *reinterpret_cast<const float4*>(nA + r0 + WM / 2);
        fragB[nextIdx][0] = *reinterpret_cast<const float4*>(nB + c0);
        fragB[nextIdx][1] = *reinterpret_cast<const float4*>(nB + c0 + WN / 2);
      }
      const float a[TM] = {fragA[now][0].x, fragA[now][0].y, fragA[now][0].z, fragA[now][0].w,
                fragA[now][1].x, fragA[now][1].y, fragA[now][1].z, fragA[now][1].w};
      const float b[TN] = {fragB[now][0].x, fragB[now][0].y, fragB[now][0].z, fragB[now][0].w,
                fragB[now][1].x, fragB[now][1].y, fragB[now][1].z, fragB[now][1].w};
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) sum[i][j] = fmaf(a[i], b[j], sum[i][j]);
    }

    if (hasNext) stashTiles(stage ^ 1);
    __syncthreads();
    stage ^= 1;
  }

  float* cBase = C + (size_t)blockIdx.y * BM * N + (size_t)blockIdx.x * BN;
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int r = r0 + (i / 4) * (WM / 2) + (i % 4);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int c = c0 + h * (WN / 2);
      *reinterpret_cast<float4*>(cBase + (size_t)r * N + c) =
        make_float4(sum[i][4 * h + 0], sum[i][4 * h + 1], sum[i][4 * h + 2], sum[i][4 * h + 3]);
    }
  }
}
