"""dsh-fork: offline fork, subagent relink and inspection of DSH session logs."""

__version__ = "0.1.0"
