// Hostile submission (include_absolute): includes an absolute path (a solution on the grading machine);
// the grader must refuse the #include before compiling.
#include "/autograder/source/solutions/gemm/tiled.cu"
