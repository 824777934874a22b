#!/usr/bin/env bash
# Network fault tests between two real processes in two network namespaces
# joined by a veth pair (issue 6): a blackhole partition, random packet loss
# and TCP resets, made with nftables in the server's namespace, each healed
# again. The client node (`peer --client`, tests/src/bin/peer.rs) asks the
# server's counter every 100 ms and prints a line per outcome and per remote
# event; this script reads those lines and checks that
#   - the blackhole is detected (failure detector: "event unreachable"),
#   - the reset is seen ("event disconnected"),
#   - a silent host (every packet dropped, no RST), once judged
#     unreachable, fails every new ask at once with NodeUnreachable instead
#     of each waiting for a dial's handshake timeout (the figures printed),
#   - after every heal, asks succeed again within a bounded time.
#
# Needs root, `ip` (iproute2) with netns support, and `nft` (installed with
# apt-get if missing). Where any of that is not available it prints
# "NOT RUN: <reason>" and exits 77: reported, never silently skipped.
# Exit 0: all phases passed; 1: a phase failed (the logs are printed).
# Takes about 30 s (plus the peer binary's build, and installing nftables,
# if needed).
#
# Usage: tests/netns/run.sh       (from anywhere; CARGO_TARGET_DIR honoured)
set -euo pipefail
cd "$(dirname "$0")/../.."

NETNS_WHAT="netns fault tests"
# shellcheck source=tests/netns/prereq.sh
. tests/netns/prereq.sh

ID=$$
NS_A="ftA$ID"          # client: 10.200.0.1
NS_B="ftB$ID"          # server: 10.200.0.2, where the faults are applied
VETH_A="fva$ID"
VETH_B="fvb$ID"
ADDR_A=10.200.0.1
ADDR_B=10.200.0.2
PORT=25520
WORK=$(mktemp -d)
PIDS=()

