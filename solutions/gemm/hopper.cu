// Stage 6 (bonus, Hopper sm_90a) -- TMA + WGMMA with a warp-specialised pipeline.
// C = A * B^T with A (N x K) and Bt (N x K) row-major BF16, i.e. both operands
// K-major (the layout Hopper's tensor cores read without a transpose), FP32
// accumulation, C row-major N x N FP32. The grader builds the two TMA
// descriptors from mmHopper_tma (host code is never the student's) and passes
// them by value as __grid_constant__ parameters, followed by the plain pointers
// (unused here: every load goes through the tensor maps).
//
// What each choice bought, measured on an H200 at N = 4096 against BF16
// cublasGemmEx on the same K-major operands (medians of 30 interleaved
// launches, L2 flushed before each; docs/measurements/scripts/tune_hopper.py).
// The reference (the defaults below): 100.5-100.8% of cuBLAS in five runs; as
// graded (20 interleaved launches, five gradings): 100.7-100.9%, 748-750
// TFLOP/s (docs/measurements/2026-12-02-h200-speed-round8.md). Items 1-12 were
// measured before item 13, with the stores from the registers (item 6): that
// kernel made 98.65-98.87% (round 7) and 98.4-98.7% in item 13's runs. Items
// 1-11 were measured before item 12, with every SM working: that kernel made
// 97.3-97.6%, and non-persistent (TUNE_PERSISTENT = 0) 95.1% and 95.0%
// (docs/measurements/2026-12-01-h200-speed-round3.md). Where a choice says
// "non-persistent", it was measured on the TUNE_PERSISTENT = 0 kernel; its
// effect on the persistent kernel is not measured.
//
// 1. Tensor memory accelerator (TMA) loads. One thread issues a single
//    cp.async.bulk.tensor per operand tile; the copy engine computes the
//    addresses, writes shared memory in the 128-byte swizzled layout WGMMA
//    reads without bank conflicts, and signals an mbarrier with the bytes it
//    landed. No warp spends instructions on address arithmetic or copies.
//    (Not measured on its own: WGMMA below needs operands in shared memory.)
//
// 2. WGMMA. A warpgroup (4 warps) issues one asynchronous m64nNk16 matrix
//    product whose operands come straight from shared memory through 64-bit
//    descriptors: no ldmatrix, no fragment registers for A and B. The same
//    algorithm with mma_sync (grader/instructor/bf16_wmma_port.cu) reached
//    34.8% (docs/measurements/2026-11-30-h200-hopper-stage.md). One n256
//    instruction per k-step against two n128 (TUNE_WGN = 128): 95.1% against
//    94.6%, non-persistent.
//
// 3. Warp specialisation. Warpgroup 0 only produces (TMA), warpgroups 1..2
//    only consume (WGMMA), each owning 64 rows of the 128 x 256 block tile.
//    setmaxnreg moves registers from the producer (24 per thread) to the
//    consumers (240), which hold 128 FP32 accumulators each: 0 spills. A
//    128 x 128 tile (each A tile feeds half as many columns) with 6 slots:
//    86.5% against 95.1%, non-persistent; persistent, 6 and 7 slots: 88.9%
//    and 90.9% against 97.5%. (Specialisation itself is not measured against
//    a kernel without it.)
//
// 4. A STAGES-deep ring of shared-memory slots with two mbarriers per slot:
//    "full" (the TMA's byte count arrived) and "empty" (every consumer warp
//    finished reading it). The producer runs up to STAGES tiles ahead: 4
//    slots 97.5% against 92.9% with 3 (persistent; non-persistent 95.1%
//    against 90.6%); 5 do not fit in 227 KiB. Keeping one wgmma group in
//    flight before freeing a slot (INFLIGHT 1) against waiting for each
//    group: 95.1% against 94.9%, non-persistent.
//
// 5. Grouped launch order. Consecutive tiles take GROUP = 8 tile rows of C
//    and walk their columns together, so the A and B strips they read are
//    still in L2 when the next tiles need them: 95.1% against 93.3% in plain
//    grid order, non-persistent. Persistent: 16 rows 97.5% and 97.3% (as 8
//    within the runs' spread), 4 rows 97.0%; non-persistent 16 rows 95.2%.
//
// 6. Epilogue from registers (TUNE_STAGED_STORE = 0; replaced by item 13).
//    Each thread writes its accumulators as float2 pairs; a quad of lanes
//    covers 32 contiguous bytes, so every store instruction of a warp fills
//    whole 32-byte sectors, but of 8 different rows.
//
// 7. Persistent blocks (TUNE_PERSISTENT = 1, the default): 97.5% against
//    95.1% non-persistent, same launch. The grid is unchanged, but only
//    min(SMs, tiles, launched blocks) blocks work (the SM count from %nsmid,
//    which read 132 = the SM count; TUNE_WORKERS = 132 instead: 97.5%), or
//    fewer (item 12); the rest return before touching a barrier. Working
//    block b computes tiles b, b + W, b + 2W, ... of the grouped order, and
//    its ring of slots runs
//    on across tiles (one running use count for the producer and each
//    consumer, so the phases continue), so the producer loads the next
//    tile's first slots while the consumers store the current tile: no
//    block launch, barrier init or pipeline fill between tiles, and the
//    epilogue overlaps the next tile's loads. The consumers release a tile's
//    last INFLIGHT slots after its final wgmma wait, before the epilogue;
//    without that the producer would wait for them forever.
//
// 8. Clusters sharing B (TUNE_CLUSTER = 2, persistent only; off by default):
//    96.5% and 96.6% against 97.5% without (GROUP 16: 97.0%, 97.1%; GROUP
//    4: 96.6%; 128 working blocks, TUNE_WORKERS = 128: 97.5%, 97.3%): no gain
//    measured. Two blocks of a
//    cluster (__cluster_dims__ along y: N / BM is even while N / BN is 1 at
//    N = 256) compute two tiles one above another, which read the same
//    256 x 64 B tile per k-step (two thirds of a slot's bytes): each block
//    loads one half of it and the TMA multicasts the half into both blocks'
//    slots, halving B's L2 reads. A slot may then be refilled only when both
//    blocks' consumers have released it: each consumer warp arrives on the
//    slot's empty barrier in both blocks (count 2 x 8), and each producer
//    still expects the slot's whole bytes on its own full barrier (its A,
//    its half of B, the peer's half). A cluster barrier after the barrier
//    init and one before the blocks leave (a peer's last remote arrivals)
//    close it. The producer keeps 40 registers (24 spilled the multicast's
//    addresses), the consumers 232.
//
// 9. Ping-pong (TUNE_PINGPONG = 1 with TUNE_BN = TUNE_WGN = 128; off by
//    default): 89.0% (6 slots 89.9%, GROUP 16 88.2%) against 97.5%: slower,
//    as the 128 x 128 tiles of item 3 are. Each consumer warpgroup computes whole 128 x 128
//    tiles (two m64 rows of n128 products, 128 accumulators per thread), the
//    two taking this block's tiles in turn: consumer 0 the even ones,
//    consumer 1 the odd ones, so one's epilogue runs while the other's
//    products keep the tensor cores busy. The producer fills the ring in tile
//    order as before; a slot use is read (and released) by the 4 warps of
//    one warpgroup. A consumer starts a tile's main loop only after the
//    other has issued the previous tile's (named barriers 1 and 2): without
//    that, consumer 1 would wait on a slot's full barrier while it is still
//    two or more phases behind the use it wants, and the parity would pass
//    on an older phase (hopper_ring_model.py catches it).
//
// 10. Stream-K (TUNE_STREAMK = 1; off by default): 92.7-92.9% against
//    97.3-97.4% in three runs, slower (why is not measured). At N = 4096 the
//    512 tiles are 3.88 rounds of 132 blocks, so the last round leaves 16
//    SMs idle. With stream-K the tiles of that round are cut by k-steps into
//    one equal share per block, after its three whole tiles. A tile begun in
//    one share and ended in the next ones is finished by the block that began
//    it. That block waits for the others' partial tiles, which they leave in
//    module memory with a flag (release / acquire at GPU scope). A block's
//    share is at least half a tile, so at most three blocks share one.
//
// 11. cuBLAS's own shape at N = 4096 (ncu names its kernel
//    nvjet_sm90_tss_256x128_64x4_1x2_h_bz_coopA_TNT: 132 persistent blocks in
//    clusters of two): 256 x 128 tiles (TUNE_BM = 256, TUNE_BN = TUNE_WGN =
//    128; each consumer warpgroup two m64n128 rows), 96.2-96.3% against
//    97.3-97.6%. Two blocks side by side sharing their A tile (TUNE_CLUSTER =
//    2, TUNE_SHARE_A = 1; each loads half of it for both, as item 8 does
//    with B): 96.1-96.2% (GROUP 16: 95.7-95.9%, 4: 95.4%).
//
// 12. Balanced rounds (TUNE_BALANCE = 1, the default; persistent, not with
//    stream-K): as few working blocks as need no more rounds of tiles than
//    every SM would, so the blocks' tile counts differ by at most one and the
//    last round is short by fewer tiles than there are rounds (whole at N =
//    2048, 2304, 3072, 4096, 6144 and 8192). At N = 4096 the 512 tiles take 4
//    rounds either way: 128 blocks instead of 132, and each round is then
//    exactly one group of item 5's
//    launch order (8 tile rows x 16 columns). 98.65-98.87% against
//    97.46-97.65% with every SM working (TUNE_BALANCE = 0), in five runs each.
//    TUNE_WORKERS = 128 measured the same before (98.6%, 98.6%), and the
//    stream-K build with 128 blocks, which then takes no share, 98.3%, 98.3%:
//    so item 10's loss is its shares' work, not its code. Why the whole round
//    helps (the group in L2, or no round with SMs idle) is not measured apart.
//
// 13. Staged stores (TUNE_STAGED_STORE = 1, the default): the epilogue goes
//    through shared memory, a 64 x 64 piece of a consumer's rows at a time,
//    in a buffer of its own after the ring (16 KiB per consumer; 225 KiB in
//    all). Each thread writes its float2 pairs there, the warpgroup meets at
//    a named barrier, then each warp reads back float4s of two whole rows
//    and stores their 2 x 256 contiguous bytes: 4 whole 128-byte lines per
//    store instruction, against 8 rows' 32 bytes from the fragments, and
//    half the store instructions. A row's 16-byte units are permuted within
//    each half-row (unit ^ 2 * row % 8), so a half-warp's fragment writes
//    and a quarter-warp's row reads fall in distinct banks. Under ncu (one
//    launch at N = 4096) the warps' stalls on a full store queue
//    (lg_throttle) went from 6.0% to 0.1% and the tensor pipe from 89.1% to
//    90.6% (cuBLAS: 91.0-91.3%). Against item 12's kernel (TUNE_STAGED_STORE
//    = 0), five runs each: 100.5-100.8% of cuBLAS against 98.4-98.7%. In two
//    runs before: GROUP 16 100.45% and 100.35% (GROUP 8: 100.45%, 100.58%);
//    clusters of two sharing B 99.2%; cuBLAS's 256 x 128 shape sharing A
//    98.2-98.3%.
//
// Launch: block (384, 1), grid (N / BN, N / BM), SMEM_BYTES of dynamic
// shared memory. N is a multiple of 256: no bounds checks.

