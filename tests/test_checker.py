"""The trusted checker on saved outputs (NumPy backend: no GPU needed)."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from grader.children import check as check_child
from grader.children.inputs import fresh_input_seed, fresh_vector_seed, integrity_vector, make_inputs_xp
from grader.evidence.protocol import CheckSpec, Expect
from grader.records import RecordError, from_jsonable, to_jsonable

ROOT = Path(__file__).resolve().parent.parent
N = 128


def _check(spec: dict, **kw) -> dict:
    """The checker on the spec ``spec`` (its JSON form), its verdicts in their JSON form."""
    return to_jsonable(check_child.check(from_jsonable(CheckSpec, spec), **kw))


def _timed_run(tmp_path: Path, replay_from: int | None = None, launches: int = 5, stages: int = 1):
    """Write what the runner writes after timing; replay_from: launch after which the kernel replays.
    Each timed launch has its own inputs and its fingerprint its own vector, each from a fresh seed."""
    cases = []
    for s in range(stages):
        prints, kept, seeds = [], None, [fresh_vector_seed() for _ in range(launches)]
        inputs = [fresh_input_seed() for _ in range(launches)]
        for r in range(launches):
            a, b = make_inputs_xp(np, N, inputs[r], "fp32")
            c = (a @ b).astype(np.float32)
            if replay_from is not None and r >= replay_from:
                c = kept  # a kernel that stopped computing and returns an earlier result
            kept = c if kept is None or replay_from is None or r < replay_from else kept
            prints.append(c @ integrity_vector(N, seeds[r]))
        out = tmp_path / f"stage{s}"
        out.mkdir(exist_ok=True)
        np.save(out / "fingerprints.npy", np.stack(prints))
        np.save(out / "c_bench.npy", c)
        case = {"n": N, "seed": inputs[-1], "file": "c_bench.npy", "kind": "bench",
                "fingerprints": {"file": "fingerprints.npy", "count": launches, "input_seeds": inputs,
                                 "vector_seeds": seeds}}
        cases.append({"id": "tiled" if s == 0 else f"tiled{s}", "inputs": "fp32", "rtol": 1e-3, "out_dir": str(out),
                      "cases": [case]})
    return {"stages": cases}


def test_honest_timed_launches_pass(tmp_path):
    cases = _check(_timed_run(tmp_path))["tiled"]["cases"]
    assert [c["kind"] for c in cases] == ["bench", "timed"]
    assert all(c["passed"] for c in cases)
    assert "all 5 timed launches" in cases[1]["description"]


def test_replaying_an_earlier_result_is_caught(tmp_path):
    cases = _check(_timed_run(tmp_path, replay_from=2))["tiled"]["cases"]
    timed = cases[1]
    assert not timed["passed"] and "timed launch 3, 4, 5 of 5" in timed["problem"]
    # the saved final output is the replayed (stale) one: wrong for the last launch's inputs
    assert not cases[0]["passed"]


def test_missing_output_is_reported_not_raised(tmp_path):
    spec = {"stages": [{"id": "naive", "inputs": "fp32", "rtol": 1e-3, "out_dir": str(tmp_path),
                        "cases": [{"n": N, "seed": 1, "file": "c_512.npy", "kind": "check"}]}]}
    case = _check(spec)["naive"]["cases"][0]
    assert not case["passed"] and "no output was saved" in case["problem"]


def test_wrong_shape_output(tmp_path):
    np.save(tmp_path / "c.npy", np.zeros((N, N + 1), np.float32))
    spec = {"stages": [{"id": "naive", "inputs": "fp32", "rtol": 1e-3, "out_dir": str(tmp_path),
                        "cases": [{"n": N, "seed": 1, "file": "c.npy", "kind": "check"}]}]}
    assert "shape" in _check(spec)["naive"]["cases"][0]["problem"]


def test_checker_process_writes_verdicts(tmp_path):
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(_timed_run(tmp_path)))
    out = tmp_path / "verdicts.json"
    proc = subprocess.run([sys.executable, "-m", "grader.children", "check", str(spec_path), str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    written = json.loads(out.read_text())
    assert written["verdicts"]["tiled"]["cases"][1]["passed"] is True
    assert set(written["times"]) >= {"start", "load", "references", "compare", "fingerprints"}


def test_precomputed_references_give_the_same_verdicts_and_are_reused(tmp_path):
    """Products.precompute (the checker's work while the stages still run) changes no verdict: an honest
    run and a replaying one judge the same with and without it, the foreseen references are not
    computed again, and an unforeseen one (a benchmark's last launch: its seed is drawn then) still is."""
    from grader.children.check import Products

    for replay in (None, 2):
        spec = _timed_run(tmp_path, replay_from=replay)
        plain = _check(spec)
        products = Products(np)
        products.precompute(Expect(references=[(N, 1, "fp32")]))  # a correctness size's
        foreseen = dict(products.refs)
        assert _check(spec, products=products) == plain
        assert all(products.refs[k] is v for k, v in foreseen.items())
    short = _timed_run(tmp_path, launches=3)
    assert all(c["passed"] for c in _check(short, products=products)["tiled"]["cases"])
    last = short["stages"][0]["cases"][0]["seed"]
    assert (N, 1, "fp32") in products.refs and (N, last, "fp32") in products.refs


def test_fingerprints_need_each_launchs_own_inputs_and_vector_and_each_launch_is_drawn_once(tmp_path, monkeypatch):
    """Each fingerprint is checked against its own launch's inputs' seed and its own vector's seed, both
    reported by the stage child after the launch: a wrong or missing seed fails the timed launches; the
    checker draws each launch's inputs once (and the last launch's again for its full reference)."""
    from grader.children import check as check_module
    spec = _timed_run(tmp_path, stages=3)
    drawn: list[int] = []
    made = check_module.make_inputs_xp
    monkeypatch.setattr(check_module, "make_inputs_xp", lambda xp, n, seed, kind: (drawn.append(seed), made(xp, n, seed, kind))[1])
    verdicts = _check(spec)
    assert all(c["passed"] for v in verdicts.values() for c in v["cases"])
    launches = [s for st in spec["stages"] for s in st["cases"][0]["fingerprints"]["input_seeds"]]
    assert sorted(drawn) == sorted(launches + [st["cases"][0]["seed"] for st in spec["stages"]])
    fp = spec["stages"][0]["cases"][0]["fingerprints"]
    kept = list(fp["input_seeds"])
    fp["input_seeds"] = kept[:3] + [kept[4], kept[3]]  # launches 4 and 5 credited with each other's inputs
    timed = _check(spec)["tiled"]["cases"][1]
    assert not timed["passed"] and "timed launch 4, 5 of 5 was wrong" in timed["problem"]
    for bad in (kept[:4], [2**31] * 5, [-1] * 5):
        fp["input_seeds"] = bad
        timed = _check(spec)["tiled"]["cases"][1]
        assert not timed["passed"] and "timed launches' inputs are missing or malformed" in timed["problem"], bad
    fp["input_seeds"] = kept
    fp = spec["stages"][1]["cases"][0]["fingerprints"]
    fp["vector_seeds"] = fp["vector_seeds"][:1] + spec["stages"][2]["cases"][0]["fingerprints"]["vector_seeds"][1:]
    timed = _check(spec)["tiled1"]["cases"][1]
    assert not timed["passed"] and "timed launch 2, 3, 4, 5 of 5 was wrong" in timed["problem"]
    for bad in (None, ["x"] * 5):  # not a list of integers: not a check request at all
        fp["vector_seeds"] = bad
        with pytest.raises(RecordError, match="vector_seeds"):
            from_jsonable(CheckSpec, spec)
    for bad in ([1, 2], [-1] * 5, [True] * 5):
        fp["vector_seeds"] = bad
        timed = _check(spec)["tiled1"]["cases"][1]
        assert not timed["passed"] and "fingerprint vectors are missing or malformed" in timed["problem"], bad