cleanup() {
  set +e
  # Closing the peers' stdin asks them to shut down; then make sure.
  exec 3>&- 4>&- 2>/dev/null
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  ip netns del "$NS_A" 2>/dev/null
  ip netns del "$NS_B" 2>/dev/null
  ip link del "$VETH_A" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

ip netns add "$NS_A" 2>"$WORK/err" || not_run "cannot create network namespaces: $(cat "$WORK/err")"
ip netns add "$NS_B"
ip link add "$VETH_A" type veth peer name "$VETH_B" 2>"$WORK/err" \
  || not_run "cannot create a veth pair: $(cat "$WORK/err")"
ip link set "$VETH_A" netns "$NS_A"
ip link set "$VETH_B" netns "$NS_B"
ip -n "$NS_A" addr add "$ADDR_A/24" dev "$VETH_A"
ip -n "$NS_B" addr add "$ADDR_B/24" dev "$VETH_B"
for ns in "$NS_A" "$NS_B"; do ip -n "$ns" link set lo up; done
ip -n "$NS_A" link set "$VETH_A" up
ip -n "$NS_B" link set "$VETH_B" up
ip netns exec "$NS_B" nft add table inet fault 2>"$WORK/err" \
  || not_run "nftables does not work in a network namespace: $(cat "$WORK/err")"
ip netns exec "$NS_B" nft delete table inet fault

echo "building the peer binary"
cargo build -q -p integration-tests --bin peer
PEER="${CARGO_TARGET_DIR:-target}/debug/peer"
[ -x "$PEER" ] || { echo "FAIL: no peer binary at $PEER"; exit 1; }
# Both nodes prove one shared secret, fresh for this run, instead of
# reading (or creating) the invoking user's ~/.actors.cookie.
ACTORS_COOKIE=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
export ACTORS_COOKIE

# Fast detection so that each phase is short: heartbeat 100 ms, acceptable
# pause 1 s; reconnects back off to at most 1 s.
FLAGS=(--heartbeat-ms 100 --pause-ms 1000 --backoff-max-ms 1000)
mkfifo "$WORK/in_a" "$WORK/in_b"
exec 3<>"$WORK/in_b" 4<>"$WORK/in_a"
ip netns exec "$NS_B" "$PEER" b "$ADDR_B:$PORT" "${FLAGS[@]}" <"$WORK/in_b" >"$WORK/b.log" 2>&1 &
PIDS+=($!)
LOG="$WORK/a.log"
CLIENT_FLAGS=(--client "b@$ADDR_B:$PORT" --ask-every-ms 100 --ask-timeout-ms 1000)
START=$SECONDS

# wait_for PATTERN FROM_LINE TIMEOUT_S: a line matching PATTERN in the
# client's log after line FROM_LINE, within TIMEOUT_S seconds.
wait_for() {
  local pattern=$1 from=$2 timeout=$3 i
  for ((i = 0; i < timeout * 10; i++)); do
    if tail -n +"$((from + 1))" "$LOG" 2>/dev/null | grep -q -- "$pattern"; then
      return 0
    fi
    sleep 0.1
  done
  return 1
}
lines() { wc -l <"$LOG"; }
count() { tail -n +"$(($2 + 1))" "$LOG" | head -n "$(($3 - $2))" | grep -c -- "$1" || true; }

for ((i = 0; i < 100; i++)); do grep -q '^ready' "$WORK/b.log" 2>/dev/null && break; sleep 0.1; done
grep -q '^ready' "$WORK/b.log" || { echo "FAIL: the server did not start"; cat "$WORK/b.log"; exit 1; }
ip netns exec "$NS_A" "$PEER" a "$ADDR_A:$PORT" "${FLAGS[@]}" "${CLIENT_FLAGS[@]}" <"$WORK/in_a" >"$LOG" 2>&1 &
PIDS+=($!)

PASSED=0
FAILED=0
pass() { echo "PASS: $*"; PASSED=$((PASSED + 1)); }
fail() { echo "FAIL: $*"; FAILED=$((FAILED + 1)); }

nft_b() { ip netns exec "$NS_B" nft "$@"; }
# rules RULE...: a fresh table whose input and output chains on the veth
# apply each RULE (the output chain gets it with iifname → oifname).
rules() {
  nft_b add table inet fault
  nft_b add chain inet fault input '{ type filter hook input priority 0; policy accept; }'
  nft_b add chain inet fault output '{ type filter hook output priority 0; policy accept; }'
  nft_b add rule inet fault input iifname "$VETH_B" "$@"
  if [ "${OUTPUT_TOO:-1}" = 1 ]; then
    nft_b add rule inet fault output oifname "$VETH_B" "$@"
  fi
}
heal() { nft_b delete table inet fault 2>/dev/null || true; }

# recovers NAME FROM: asks succeed again within 20 s of the heal.
recovers() {
  local t0=$SECONDS
  if wait_for "ask ok" "$2" 20; then
    pass "$1: healed, asks succeed again after $((SECONDS - t0)) s"
  else
    fail "$1: no successful ask within 20 s of the heal"
  fi
}

echo "phase 0: baseline"
if wait_for "ask ok" 0 30; then pass "baseline: the client's asks succeed"; else fail "baseline: no successful ask within 30 s"; fi

echo "phase 1: blackhole (drop everything on the veth, both ways)"
from=$(lines)
t0=$SECONDS
rules drop
if wait_for "event unreachable" "$from" 15; then
  pass "blackhole: failure detector fired after $((SECONDS - t0)) s"
else
  fail "blackhole: no unreachable event within 15 s"
fi
if wait_for "terminated node unreachable" "$from" 5; then
  pass "blackhole: the client's watch got Terminated(NodeUnreachable)"
else
  fail "blackhole: the watch did not end"
fi
heal
recovers blackhole "$(lines)"

echo "phase 2: random loss (30% of packets dropped each way) for 6 s"
from=$(lines)
rules numgen random mod 100 '<' 30 drop
sleep 6
to=$(lines)
heal
echo "  during loss: $(count 'ask ok' "$from" "$to") asks ok, $(count 'ask err' "$from" "$to") failed," \
  "$(count 'event unreachable' "$from" "$to") unreachable events"
recovers "random loss" "$to"

echo "phase 3: TCP reset (every TCP packet from the client answered with RST) for 3 s"
from=$(lines)
t0=$SECONDS
OUTPUT_TOO=0 rules meta l4proto tcp reject with tcp reset
if wait_for "event disconnected" "$from" 15; then
  pass "tcp reset: the link drop was seen after $((SECONDS - t0)) s"
else
  fail "tcp reset: no disconnected event within 15 s"
fi
# Reconnects are reset too while the rule stands: no ask can succeed.
down=$(grep -n "event disconnected" "$LOG" | tail -n 1 | cut -d: -f1)
sleep 3
to=$(lines)
heal
ok=$(count 'ask ok' "${down:-$from}" "$to")
echo "  while reset: $ok asks ok, $(count 'ask err' "$from" "$to") failed"
if [ "$ok" = 0 ]; then pass "tcp reset: no ask got through while reset"; else fail "tcp reset: $ok asks got through the reset"; fi
recovers "tcp reset" "$to"

echo "phase 4: silent host (every packet dropped, no RST) for 4 s after the verdict"
# The host neither answers nor refuses: each dial would wait for its
# handshake timeout (5 s). Asks before the verdict wait for it (they time
# out, or fail with NodeDown at the verdict); once the node is judged
# unreachable every new ask must fail at once with NodeUnreachable while
# one background redial looks for the node.
from=$(lines)
t0=$SECONDS
rules drop
if wait_for "event unreachable" "$from" 15; then
  pass "silent host: judged unreachable after $((SECONDS - t0)) s"
else
  fail "silent host: no unreachable event within 15 s"
fi
verdict=$(grep -n "event unreachable" "$LOG" | tail -n 1 | cut -d: -f1)
verdict=${verdict:-$(lines)}
sleep 4
to=$(lines)
heal
# ms=N of each ask err line in (FROM, TO] (matching PATTERN, or not with -v).
ask_ms() {
  tail -n +"$(($1 + 1))" "$LOG" | head -n "$(($2 - $1))" | grep -- "ask err" \
    | grep $3 -- "down while the ask waited" | sed -n 's/.* ms=\([0-9]*\).*/\1/p' || true
}
# Asks that started before the verdict: timed out, or failed with NodeDown
# at the verdict (printed just after its event line).
before=$(ask_ms "$from" "$verdict" -v | sort -n | tr '\n' ' ')
at_verdict=$(ask_ms "$from" "$to" "" | sort -n | tr '\n' ' ')
after=$(ask_ms "$verdict" "$to" -v | sort -n)
n_after=$(printf '%s\n' "$after" | grep -c . || true)
max_after=$(printf '%s\n' "$after" | tail -n 1)
median_after=$(printf '%s\n' "$after" | sed -n "$(((n_after + 1) / 2))p")
unreachable_after=$(tail -n +"$((verdict + 1))" "$LOG" | head -n "$((to - verdict))" | grep -c -- "ask err node unreachable" || true)
echo "  before the verdict: asks timed out after [ ${before}] ms (ask timeout 1000 ms); in flight at the verdict: NodeDown after [ ${at_verdict}] ms"
echo "  after the verdict: $n_after asks failed, $unreachable_after with NodeUnreachable, median ${median_after:-?} ms, max ${max_after:-?} ms"
if [ "$n_after" -ge 10 ] && [ "$unreachable_after" = "$n_after" ] && [ "${max_after:-9999}" -lt 100 ]; then
  pass "silent host: every ask after the verdict failed at once with NodeUnreachable (max ${max_after} ms)"
else
  fail "silent host: asks after the verdict did not all fail at once with NodeUnreachable ($n_after asks, $unreachable_after unreachable, max ${max_after:-?} ms)"
fi
recovers "silent host" "$to"

echo "--- client log (last 15 lines) ---"
tail -n 15 "$LOG"
if [ "$FAILED" -gt 0 ]; then
  echo "--- client log ---"
  cat "$LOG"
  echo "--- server log ---"
  cat "$WORK/b.log"
fi
echo "netns fault tests took $((SECONDS - START)) s"
echo "netns: $PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