#include <cstdint>
#include <cuda_bf16.h>

#ifndef TUNE_BM
#define TUNE_BM 128
#endif
#ifndef TUNE_BN
#define TUNE_BN 256
#endif
#ifndef TUNE_WGN
#define TUNE_WGN 256
#endif
#ifndef TUNE_STAGES
#define TUNE_STAGES 4
#endif
#ifndef TUNE_INFLIGHT
#define TUNE_INFLIGHT 1
#endif
#ifndef TUNE_GROUP
#define TUNE_GROUP 8
#endif
#ifndef TUNE_PERSISTENT
#define TUNE_PERSISTENT 1  // 0: one tile per launched block
#endif
#ifndef TUNE_WORKERS
#define TUNE_WORKERS 0  // with TUNE_PERSISTENT: working blocks at most (0: the SM count, %nsmid)
#endif
#ifndef TUNE_BALANCE
#define TUNE_BALANCE 1  // with TUNE_PERSISTENT: as few working blocks as keep the rounds (0: every SM works)
#endif
#ifndef TUNE_CLUSTER
#define TUNE_CLUSTER 1  // with TUNE_PERSISTENT: blocks per cluster, which share their B tiles (1: no clusters)
#endif
#ifndef TUNE_SHARE_A
#define TUNE_SHARE_A 0  // with TUNE_CLUSTER 2: the cluster's tiles side by side share A (0: one above another, B)
#endif
#ifndef TUNE_PINGPONG
#define TUNE_PINGPONG 0  // with TUNE_PERSISTENT and TUNE_BN 128: each consumer warpgroup computes whole tiles, in turn
#endif
#ifndef TUNE_STREAMK
#define TUNE_STREAMK 0  // with TUNE_PERSISTENT: the last, partial round's tiles are shared out by k-steps
#endif
#ifndef TUNE_STAGED_STORE
#define TUNE_STAGED_STORE 1  // the epilogue goes through shared memory, whole row segments per warp (0: from the fragments)
#endif

