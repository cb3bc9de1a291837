# Sourced by the setup scripts: one line per step on the terminal, everything else into a log.
#
#   . scripts/steps.sh LOGFILE PREFIX
#   step "installing packages"      # prints "PREFIX installing packages"
#   say "anything for the terminal" # prints as is
#   result "a line for stdout"      # the script's machine-readable output (e.g. a URL)
#
# After sourcing, stdout and stderr go to LOGFILE (truncated); the terminal's stderr and stdout
# stay reachable as fds 3 and 4. On a failing exit the last lines of the log and its path are
# printed. Background servers must be started with `3>&- 4>&-` so that they do not hold the
# caller's pipes open.
STEP_LOG="$1"
STEP_PREFIX="${2:-}"
mkdir -p "$(dirname "$STEP_LOG")"
: >"$STEP_LOG"
exec 3>&2 4>&1 >>"$STEP_LOG" 2>&1

say() { printf '%s\n' "$*" >&3; }
step() {
	printf '%s\n' "== $*" # a marker in the log, to find a step's output
	say "$STEP_PREFIX$*"
}
result() { printf '%s\n' "$*" >&4; }
_steps_on_exit() {
	local status=$?
	if ((status != 0)); then
		say "${STEP_PREFIX}FAILED (exit $status); the last lines of $STEP_LOG:"
		tail -n 25 "$STEP_LOG" | sed 's/^/    /' >&3
		say "${STEP_PREFIX}full log: $STEP_LOG"
	fi
	return "$status"
}
trap _steps_on_exit EXIT
