"""`dsh-fork inspect` (to be written)."""
