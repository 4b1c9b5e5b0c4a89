"""results.json from a stored grading is the same text, byte for byte, as the one kept beside the fixtures
(tests/fixtures/results/): the records, their codec and the writer may change shape, but what Gradescope reads
for the same grading does not.

To write the kept files again (only for a change meant to change results.json, said in its commit)::

    from tests.test_results_golden import results_text, GOLDEN
    for name in NAMES: (GOLDEN / f"{name}.json").write_text(results_text(name), encoding="utf-8")
"""
from __future__ import annotations

import pytest

from grader.outputs.results import dumps
from grader.outputs.summary import summary_markdown
from grader.outputs.write import results_for
from tests.gradings_helpers import NAMES, ROOT, fixture

GOLDEN = ROOT / "tests" / "fixtures" / "results"


def results_text(name: str) -> str:
    """The results.json text the stored grading ``name`` gives (summary.md without the profile page)."""
    g = fixture(name)
    return dumps(results_for(g, summary_markdown(g)))


@pytest.mark.parametrize("name", NAMES)
def test_a_stored_gradings_results_json_is_the_kept_text_byte_for_byte(name):
    kept = (GOLDEN / f"{name}.json").read_text(encoding="utf-8")
    written = results_text(name)
    assert written.count('"number"') == kept.count('"number"') > 0  # every test of the grading is there
    assert written == kept