constexpr int BM = TUNE_BM;             // rows of C per block: BM / 2 per consumer warpgroup
constexpr int BN = TUNE_BN;             // columns of C per block
constexpr int BK = 64;                  // k-depth of one slot: 64 BF16 = 128 bytes, one swizzle row
constexpr int WGN = TUNE_WGN;           // N of one wgmma instruction
constexpr int STAGES = TUNE_STAGES;     // shared-memory slots in the ring
constexpr int INFLIGHT = TUNE_INFLIGHT; // wgmma groups a consumer leaves running before it frees a slot
constexpr int GROUP = TUNE_GROUP;       // block-row tiles per group of the launch order (0: plain grid order)
constexpr int CLUSTER = TUNE_CLUSTER;   // blocks of a cluster: tiles one above another, sharing B
constexpr bool PINGPONG = TUNE_PINGPONG;
constexpr bool SHARE_A = TUNE_SHARE_A;  // (with CLUSTER > 1)
constexpr bool STREAMK = TUNE_STREAMK;
constexpr bool STAGED_STORE = TUNE_STAGED_STORE;
constexpr int CONSUMERS = 2;            // consumer warpgroups: m64 each of every tile, or (PINGPONG) alternate tiles
constexpr int WG_ROWS = PINGPONG ? BM : BM / CONSUMERS;  // rows of a tile one consumer warpgroup computes
constexpr int THREADS = 128 * (CONSUMERS + 1);
constexpr int CONSUMER_WARPS = 4 * CONSUMERS;
constexpr int READERS = PINGPONG ? 4 : CONSUMER_WARPS;   // consumer warps that read (and release) one slot use
// setmaxnreg's registers per thread (multiples of 8; 128 x producer + 256 x consumer <= 64 Ki). The
// producer of a cluster also computes the multicast's addresses: 24 would spill.
constexpr int PRODUCER_REGS = CLUSTER > 1 ? 40 : 24;
constexpr int CONSUMER_REGS = CLUSTER > 1 ? 232 : 240;
constexpr int SWIZZLE = 128;            // bytes; TMA and the wgmma descriptors must agree
constexpr int A_SLOT = BM * BK * 2;     // bytes of one A tile
constexpr int B_SLOT = BN * BK * 2;     // bytes of one B tile
constexpr int A_BOX = SHARE_A ? BM / CLUSTER : BM;  // rows of the A tile one TMA copy loads (shared: for the cluster)
constexpr int B_BOX = SHARE_A ? BN : BN / CLUSTER;  // rows of the B tile one TMA copy loads (shared: for the cluster)
constexpr int SLOT_BYTES = A_SLOT + B_SLOT;
constexpr int ALIGN = 1024;             // a 128-byte swizzle repeats every 8 rows = 1024 bytes
constexpr int BARRIER_BYTES = 2 * STAGES * 8;
// (TUNE_STAGED_STORE) one consumer warpgroup's staging buffer: EPI_ROWS x EPI_COLS FP32 of its tile,
// after the barriers (at a 128-byte boundary); one buffer per consumer warpgroup.
constexpr int EPI_ROWS = 64;
constexpr int EPI_COLS = 64;            // 256 bytes a row: a warp's 16-byte stores cover two rows' segments
constexpr int EPI_BYTES = EPI_ROWS * EPI_COLS * 4;
constexpr int EPI_OFFSET = (BARRIER_BYTES + 127) / 128 * 128;  // from the barriers
constexpr int SMEM_BYTES = ALIGN + STAGES * SLOT_BYTES + (STAGED_STORE ? EPI_OFFSET + CONSUMERS * EPI_BYTES : BARRIER_BYTES);

static_assert(BK * 2 == SWIZZLE, "one k-slot row must be exactly one 128-byte swizzle row");
static_assert(PINGPONG ? BM == 128 : BM % (64 * CONSUMERS) == 0, "each consumer warpgroup owns m64 blocks of rows");
static_assert(!PINGPONG || (TUNE_PERSISTENT && CLUSTER == 1 && BN == 128),
              "ping-pong: persistent, no clusters, 128 x 128 tiles (a warpgroup's 128 threads hold a whole tile)");
