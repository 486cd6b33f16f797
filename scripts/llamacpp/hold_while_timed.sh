#!/usr/bin/env bash
# Keep a long side-by-side benchmark's timed runs alone on a small machine
# while other work goes on during its untimed depth fills (llama-bench's
# fill of 32768 cells took 47 minutes on 2 Zen 4 cores). With autogroup
# scheduling (/proc/sys/kernel/sched_autogroup_enabled = 1) `nice` does not
# keep another terminal's compile off the benchmark's cores; this stops it.
#
#   scripts/llamacpp/hold_while_timed.sh job CMD...   run CMD in a session of
#       its own, registered in $HOLD_DIR (default /tmp/hold-jobs)
#   scripts/llamacpp/hold_while_timed.sh watch LOG PID
#       while PID lives: whenever the last "benchmark" line of LOG (the
#       stderr of `llama-bench --progress` or `tandem bench --progress`)
#       names a timed run (prompt or generation run, a cached fill, a
#       warm-up generation), every registered job is stopped (SIGSTOP);
#       otherwise they run. Each change is appended to LOG.watch.
#
# Example: llama-bench ... --progress 2> lb.err & p=$!;
#   scripts/llamacpp/hold_while_timed.sh watch lb.err $p &
#   scripts/llamacpp/hold_while_timed.sh job ninja -C build
set -uo pipefail
HOLD_DIR=${HOLD_DIR:-/tmp/hold-jobs}
mkdir -p "$HOLD_DIR"
case "${1:-}" in
job)
    shift
    exec setsid -w bash -c 'echo $$ > "$0/$$"; "$@"; rc=$?; rm -f "$0/$$"; exit $rc' "$HOLD_DIR" "$@"
    ;;
watch)
    log=$2 pid=$3 state=run
    signal_all() { for f in "$HOLD_DIR"/*; do [ -e "$f" ] && pkill "-$1" -s "$(basename "$f")"; done; }
    while kill -0 "$pid" 2>/dev/null; do
        last=$(grep -a 'benchmark' "$log" 2>/dev/null | tail -1)
        want=run
        if grep -qE ': (prompt|generation|parallel) run|cached|warmup generation' <<<"$last"; then want=stop; fi
        if [ $want = stop ]; then signal_all STOP; else signal_all CONT; fi
        [ $want != $state ] && echo "$(date +%T) $want: $last" >> "$log.watch" && state=$want
        sleep 1
    done
    signal_all CONT
    ;;
*)
    sed -n '2,21p' "$0" >&2
    exit 2
    ;;
esac
