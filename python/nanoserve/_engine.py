"""Finds the compiled half (_nanoserve): inside the installed package, or, from
a source checkout, in the build tree ($NANOSERVE_BUILD_DIR, else build/)."""
import importlib
import os
import sys

_module = None


def module():
    global _module
    if _module is None:
        try:
            _module = importlib.import_module("nanoserve._nanoserve")
        except ImportError:
            here = os.path.dirname(os.path.abspath(__file__))
            build = os.environ.get("NANOSERVE_BUILD_DIR") or os.path.join(here, "..", "..", "build")
            if os.path.isdir(build) and build not in sys.path:
                sys.path.insert(0, build)
            try:
                _module = importlib.import_module("_nanoserve")
            except ImportError as e:
                raise ImportError("nanoserve's compiled module (_nanoserve) was not found: `pip install .` "
                                  "from the repository, or build it with scripts/build") from e
    return _module
