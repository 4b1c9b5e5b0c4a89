// Hostile submission (device_side_launch): tries to hand the work to a child kernel launched from the device
// into a fire-and-forget stream, outside the grader's timing. Dynamic parallelism needs relocatable device
// code, which the grader does not build: the stage must fail to compile, with nvcc's message.
constexpr int TILE = 32;
extern "C" __constant__ int mmNaive_launch[5] = {TILE, TILE, TILE, TILE, 0};
__global__ void worker(const float* A, const float* B, float* C, int N) {}
extern "C" __global__ void mmNaive(const float* A, const float* B, float* C, int N)
{
    if (threadIdx.x == 0 && threadIdx.y == 0 && blockIdx.x == 0 && blockIdx.y == 0)
        worker<<<1, 1, 0, cudaStreamFireAndForget>>>(A, B, C, N);
}
