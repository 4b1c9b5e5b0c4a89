"""A load for docs/measurements/scripts/ncu_cost.py: one kernel using shared memory, run under compute-sanitizer racecheck."""
import cupy as cp

SOURCE = r'''extern "C" __global__ void k(float* x) {
    __shared__ float s[256];
    s[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    x[threadIdx.x] = s[255 - threadIdx.x];
}'''
x = cp.ones(256, cp.float32)
cp.RawKernel(SOURCE, "k")((1,), (256,), (x,))
cp.cuda.Device().synchronize()
