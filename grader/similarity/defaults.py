"""The similarity report's defaults, apart from the report: the command line's parser reads them, and building
it must not import copydetect (an optional extra), or every ``python -m grader`` command that builds the whole
parser would fail where the extra is not installed."""
DEFAULT_TOP = 15  # pairs per stage shown with their fragments in the .md and .html
DEFAULT_FLAG_AT = 0.5  # a reference match at or above this combined score is listed (--flag-at)
