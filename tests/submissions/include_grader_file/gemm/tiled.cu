// Hostile submission (include_grader_file): tries to pull the grader's source (and its contents into the
// compiler's error output); the grader must refuse the #include before compiling and leak nothing.
#include "../../../grader/runner.py"
extern "C" __global__ void mmTiled(const float* A, const float* B, float* C, int N) {}