static_assert(BN % WGN == 0 && (WGN == 128 || WGN == 256), "BN must be a whole number of wgmma N-widths");
static_assert(BM <= 256 && BN <= 256, "a TMA box has at most 256 rows");
static_assert(A_SLOT % ALIGN == 0 && B_SLOT % ALIGN == 0, "every tile must start on a swizzle-pattern boundary");
static_assert(STAGES >= 2 && INFLIGHT >= 0 && INFLIGHT < STAGES, "the ring needs a slot to fill while others are read");
static_assert(SMEM_BYTES <= 227 * 1024, "the ring must fit in the 227 KiB of shared memory a block may use");
static_assert(256 % BM == 0 && 256 % BN == 0 && 256 % BK == 0, "tiles must divide 256 (N is a multiple of 256)");
static_assert(!STREAMK || (TUNE_PERSISTENT && CLUSTER == 1 && !PINGPONG),
              "stream-K: persistent blocks, no clusters, no ping-pong (both consumers finish each segment)");
static_assert(!STAGED_STORE || (WG_ROWS % EPI_ROWS == 0 && WGN % EPI_COLS == 0 && EPI_COLS == 64 && EPI_ROWS == 64),
              "staged stores: whole 64 x 64 pieces of a consumer's rows; a row of the piece is 16 16-byte units");
static_assert(128 * PRODUCER_REGS + 128 * CONSUMERS * CONSUMER_REGS <= 65536, "the register file holds 64 Ki");
static_assert(CLUSTER == 1 || (CLUSTER == 2 && TUNE_PERSISTENT &&
                               (SHARE_A ? BN * CLUSTER <= 256 && (A_BOX * BK * 2) % ALIGN == 0
                                        : GROUP % CLUSTER == 0 && BM * CLUSTER <= 256 && (B_BOX * BK * 2) % ALIGN == 0)),
              "a cluster of 2 persistent blocks: 2 tiles one above another (N / BM is even) sharing B in two boxes, "
              "or side by side (N / BN is even) sharing A");

// {blockDim.x, blockDim.y, BM, BN, dynamic smem bytes}
extern "C" __constant__ int mmHopper_launch[5] = {THREADS, 1, BM, BN, SMEM_BYTES};
// {box k-width (elements), A box rows, B box rows, swizzle bytes}: the grader encodes tmA with a
// BK x BM box and tmB with a BK x BN box (BN / CLUSTER: each block of a cluster loads its part), both
// 128-byte swizzled.
extern "C" __constant__ int mmHopper_tma[4] = {BK, A_BOX, B_BOX, SWIZZLE};

// The grader's CUtensorMap, opaque: 128 bytes, 64-byte aligned.
struct alignas(64) TmaDescriptor {
    unsigned char opaque[128];
};

// ---- mbarriers ---------------------------------------------------------------------------
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Spin until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity)
{
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT;\n"
        "}\n" ::"r"(bar), "r"(parity) : "memory");
}

// ---- TMA -----------------------------------------------------------------------------------
// Copy the box at (c0 = k, c1 = row) of the tensor map into shared memory at dst; the copy
// engine adds the bytes to bar's transaction count when they land.
__device__ __forceinline__ void tma_load(uint32_t dst, const TmaDescriptor* map, int c0, int c1, uint32_t bar)
{
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
        ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar) : "memory");
}

// ---- clusters (TUNE_CLUSTER > 1) ----------------------------------------------------------
// The same box, written at dst in every block of the cluster named in mask, each block's barrier at
// bar's offset getting the bytes that landed in that block.
__device__ __forceinline__ void tma_load_multicast(uint32_t dst, const TmaDescriptor* map, int c0, int c1,
                                                   uint32_t bar, uint16_t mask)
{
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%2, %3}], [%4], %5;\n"
        ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar), "h"(mask) : "memory");
}

// Arrive on the barrier at bar's offset in block `rank` of the cluster (this block's own included).
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar, uint32_t rank)
{
    asm volatile(
        "{\n"
        ".reg .b32 remote;\n"
        "mapa.shared::cluster.u32 remote, %0, %1;\n"
        "mbarrier.arrive.shared::cluster.b64 _, [remote];\n"
        "}\n" ::"r"(bar), "r"(rank) : "memory");
}

// Every thread of every block of the cluster (that has not exited) gets here before any goes on.
__device__ __forceinline__ void cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}

__device__ __forceinline__ uint32_t cluster_reg(int which)
{
    uint32_t v;
    if (which == 0) asm("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(v));
    else if (which == 1) asm("mov.u32 %0, %%clusterid.x;\n" : "=r"(v));
    else if (which == 2) asm("mov.u32 %0, %%clusterid.y;\n" : "=r"(v));
    else if (which == 3) asm("mov.u32 %0, %%nclusterid.x;\n" : "=r"(v));
    else asm("mov.u32 %0, %%nclusterid.y;\n" : "=r"(v));
    return v;
}

// ---- named barriers (TUNE_PINGPONG) -------------------------------------------------------
// Hardware barrier `id` (1..15; 0 is __syncthreads') of the two consumer warpgroups, 256 threads: one
// warpgroup arrives without waiting, the other waits for it.
// (An immediate id: with a register one ptxas reserves all 16 barriers.)
template <int Id>
__device__ __forceinline__ void named_arrive()
{
    asm volatile("bar.arrive %0, 256;\n" ::"n"(Id) : "memory");
}

// Threads = 128: one consumer warpgroup alone (TUNE_STAGED_STORE: ids 3 and 4, one per consumer).
template <int Id, int Threads = 256>
__device__ __forceinline__ void named_sync()
{
    static_assert(Threads % 32 == 0 && Threads <= 1024, "a barrier counts whole warps");
    asm volatile("bar.sync %0, %1;\n" ::"n"(Id), "n"(Threads) : "memory");
}

// ---- WGMMA ---------------------------------------------------------------------------------
// Shared-memory matrix descriptor of a K-major tile in the 128-byte swizzle: start address,
// leading byte offset (unused with this swizzle; 1), stride byte offset 1024 (one group of 8
// rows of 128 bytes), layout 1 = 128-byte swizzle. Addresses are in 16-byte units.
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr)
{
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) |
           ((uint64_t)1 << 62);
}

