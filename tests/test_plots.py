"""grader/outputs/plots.py: the ladder and roofline PNGs from the H200 fixture and measured timings."""
import builtins
from pathlib import Path

import pytest

from grader.outputs import plots
from grader.profile.ncu import parse_raw_csv

ROOT = Path(__file__).resolve().parent.parent
TABLE = parse_raw_csv((ROOT / "tests/fixtures/ncu/ncu2025.3.1_raw_solutions_h200_n2048.csv").read_text())
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# Measured on an H200 at N = 4096 (ms): the six reference stages, cuBLAS SGEMM, cublasGemmEx.
MS = {"1 Naive": 275.7, "2 Coalesced": 21.8, "3 Tiled": 15.34, "4a 1D": 6.17, "4b 2D": 2.855, "5 WMMA": 0.505}


def tflops(ms: float, n: int = 4096) -> float:
    return 2 * n**3 / (ms * 1e-3) / 1e12


def ladder_rows():
    return [{"label": k, "tflops": tflops(v), "ceiling": "fp16_tensor" if k.startswith("5") else "fp32"}
            for k, v in MS.items()]


def test_roofline_points_from_ncu_metrics():
    pts = plots.roofline_points({k: TABLE[k] for k in TABLE}, 2048)
    assert [p["label"] for p in pts] == list(TABLE)
    naive, twod = pts[0], pts[4]
    assert naive["flops"] == 2 * 2048.0**3 and naive["l2_bytes"] == 2_309_922_592.0
    assert naive["seconds"] == pytest.approx(35.311392e-3)
    assert naive["dram_bytes"] == 33_901_312.0  # the fixture has no write counter
    # L2 intensity grows along the ladder; DRAM intensity stays ~500 FLOP/B (the L2 holds the matrices).
    l2_ai = [p["flops"] / p["l2_bytes"] for p in pts]
    assert l2_ai == sorted(l2_ai) and l2_ai[4] == pytest.approx(32.6, rel=0.01)
    assert twod["flops"] / twod["dram_bytes"] == pytest.approx(512, rel=0.01)


def test_roofline_points_skip_stages_without_the_metrics():
    assert plots.roofline_points({"x": {"lts__t_bytes.sum": 10.0}, "y": None}, 2048) == []
    pt = plots.roofline_points({"z": {"lts__t_bytes.sum": 8.0, "gpu__time_duration.sum": 1e6,
                                      "dram__bytes_read.sum": 2.0, "dram__bytes_write.sum": 2.0}}, 2)[0]
    assert pt["dram_bytes"] == 4.0 and pt["seconds"] == 1e-3


def test_ladder_png(tmp_path):
    pytest.importorskip("matplotlib")
    rows = ladder_rows()
    rows[2]["tflops"] = None  # a stage that was not timed is labelled, not drawn
    path, why = plots.ladder_png(rows, tmp_path / "ladder.png",
                                 [{"label": "cuBLAS SGEMM", "tflops": tflops(2.68)},
                                  {"label": "cublasGemmEx (FP16)", "tflops": tflops(0.187)}],
                                 {"FP32 CUDA cores": 66.9, "FP16 Tensor Cores": 989.0})
    assert why == "" and path == str(tmp_path / "ladder.png")
    data = Path(path).read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 20_000


def test_roofline_png(tmp_path):
    pytest.importorskip("matplotlib")
    pts = plots.roofline_points({k: TABLE[k] for k in TABLE}, 2048)
    path, why = plots.roofline_png(pts, {"FP32": 66.9, "FP16 Tensor": 989.0}, 4.8, tmp_path / "roof.png")
    assert why == "" and Path(path).read_bytes().startswith(PNG_MAGIC)


def test_roofline_without_points_says_why(tmp_path):
    pytest.importorskip("matplotlib")
    assert plots.roofline_png([], {"FP32": 66.9}, 4.8, tmp_path / "r.png")[0] is None


def test_without_matplotlib_the_plots_are_skipped_with_a_reason(tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError("no matplotlib")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    path, why = plots.ladder_png(ladder_rows(), tmp_path / "l.png")
    assert path is None and "matplotlib is not installed" in why
    assert plots.roofline_png([{"label": "x"}], {}, 4.8, tmp_path / "r.png")[0] is None
    assert not (tmp_path / "l.png").exists()


def test_a_failing_plot_returns_a_reason_instead_of_raising(tmp_path):
    pytest.importorskip("matplotlib")
    path, why = plots.roofline_png([{"label": "bad", "flops": 1.0, "seconds": 1.0, "l2_bytes": 0.0}],
                                   {"FP32": 66.9}, 4.8, tmp_path / "r.png")
    assert path is None and why.startswith("the roofline plot failed: ZeroDivisionError")


def test_a_histogram_of_the_same_numbers_by_the_same_grader_is_not_drawn_again(tmp_path, monkeypatch):
    """A batch run again over its own output folder: the class's scores unchanged, its picture is kept as it is
    (matplotlib not even imported for it); other scores, or another grader, draw it again."""
    pytest.importorskip("matplotlib")
    png = tmp_path / "scores.png"
    scores = {"under the rubric": [3.0, 7.5, 10.0]}
    assert plots.score_histogram_png(scores, 10.0, png, "the class") == (str(png), "")
    drawn = png.read_bytes()
    assert plots.png_text(png, plots.INPUTS_KEY)  # the picture says what it was drawn from

    def no_drawing():
        raise AssertionError("drawn again")

    with monkeypatch.context() as m:
        m.setattr(plots, "pyplot", no_drawing)
        assert plots.score_histogram_png(scores, 10.0, png, "the class") == (str(png), "")
    assert png.read_bytes() == drawn

    other = {"under the rubric": [3.0, 7.5, 9.0]}
    assert plots.score_histogram_png(other, 10.0, png, "the class")[1] == ""
    assert png.read_bytes() != drawn
    redrawn = png.read_bytes()
    import grader

    monkeypatch.setattr(grader, "code_version", lambda: "another grader")
    calls = []
    real = plots.pyplot
    monkeypatch.setattr(plots, "pyplot", lambda: calls.append(1) or real())
    assert plots.score_histogram_png(other, 10.0, png, "the class")[1] == "" and calls == [1]
    assert png.read_bytes() != redrawn  # the same picture, now marked with the other grader's digest


def test_png_text_reads_only_a_small_text_chunk_before_the_image(tmp_path):
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    head = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", b"\0" * 13)
    cases = {
        "found": (head + chunk(b"tEXt", b"grader-inputs\0abc") + chunk(b"IEND", b""), "abc"),
        "after the image": (head + chunk(b"IDAT", b"x") + chunk(b"tEXt", b"grader-inputs\0abc"), None),
        "another key": (head + chunk(b"tEXt", b"Software\0matplotlib"), None),
        "not a png": (b"GIF89a" + b"\0" * 40, None),
        "truncated": (head + chunk(b"tEXt", b"grader-inputs\0abc")[:10], None),
        "a huge chunk": (head + struct.pack(">I", 1 << 30) + b"tEXt", None),
    }
    for name, (data, want) in cases.items():
        (tmp_path / name).write_bytes(data)
        assert plots.png_text(tmp_path / name, "grader-inputs") == want, name
    assert plots.png_text(tmp_path / "missing.png", "grader-inputs") is None
