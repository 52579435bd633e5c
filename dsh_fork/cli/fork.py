"""`dsh-fork fork` (to be written)."""
