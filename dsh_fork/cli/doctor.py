"""`dsh-fork doctor` (to be written)."""
