// Hostile header (occ_include_via_header): looks like configuration, includes a file outside the submission.
#pragma once
#include "/tmp/gemm-grader-attack-secret.h"
