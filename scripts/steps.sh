# Sourced by the setup scripts: one line per step on the terminal, everything else into a log.
#
#   . scripts/steps.sh LOGFILE PREFIX
#   step "installing packages"      # prints "PREFIX installing packages"
#   say "anything for the terminal" # prints as is
#   result "a line for stdout"      # the script's machine-readable output (e.g. a URL)
#   timed pip install ...           # a long command: while it runs, a line every 15 s with its
#                                   # time so far and the log's last line, then its total time
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
timed() {
	local started=$SECONDS status=0 ticker
	( # the ticker: its sleep holds none of the caller's pipes (a $(...) waiting for EOF)
		while sleep "${STEP_TICK:-15}" 3>&-; do
			say "$STEP_PREFIX  ... $((SECONDS - started)) s: $(tail -n 1 "$STEP_LOG" | cut -c1-90)"
		done
	) 4>&- &
	ticker=$!
	"$@" || status=$?
	kill "$ticker" 2>/dev/null || true
	wait "$ticker" 2>/dev/null || true
	((status != 0)) || say "$STEP_PREFIX  done in $((SECONDS - started)) s"
	return "$status"
}
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
