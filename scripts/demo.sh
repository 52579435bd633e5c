#!/usr/bin/env bash
# The main job on a throw-away demo home: inspect a session, fork it with its subagent tree,
# list the fork's agents, and check the root. Usage: scripts/demo.sh VENV_BIN_DIR
set -euo pipefail
bin=${1:-.venv/bin}
home=$(mktemp -d "${TMPDIR:-/tmp}/dsh-fork-demo.XXXXXX")
export DSH_HOME="$home"
dsh_fork() { printf '\n$ dsh-fork %s\n' "$*"; "$bin/dsh-fork" "$@"; }

printf '\n$ dsh-fork fixture %s --sessions 1 --agents 3 --depth 2 --turns 3 --seed 42\n' "$home/sessions"
summary=$("$bin/dsh-fork" fixture "$home/sessions" --sessions 1 --agents 3 --depth 2 --turns 3 --seed 42)
printf '%s\n' "$summary"
source_id=$(printf '%s\n' "$summary" | awk '/^top-level session/ {print $3; exit}')

dsh_fork inspect "$source_id"
dsh_fork fork "$source_id" --id demo-fork
dsh_fork list-agents demo-fork --recursive
dsh_fork doctor
printf '\nDemo home: %s (DSH_HOME); operation log: %s/dsh-fork-relink.log\n' "$home" "$home"
