"""Shared helpers of the sluice Python tests."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Optional

import pytest

REPO = Path(__file__).resolve().parents[2]

# The tests exercise the installed package (`pip install ./python`), never the source tree:
# `python -m pytest` run from python/ would otherwise import python/sluice without its
# extension module.
_SRC = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or os.curdir).resolve() != _SRC]
MIXED = REPO / "samples" / "mixed.pcap"


def cli_binary() -> Optional[Path]:
    """The `sluice` CLI: $SLUICE_BIN, else a built one in the repo's target dir, else PATH."""
    env = os.environ.get("SLUICE_BIN")
    if env:
        return Path(env).resolve()
    for profile in ("debug", "release"):
        p = REPO / "target" / profile / "sluice"
        if p.is_file():
            return p
    found = shutil.which("sluice")
    return Path(found) if found else None


@pytest.fixture
def cli() -> Path:
    """The CLI binary; the test is skipped without one unless SLUICE_REQUIRE_CLI=1."""
    p = cli_binary()
    if p is None:
        if os.environ.get("SLUICE_REQUIRE_CLI") == "1":
            pytest.fail("SLUICE_REQUIRE_CLI=1 but no sluice binary (set SLUICE_BIN)")
        pytest.skip("no sluice binary built (cargo build -p sluice)")
    return p
