"""``python -m dsh_fork`` runs the command line."""

from dsh_fork.cli.app import main

if __name__ == "__main__":
    main()
