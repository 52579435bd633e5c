"""`dsh-fork list-agents` (to be written)."""
