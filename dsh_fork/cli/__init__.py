"""The command line: typer and rich live here and nowhere else."""
