"""The command line as subprocess tests run it: with the fault seam's environment plan on.

``python tests/cli_launcher.py ARGS`` is ``dsh-fork ARGS`` except that ``DSH_FORK_FAULT``
is honoured; the installed command ignores that variable.
"""

from __future__ import annotations

import sys
from pathlib import Path

from dsh_fork import faults
from dsh_fork.cli.app import main

LAUNCHER = Path(__file__).resolve()


def argv(*args: str) -> list[str]:
    """The argv of a subprocess that runs the CLI with ``args`` under the test seam."""
    return [sys.executable, str(LAUNCHER), *args]


if __name__ == "__main__":
    faults.enable_env()
    main()
