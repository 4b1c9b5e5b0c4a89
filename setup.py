"""Build hook: the wheel carries rubric.yaml as package data (grader/data/rubric.yaml).

rubric.yaml stays at the repository's top (the stage table instructors edit); a non-editable
install (`pip install .`) must still grade with it, and setuptools' package-data can only name
files inside the package, so the build copies it in. grader.DEFAULT_RUBRIC finds the copy when
the package runs outside a checkout. Everything else is in pyproject.toml.
"""
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithRubric(build_py):
    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "grader" / "data"
        target.mkdir(parents=True, exist_ok=True)
        self.copy_file(str(Path(__file__).resolve().parent / "rubric.yaml"), str(target / "rubric.yaml"))
        # The per-GPU calibration entries beside it (grader/rubric/calibration.py reads calibration/ beside the rubric).
        for entry in sorted((Path(__file__).resolve().parent / "calibration").glob("*.yaml")):
            (target / "calibration").mkdir(exist_ok=True)
            self.copy_file(str(entry), str(target / "calibration" / entry.name))


setup(cmdclass={"build_py": BuildPyWithRubric})
