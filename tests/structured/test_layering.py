"""The structured-output folder sits between the engine and its users: it may
include core/, tokenizer/ and engine/ (the token-constraint hook), never
server/ or cli/; and engine/ never includes structured/ (it sees only
TokenConstraint)."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def includes(folder):
    for path in sorted((ROOT / "src" / folder).rglob("*")):
        if path.suffix in (".h", ".cc", ".cu", ".cuh"):
            for inc in INCLUDE.findall(path.read_text()):
                yield path.relative_to(ROOT), inc


def test_structured_includes_nothing_above_it():
    found = list(includes("structured"))
    assert found, "src/structured/ has no sources"
    bad = [(p, i) for p, i in found if i.split("/")[0] in ("server", "cli")]
    assert not bad, bad


def test_engine_does_not_include_structured():
    bad = [(p, i) for p, i in includes("engine") if i.startswith("structured/")]
    assert not bad, bad