__device__ __forceinline__ void wgmma_fence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

template <int Pending>
__device__ __forceinline__ void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(Pending) : "memory");
}

// D[64 x 256] (+)= A[64 x 16] * B[256 x 16]^T, both operands K-major in shared memory.
// scale_d = 0 on a tile's first k-step: D is overwritten, so the accumulators need no zeroing.
__device__ __forceinline__ void wgmma_n256(float (&d)[128], uint64_t descA, uint64_t descB, int scale_d)
{
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
        "}, %128, %129, p, 1, 1, 0, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(descA), "l"(descB), "r"(scale_d));
}

// D[64 x 128] (+)= A[64 x 16] * B[128 x 16]^T, both operands K-major in shared memory.
// scale_d = 0 on a tile's first k-step: D is overwritten, so the accumulators need no zeroing.
__device__ __forceinline__ void wgmma_n128(float (&d)[64], uint64_t descA, uint64_t descB, int scale_d)
{
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, %64, %65, p, 1, 1, 0, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(descA), "l"(descB), "r"(scale_d));
}

template <int N>
__device__ __forceinline__ void wgmma(float (&d)[N / 2], uint64_t descA, uint64_t descB, int scale_d);
template <>
__device__ __forceinline__ void wgmma<256>(float (&d)[128], uint64_t descA, uint64_t descB, int scale_d)
{
    wgmma_n256(d, descA, descB, scale_d);
}
template <>
__device__ __forceinline__ void wgmma<128>(float (&d)[64], uint64_t descA, uint64_t descB, int scale_d)
{
    wgmma_n128(d, descA, descB, scale_d);
}

// ---- stream-K (TUNE_STREAMK) ---------------------------------------------------------------
#if TUNE_STREAMK
constexpr int SK_MAX_WORKERS = 160;  // more working blocks: no stream-K share (an sm_90a GPU has at most 132 SMs)
constexpr int PARTIAL_VEC4 = CONSUMERS * 128 * (WG_ROWS / 64) * (BN / 2) / 4;  // float4s of one partial tile
// Working block w's partial tile (its share's first segment, when that does not start the tile) and
// the flag that says it is written: set by w, waited for and cleared by the block that finishes the
// tile, within one launch. Module memory starts zeroed.
__device__ float4 sk_partial[SK_MAX_WORKERS * PARTIAL_VEC4];
__device__ unsigned sk_ready[SK_MAX_WORKERS];

__device__ __forceinline__ void flag_release(unsigned* flag, unsigned value)
{
    asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(flag), "r"(value) : "memory");
}

__device__ __forceinline__ unsigned flag_acquire(const unsigned* flag)
{
    unsigned value;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(value) : "l"(flag) : "memory");
    return value;
}
#endif

// One piece of a block's work: k-steps [k0, k1) of the tile at (m0, n0), read from slot uses u0, ...
// FULL: the whole tile, stored to C. PARTIAL (stream-K): the tile's later k-steps, left in the
// block's sk_partial for the block that started the tile. FINAL (stream-K): the tile's first
// k-steps; blocks `first + 1` .. `last` hold the rest as partials, added before the store.
enum SegmentKind { FULL, PARTIAL, FINAL };
struct Segment {
    int m0, n0, u0, k0, k1;
    bool more;  // this block computes another tile after this one (ping-pong)
    SegmentKind kind;
    int last;  // FINAL: the last block whose share holds part of this tile
};

// ---- the launch order ----------------------------------------------------------------------
// Tile t of the launch order (0, 1, ...) -> (tile row, tile column) of a C of cols x rows tiles.
// group > 0: consecutive tiles take `group` tile rows and walk their columns together, so the A and
// B strips they read are still in L2 when the next tiles need them.
__device__ __forceinline__ void grouped_tile(int t, int cols, int rows, int group, int& tile_m, int& tile_n)
{
    if (group > 0) {
        const int per_group = group * cols;
        const int first = (t / per_group) * group;
        const int height = min(rows - first, group);
        tile_m = first + (t % per_group) % height;
        tile_n = (t % per_group) / height;
    } else {
        tile_m = t / cols;
        tile_n = t % cols;
    }
}

