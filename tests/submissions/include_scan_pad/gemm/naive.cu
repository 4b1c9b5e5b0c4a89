// Submission (include_scan_pad): a correct naive stage beside an unused 1 MB header of `#import<>` lines.
// The first-pass #include scan once counted lines from the start of the file for every directive
// (quadratic: 20 s a file a stage); now linear, the stage compiles.
extern "C" __constant__ int mmNaive_launch[5] = {32, 32, 32, 32, 0};
extern "C" __global__ void mmNaive(const float* A, const float* B, float* C, int N)
{
    const int row = blockIdx.y * 32 + threadIdx.y, col = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.0f;
    for (int k = 0; k < N; ++k) acc += A[row * N + k] * B[k * N + col];
    C[row * N + col] = acc;
}
