"""The static check that every CUDA runtime call in host code is checked."""
from __future__ import annotations

from pathlib import Path

from grader.occupancy.hostcheck import check_host_source, strip_code

ROOT = Path(__file__).resolve().parent.parent

STUDENT = r'''#include <cstdio>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
    printf("%s\n", cudaGetErrorString(e)); return 1; } } while (0)

/* Old version: cudaMalloc(&d, bytes); without a check */
__global__ void scale(float* p, int n) { if (threadIdx.x < n) p[threadIdx.x] *= 2.0f; }

template <int B> __global__ void tiled(float* p) {}

static cudaError_t alloc(float** p, size_t bytes) {
    return cudaMalloc(p, bytes);
}

int main() {
    float* d = nullptr;
    const char* msg = "call cudaFree(d) at the end";   // not a call
    CHECK(cudaSetDevice(0));
    cudaError_t err = alloc(&d, 1024);
    err = cudaMemset(d, 0, 1024);
    if (cudaDeviceSynchronize() != cudaSuccess) return 1;
    cudaEvent_t start;
    cudaEventCreate(&start);                              // line 24: unchecked
    scale<<<1, 256>>>(d, 256);
    CHECK(cudaGetLastError());
    tiled<32><<<4, 32>>>(d);
    cudaDeviceSynchronize();                              // line 28: unchecked
    scale<<<1, 256>>>(d, 256);                            // line 29: unchecked launch
    printf("%s\n", cudaGetErrorString(cudaGetLastError()));  // line 30: unchecked
    checkCudaErrors(cudaEventDestroy(start));
    switch (cudaStreamQuery(0)) { default: break; }
    int blocks = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, scale, 32,
                                                        12 * 1024));
    for (int i = 0; i < 3; ++i)
        scale<<<1, 32>>>(d, 32);
    if (cudaPeekAtLastError() != cudaSuccess) return 1;
    cudaFree(d);                                          // line 39: unchecked
    return 0;
}
'''


def test_reports_exactly_the_unchecked_calls_and_launches_by_line():
    report = check_host_source(STUDENT, macros=("CHECK",))
    got = [(u.line, u.kind, u.name) for u in report.unchecked]
    assert got == [(24, "call", "cudaEventCreate"), (27, "launch", "tiled"),
                   (28, "call", "cudaDeviceSynchronize"), (29, "launch", "scale"),
                   (30, "call", "cudaGetLastError"), (39, "call", "cudaFree")]
    assert report.launches == 4
    assert not report.ok
    assert "line 24: cudaEventCreate(...) is not checked" in report.summary()
    assert "cudaFree" in report.names and "cudaMalloc" in report.names


def test_comments_strings_and_macro_bodies_are_not_calls():
    report = check_host_source(STUDENT, macros=("CHECK",))
    assert all(u.line not in (4, 7, 18) for u in report.unchecked)
    stripped = strip_code(STUDENT)
    assert stripped.count("\n") == STUDENT.count("\n")
    assert "cudaFree(d) at the end" not in stripped
    assert "Old version" not in stripped and "#define" not in stripped


def test_a_launch_followed_by_a_checked_last_error_is_fine():
    src = "void f(float* p) {\n  k<<<1, 32>>>(p);\n  CUDA_CHECK(cudaGetLastError());\n}\n"
    assert check_host_source(src).ok
    src2 = ("void f(float* p) {\n  k<<<1, 32>>>(p);\n  k2<<<1, 32>>>(p);\n"
            "  CUDA_CHECK(cudaGetLastError());\n}\n")
    bad = check_host_source(src2)
    assert [(u.line, u.name) for u in bad.unchecked] == [(2, "k")]


def test_configured_macro_names_and_exemptions():
    src = "int main() { MY_GUARD(cudaFree(0)); cudaGetErrorName(cudaSuccess); }\n"
    assert not check_host_source(src).ok  # MY_GUARD is not known by default
    assert check_host_source(src, macros=("MY_GUARD",)).ok


def test_solution_program_is_fully_checked_and_starter_has_no_unchecked_calls():
    sol = check_host_source((ROOT / "solutions/occupancy/occ.cu").read_text())
    assert sol.ok and sol.launches == 2 and sol.calls > 15
    assert {"cudaOccupancyMaxActiveBlocksPerMultiprocessor", "cudaOccupancyMaxPotentialBlockSize",
            "cudaEventElapsedTime", "cudaGetDeviceProperties"} <= sol.names
    starter = check_host_source((ROOT / "starter/occupancy/occ.cu").read_text())
    assert starter.ok and "cudaOccupancyMaxActiveBlocksPerMultiprocessor" not in starter.names