// ---- the kernel ----------------------------------------------------------------------------
#if TUNE_CLUSTER > 1
#if TUNE_SHARE_A
#define CLUSTER_DIMS __cluster_dims__(TUNE_CLUSTER, 1, 1)  // along x: side by side, one tile row, one A
#else
#define CLUSTER_DIMS __cluster_dims__(1, TUNE_CLUSTER, 1)  // along y: N / BM is even, N / BN may be 1
#endif
#else
#define CLUSTER_DIMS
#endif
extern "C" __global__ void CLUSTER_DIMS __launch_bounds__(THREADS, 1)
mmHopper(const __grid_constant__ TmaDescriptor tmA, const __grid_constant__ TmaDescriptor tmB,
         const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ Bt, float* __restrict__ C, int N)
{
    extern __shared__ unsigned char smem_raw[];
    const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
    const uint32_t base = (raw + ALIGN - 1) & ~uint32_t(ALIGN - 1);  // swizzled tiles need 1024-byte alignment
    // Slot s: A tile at base + s * SLOT_BYTES, B tile right after it; the barriers after the ring.
    const uint32_t bars = base + STAGES * SLOT_BYTES;
    auto full = [&](int s) { return bars + 8u * s; };
    auto empty = [&](int s) { return bars + 8u * (STAGES + s); };

    const int wg = threadIdx.x / 128;
#if TUNE_PERSISTENT
    // One working block per SM (or per tile, or per launched block, whichever is fewest: a sanitizer
    // launches a corner of the grid); the others leave before they touch a barrier. Working block b
    // computes tiles b, b + W, b + 2W, ... of the launch order, so the W tiles running at any time
    // are consecutive ones, as the grid's blocks were. With clusters, "block" reads "cluster" and
    // "tile" a column of CLUSTER tiles, block `rank` of the cluster computing the rank-th of them.
    // (A cluster's tile: CLUSTER tiles one above another, or side by side with SHARE_A.)
    const int cols = N / BN / (SHARE_A ? CLUSTER : 1), rows = N / BM / (SHARE_A ? 1 : CLUSTER), tiles = cols * rows;
    unsigned sms = TUNE_WORKERS;
    if (TUNE_WORKERS == 0) asm("mov.u32 %0, %%nsmid;\n" : "=r"(sms));
#if TUNE_CLUSTER > 1
    const int rank = cluster_reg(0);
    const int first_tile = cluster_reg(2) * cluster_reg(3) + cluster_reg(1);
    const int launched = cluster_reg(3) * cluster_reg(4);
#else
    const int rank = 0;
    const int first_tile = blockIdx.y * gridDim.x + blockIdx.x;
    const int launched = gridDim.x * gridDim.y;
#endif
    const int most = min(min((int)sms / CLUSTER, tiles), launched);
    // Balanced rounds: the fewest working blocks that still need no more rounds than `most` would, so
    // no block computes more than one tile more than another (at N = 4096: 128 blocks for 512 tiles,
    // 4 whole rounds either way, each then exactly one group of the launch order: 8 tile rows x 16
    // columns). Stream-K shares out the partial round instead.
    const int rounds = (tiles + most - 1) / most;
    const int workers = TUNE_BALANCE && !STREAMK ? (tiles + rounds - 1) / rounds : most;
    if (first_tile >= workers) return;  // (the whole cluster: its blocks share first_tile)
    const int KT = N / BK;
    // Stream-K: when the tiles are not a whole number of rounds of `workers`, the last, partial
    // round's tiles (plus one whole round, if the partial one would give each block under half a
    // tile: then at most three blocks share a tile) are not given out whole; their k-steps are cut
    // into `workers` equal shares, one per block, after its whole tiles. A tile begun in one
    // block's share and ended in later ones is finished by the block that began it: it waits for
    // the later ones' partial tiles, which are each one's first segment. Only with the whole grid
    // launched (a sanitizer's corner of it is not), since a block spins on others that must run.
    int sk_tiles = 0;
#if TUNE_STREAMK
    if (tiles > workers && tiles % workers != 0 && workers <= SK_MAX_WORKERS && launched >= tiles) {
        sk_tiles = tiles % workers;
        if (2 * sk_tiles < workers) sk_tiles += workers;
    }
#endif
    const int dp_tiles = tiles - sk_tiles;  // a whole number of rounds
    auto sk_begin = [&](int w) { return (int)((long long)w * sk_tiles * KT / workers); };
    auto each_segment = [&](auto&& body) {
        int u0 = 0;
        for (int t = first_tile; t < dp_tiles; t += workers, u0 += KT) {
            int tile_m, tile_n;  // (of a cluster's tile: block `rank` computes the rank-th of its tiles)
            grouped_tile(t, cols, rows, SHARE_A ? GROUP : GROUP / CLUSTER, tile_m, tile_n);
            const int m0 = SHARE_A ? tile_m * BM : (tile_m * CLUSTER + rank) * BM;
            const int n0 = SHARE_A ? (tile_n * CLUSTER + rank) * BN : tile_n * BN;
            body(Segment{m0, n0, u0, 0, KT, t + workers < tiles, FULL, 0});
        }
        for (int s = sk_begin(first_tile), e = sk_begin(first_tile + 1); s < e;) {
            const int tile = s / KT, k0 = s % KT, k1 = min(KT, e - tile * KT);
            int last = first_tile;  // the last block whose share reaches into this tile
            while (last + 1 < workers && sk_begin(last + 1) < (tile + 1) * KT) ++last;
            int tile_m, tile_n;
            grouped_tile(dp_tiles + tile, cols, rows, GROUP, tile_m, tile_n);
            body(Segment{tile_m * BM, tile_n * BN, u0, k0, k1, false, k0 > 0 ? PARTIAL : k1 < KT ? FINAL : FULL, last});
            u0 += k1 - k0;
            s = tile * KT + k1;
        }
    };
#else
    // One tile per block: the grid's blocks in the launch order.
    int tile_m = blockIdx.y, tile_n = blockIdx.x;
    if (GROUP > 0) grouped_tile(blockIdx.y * gridDim.x + blockIdx.x, gridDim.x, gridDim.y, GROUP, tile_m, tile_n);
    const int m0 = tile_m * BM;
    const int n0 = tile_n * BN;
    const int KT = N / BK;
    auto each_segment = [&](auto&& body) { body(Segment{m0, n0, 0, 0, KT, false, FULL, 0}); };
#endif

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full(s), 1);                // the producer's expect_tx; the bytes complete it
            mbar_init(empty(s), CLUSTER * READERS);  // one arrival per consumer warp reading it (of the cluster)
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // visible to the copy engine
    }
#if TUNE_CLUSTER > 1
    cluster_sync();  // every block's barriers are initialised before a peer arrives on them or loads into its ring
#else
    __syncthreads();
#endif
#if TUNE_CLUSTER > 1
    // A slot's B tile lands in every block of the cluster, a part from each: it may be refilled only
    // when the consumers of every block have released it, so each consumer warp arrives on the
    // slot's empty barrier in every block.
    auto release = [&](int s) {
        for (int r = 0; r < CLUSTER; ++r) mbar_arrive_cluster(empty(s), r);
    };
