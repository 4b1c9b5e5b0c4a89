"""The correctness test: |c - r| <= rtol * (|r| + rms(r)); NaN never passes."""
import numpy as np

from grader.children.inputs import make_inputs
from grader.children.numerics import compare


def _ref(a, b):
    return a.astype(np.float64) @ b.astype(np.float64)


def test_fp32_product_passes_and_reports_small_error():
    a, b = make_inputs(128, 7, "fp32")
    cmp = compare((a @ b).astype(np.float32), _ref(a, b), 1e-3, np)
    assert cmp.passed and cmp.max_scaled_err < 1e-5 and cmp.bad_count == 0


def test_nan_and_wrong_element_are_found_with_coordinates():
    a, b = make_inputs(64, 1, "fp32")
    c = (a @ b).astype(np.float32)
    c[3, 9] += 5.0
    c[10, 2] = np.nan
    cmp = compare(c, _ref(a, b), 1e-3, np)
    assert not cmp.passed
    assert cmp.bad_count == 2 and cmp.nonfinite_count == 1
    assert cmp.first_bad == (3, 9)  # row-major first
    assert "C[3][9]" in cmp.describe() and "NaN" in cmp.describe()


def test_all_nan_output_never_passes():
    a, b = make_inputs(32, 1, "fp32")
    cmp = compare(np.full((32, 32), np.nan, np.float32), _ref(a, b), 1.0, np)
    assert not cmp.passed and cmp.nonfinite_count == 32 * 32


def test_transposed_result_fails():
    a, b = make_inputs(64, 3, "fp32")
    c = (a.T @ b).astype(np.float32)
    assert not compare(c, _ref(a, b), 1e-3, np).passed


def test_fp16_inputs_with_fp32_accumulation_pass_the_wmma_tolerance():
    a, b = make_inputs(256, 5, "fp16")
    good = a.astype(np.float32) @ b.astype(np.float32)
    assert compare(good, _ref(a, b), 2e-2, np).passed


def test_fp16_rounding_hides_inside_the_fp32_tolerance_so_sass_must_catch_it():
    # Why the FP32 stages also carry a SASS item: FP32 inputs rounded to FP16 (as TF32 or
    # FP16 tensor-core code does) land right at rtol 1e-3 -- some inputs pass, some fail by
    # one element -- although their error is over 100x that of a true FP32 kernel.
    a, b = make_inputs(256, 5, "fp32")
    ref = _ref(a, b)
    true_fp32 = compare((a @ b).astype(np.float32), ref, 1e-3, np)
    rounded = compare(a.astype(np.float16).astype(np.float32) @ b.astype(np.float16).astype(np.float32),
                      ref, 1e-3, np)
    assert true_fp32.max_scaled_err < 1e-5
    assert rounded.max_scaled_err > 100 * true_fp32.max_scaled_err
    assert 1e-4 < rounded.max_scaled_err < 1e-2  # within an order of magnitude of the tolerance


def test_inputs_are_deterministic_and_never_zero():
    a1, b1 = make_inputs(64, 42, "fp32")
    a2, b2 = make_inputs(64, 42, "fp32")
    assert np.array_equal(a1, a2) and np.array_equal(b1, b2)
    assert np.count_nonzero(a1) == a1.size and a1.min() >= -1 and a1.max() < 1
    assert not np.array_equal(make_inputs(64, 43, "fp32")[0], a1)
    assert make_inputs(16, 1, "fp16")[0].dtype == np.float16
