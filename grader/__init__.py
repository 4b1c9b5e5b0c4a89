
from pathlib import Path as _Path

# Where the package lives, and the checkout (or installed tree) around it. Every module that needs
# a path outside its own folder derives it from these two, never from its own depth.
PACKAGE_DIR = _Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent
