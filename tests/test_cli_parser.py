"""The command line's parser (grader/cli.py: build_parser)."""


def test_the_grade_commands_own_parser_is_the_full_parsers_grade():
    """python -m grader grade builds only its own parser (no service, batch or kit import): the same
    arguments, defaults and help as the grade command of the full parser."""
    import contextlib
    import io

    from grader.cli import build_parser

    argv = ["grade", "solutions", "--out", "o", "--stages", "naive", "--no-gpu", "--gpu-lock", "l", "--quiet"]
    full, alone = build_parser().parse_args(argv), build_parser("grade").parse_args(argv)
    assert vars(full) == vars(alone)

    def help_of(parser) -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            parser.parse_args(["grade", "--help"])
        return out.getvalue()

    assert help_of(build_parser("grade")) == help_of(build_parser()) != ""