#else
    auto release = [&](int s) { mbar_arrive(empty(s)); };
#endif

    // The ring runs on from one tile into the next: u counts this block's slot uses so far (a tile
    // starts at use u0 = KT x the tiles before it); use u is slot u % STAGES, filled for the
    // (u / STAGES)-th time, so the parity of the phase to wait for is (u / STAGES) & 1. The producer
    // fills the next tile's first slots while the consumers store the current one.
    if (wg == 0) {
        // Producer warpgroup: give registers away, then one thread feeds the ring.
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGS));
        if (threadIdx.x == 0) {
            each_segment([&](const Segment& g) {
                const int m0 = g.m0, n0 = g.n0;
                for (int kt = g.k0; kt < g.k1; ++kt) {
                    const int u = g.u0 + (kt - g.k0);
                    const int s = u % STAGES;
                    // The slot's previous use must be released; the first pass finds every slot free.
                    mbar_wait(empty(s), ((u / STAGES) & 1) ^ 1);
                    mbar_expect_tx(full(s), SLOT_BYTES);
                    const uint32_t a = base + s * SLOT_BYTES;
#if TUNE_CLUSTER > 1
                    if (SHARE_A) {
                        // This block's part of the A tile, into every block's slot s; its own B tile.
                        tma_load_multicast(a + rank * A_BOX * BK * 2, &tmA, kt * BK, m0 + rank * A_BOX, full(s),
                                           (1u << CLUSTER) - 1);
                        tma_load(a + A_SLOT, &tmB, kt * BK, n0, full(s));
                    } else {
                        // Its own A tile; this block's part of the B tile, into every block's slot s.
                        tma_load(a, &tmA, kt * BK, m0, full(s));
                        tma_load_multicast(a + A_SLOT + rank * B_BOX * BK * 2, &tmB, kt * BK, n0 + rank * B_BOX,
                                           full(s), (1u << CLUSTER) - 1);
                    }
#else
                    tma_load(a, &tmA, kt * BK, m0, full(s));
                    tma_load(a + A_SLOT, &tmB, kt * BK, n0, full(s));
#endif
                }
            });
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGS));
        const int cw = wg - 1;
        const int row0 = PINGPONG ? 0 : cw * WG_ROWS;  // this consumer's first row of a tile (ping-pong: all rows)
        float d[WG_ROWS / 64][BN / WGN][WGN / 2];
        each_segment([&](const Segment& g) {
            const int m0 = g.m0, n0 = g.n0, u0 = g.u0;
            const int tile = u0 / KT;  // this block's tile-th tile (ping-pong: every segment is a tile)
            if (PINGPONG) {
                // Ping-pong: consumer cw computes this block's tiles cw, cw + 2, ... Its main loop waits
                // until the other consumer has issued the previous tile's: every earlier use of the ring
                // has then been waited for, so a full barrier is at most one phase behind the use a
                // consumer waits for and the parity cannot alias (that of a use STAGES back). It also
                // gives the tensor cores to one warpgroup at a time while the other stores its tile.
                if (tile % 2 != cw) return;
                if (tile > 0) cw == 0 ? named_sync<1>() : named_sync<2>();  // barrier 1 + cw: my turn
            }
            for (int kt = g.k0; kt < g.k1; ++kt) {
                const int u = u0 + (kt - g.k0);
                const int s = u % STAGES;
                mbar_wait(full(s), (u / STAGES) & 1);
                const uint32_t a = base + s * SLOT_BYTES + row0 * BK * 2;
                const uint32_t b = base + s * SLOT_BYTES + A_SLOT;
                wgmma_fence();  // also orders the previous tile's epilogue reads of d before this overwrite
#pragma unroll
                for (int kk = 0; kk < BK / 16; ++kk) {
#pragma unroll
                    for (int r = 0; r < WG_ROWS / 64; ++r) {
#pragma unroll
                        for (int j = 0; j < BN / WGN; ++j) {
                            // +32 bytes per 16-element k-step inside the swizzled row; +64 rows of A per r,
                            // +WGN rows of B per j.
                            wgmma<WGN>(d[r][j], smem_desc(a + r * 64 * BK * 2 + kk * 32),
                                       smem_desc(b + j * WGN * BK * 2 + kk * 32), (kt > g.k0 || kk > 0) ? 1 : 0);
                        }
                    }
                }
                wgmma_commit();
                wgmma_wait<INFLIGHT>();
                // Use u - INFLIGHT is no longer read by this warp's products: release its slot.
                if (kt - g.k0 >= INFLIGHT) {
                    __syncwarp();
                    if (threadIdx.x % 32 == 0) release((u - INFLIGHT) % STAGES);
                }
            }
            // The other consumer's turn: its next tile, if this block has one (an arrival nobody waits for
            // would be left on the barrier).
            if (PINGPONG && g.more) cw == 0 ? named_arrive<2>() : named_arrive<1>();
            wgmma_wait<0>();
#if TUNE_PERSISTENT
            // The tile's last INFLIGHT uses are read no more either: release them now, before the
            // epilogue, or the producer would wait for them forever on this block's next tile.
            __syncwarp();
            if (threadIdx.x % 32 == 0) {
                const int len = g.k1 - g.k0;
                for (int r = min(INFLIGHT, len); r >= 1; --r) release((u0 + len - r) % STAGES);
            }
#endif
#if TUNE_STREAMK
            // A partial tile goes to this block's sk_partial in the threads' own register order (each
            // float4 store of a warp covers 512 contiguous bytes), then its flag is raised; a FINAL
            // segment adds the later blocks' partials in block order (the same sum at every run).
            const int ct = threadIdx.x - 128;  // 0 .. 255: the consumer threads
            auto partial_at = [&](int block, int r, int j, int i) {
                return &sk_partial[(size_t)block * PARTIAL_VEC4 + ((r * (BN / WGN) + j) * (WGN / 8) + i) * 256 + ct];
            };
            if (g.kind == PARTIAL) {
#pragma unroll
                for (int r = 0; r < WG_ROWS / 64; ++r)
#pragma unroll
                    for (int j = 0; j < BN / WGN; ++j)
#pragma unroll
                        for (int i = 0; i < WGN / 8; ++i)
                            __stcg(partial_at(first_tile, r, j, i),
                                   make_float4(d[r][j][4 * i], d[r][j][4 * i + 1], d[r][j][4 * i + 2], d[r][j][4 * i + 3]));
                __threadfence();
                named_sync<1>();  // every consumer thread's part is written
                if (ct == 0) flag_release(&sk_ready[first_tile], 1);
                return;
            }
            if (g.kind == FINAL) {
                if (ct == 0) {
                    for (int p = first_tile + 1; p <= g.last; ++p) {
                        while (flag_acquire(&sk_ready[p]) == 0) {
                        }
                        sk_ready[p] = 0;  // for the next launch; nobody else reads it in this one
                    }
                }
                named_sync<1>();
                for (int p = first_tile + 1; p <= g.last; ++p) {
#pragma unroll
                    for (int r = 0; r < WG_ROWS / 64; ++r)
#pragma unroll
                        for (int j = 0; j < BN / WGN; ++j)
#pragma unroll
                            for (int i = 0; i < WGN / 8; ++i) {
                                const float4 v = __ldcg(partial_at(p, r, j, i));
                                d[r][j][4 * i] += v.x;
                                d[r][j][4 * i + 1] += v.y;
                                d[r][j][4 * i + 2] += v.z;
                                d[r][j][4 * i + 3] += v.w;
                            }
                }
            }
#endif

            // Epilogue: accumulator element layout of m64nNk16 (PTX ISA, "wgmma D fragments"):
            // thread t of the warpgroup holds, per 8 columns i, rows w*16 + l/4 (+8) and columns
            // 8i + 2(l%4) (+1), with w = warp in the warpgroup, l = lane.
            const int t = threadIdx.x % 128;
            const int colq = 2 * (t % 4);
            if constexpr (STAGED_STORE) {
                // Through this warpgroup's buffer, a 64 x 64 piece at a time: each thread writes its
                // float2 pairs there, then reads back float4s of whole rows, so each warp's store
                // covers two rows' 256 contiguous bytes (4 whole 128-byte lines, against 8 rows'
                // 32 bytes for a float2 store from the fragments). A row's 16-byte units are
                // permuted within each half-row by unit ^ (2 * row % 8): the fragment writes of a
                // half-warp (4 rows) and the row reads of a quarter-warp then hit distinct banks.
                unsigned char* buf = smem_raw + (bars - raw) + EPI_OFFSET + cw * EPI_BYTES;
                auto at = [&](int row, int unit) { return buf + row * (EPI_COLS * 4) + ((unit ^ ((2 * row) & 7)) * 16); };
#pragma unroll
                for (int r = 0; r < WG_ROWS / 64; ++r) {
#pragma unroll
                    for (int j = 0; j < BN / WGN; ++j) {
#pragma unroll
                        for (int c = 0; c < WGN / EPI_COLS; ++c) {
                            const int prow = (t / 32) * 16 + (t % 32) / 4;  // this thread's first row of the piece
#pragma unroll
                            for (int ii = 0; ii < EPI_COLS / 8; ++ii) {
                                const int i = c * (EPI_COLS / 8) + ii;
                                const int unit = (8 * ii + colq) / 4, half = (colq % 4) * 4;
                                *reinterpret_cast<float2*>(at(prow, unit) + half) = make_float2(d[r][j][4 * i], d[r][j][4 * i + 1]);
                                *reinterpret_cast<float2*>(at(prow + 8, unit) + half) =
                                    make_float2(d[r][j][4 * i + 2], d[r][j][4 * i + 3]);
                            }
                            cw == 0 ? named_sync<3, 128>() : named_sync<4, 128>();  // the piece is written
                            const int grow = m0 + row0 + r * 64, gcol = n0 + j * WGN + c * EPI_COLS;
#pragma unroll
                            for (int m = 0; m < EPI_ROWS * EPI_COLS / 4 / 128; ++m) {
                                const int k = t + 128 * m, row = k / (EPI_COLS / 4), unit = k % (EPI_COLS / 4);
                                *reinterpret_cast<float4*>(&C[(size_t)(grow + row) * N + gcol + 4 * unit]) =
                                    *reinterpret_cast<const float4*>(at(row, unit));
                            }
                            cw == 0 ? named_sync<3, 128>() : named_sync<4, 128>();  // read: the next piece may overwrite it
                        }
                    }
                }
            } else {
#pragma unroll
                for (int r = 0; r < WG_ROWS / 64; ++r) {
                    const int row = m0 + row0 + r * 64 + (t / 32) * 16 + (t % 32) / 4;
#pragma unroll
                    for (int j = 0; j < BN / WGN; ++j) {
#pragma unroll
                        for (int i = 0; i < WGN / 8; ++i) {
                            const int col = n0 + j * WGN + i * 8 + colq;
                            *reinterpret_cast<float2*>(&C[(size_t)row * N + col]) =
                                make_float2(d[r][j][4 * i], d[r][j][4 * i + 1]);
                            *reinterpret_cast<float2*>(&C[(size_t)(row + 8) * N + col]) =
                                make_float2(d[r][j][4 * i + 2], d[r][j][4 * i + 3]);
                        }
                    }
                }
            }
        });
    }
#if TUNE_CLUSTER > 1
    // No block leaves while a peer may still arrive on its barriers (its last releases).
    cluster_sync();
#endif
}
