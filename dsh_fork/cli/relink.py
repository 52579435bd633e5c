"""`dsh-fork relink` (to be written)."""
