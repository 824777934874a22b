#!/usr/bin/env bash
# Cluster membership across five real processes in five network
# namespaces joined by a bridge: the nodes join through a seed and
# converge; nftables in two of the namespaces split the cluster 2/3; each
# side must report every member of the other side unreachable ("suspect")
# within 10 s, and after the heal every node must hold every other member
# up again (its latest state, for all 20 pairs, same side included) within
# 15 s. The split lasts 3 s past that (SPLIT_HOLD_S); the downing
# strategy's stable-after (30 s) is longer, so nobody is judged down:
# unreachable is not down.
#
# Then, on the same cluster (nodes 1 and 2 ask group "work" every 20 ms,
# through `Cluster::group` and through a `Router::cluster_group` router):
# - restart: kill -9 node 4 and start it on the same address; answers from
#   its new incarnation reach nodes 1 and 2 by both ways within 2 s of its
#   "ready" line (the nodes' wall-clock stamps);
# - pause: SIGSTOP node 3 for 8 s, SIGCONT; every node holds every other up
#   within 15 s, and from then on nobody prints a change about node 3 for
#   PAUSE_QUIET_S (60) s;
# - seed restart: kill -9 node 1 (the only seed), restart it once the
#   others suspect it: all 20 pairs up again within 10 s.
# And on fresh clusters with `--stable-ms 3000 --downing keep-majority`:
# - a 2/3 split held: nodes 1 and 2 print "self down" and exit 0 within
#   20 s, nodes 3, 4, 5 run on and hold them down;
# - four nodes split 2/2: nodes 3 and 4 down themselves, nodes 1 and 2
#   (the lowest address, c1@10.201.0.1) run on.
# Times are printed in milliseconds (polled every 100 ms).
#
# Each node is `cluster_node` (tests/src/bin/cluster_node.rs), which prints
# `member <node> <state>` per membership change.
#
# Needs root, `ip` with netns and bridge support, and `nft` (installed
# with apt-get if missing). Where any of that is not available it prints
# "NOT RUN: <reason>" and exits 77. Exit 0: all phases passed; 1: a phase
# failed (the logs are printed; CLUSTER_LOGS=DIR keeps them). Takes about
# 95 s plus the build.
set -euo pipefail
cd "$(dirname "$0")/../.."

NETNS_WHAT="netns cluster tests"
# shellcheck source=tests/netns/prereq.sh
. tests/netns/prereq.sh

ID=$$
N=5
SW="clS$ID"
PORT=25530
WORK=$(mktemp -d)
PIDS=()
ns() { echo "cl$1x$ID"; }
addr() { echo "10.201.0.$1"; }

cleanup() {
  set +e
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  for ((i = 1; i <= N; i++)); do ip netns del "$(ns $i)" 2>/dev/null; done
  ip netns del "$SW" 2>/dev/null
  # CLUSTER_LOGS=DIR keeps the nodes' logs there.
  [ -z "${CLUSTER_LOGS:-}" ] || cp "$WORK"/c*.log "$CLUSTER_LOGS"/
  rm -rf "$WORK"
}
trap cleanup EXIT

switched_namespaces cv sv

echo "building the cluster_node binary"
cargo build -q -p integration-tests --bin cluster_node
NODE="${CARGO_TARGET_DIR:-target}/debug/cluster_node"
[ -x "$NODE" ] || { echo "FAIL: no cluster_node binary at $NODE"; exit 1; }
ACTORS_COOKIE=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
export ACTORS_COOKIE

for ((i = 1; i <= N; i++)); do
  mkfifo "$WORK/in$i"
  # Held open here, read and write: a node sees its standard input close
  # only when this script ends, and a restarted node opens it again.
  exec {fd}<>"$WORK/in$i"
done
declare -A PID
# split_out I: node I's output, a line at a time (awk would buffer it):
# answers to cI.traffic, the rest to cI.log.
split_out() {
  local line
  while IFS= read -r line; do
    case $line in
      "reply "* | "fail "*) echo "$line" >>"$WORK/c$1.traffic" ;;
      *) echo "$line" >>"$WORK/c$1.log" ;;
    esac
  done
}
# start I ARGS...: node cI on its address, its log appended to cI.log.
# Nodes 1 and 2 send traffic through group "work"; node 1 is the seed.
start() {
  local i=$1 seed=()
  shift
  [ "$i" = 1 ] || seed=(--seed "$(addr 1):$PORT")
  [ "$i" -gt 2 ] || seed+=(--traffic)
  ip netns exec "$(ns $i)" "$NODE" "c$i" "$(addr $i):$PORT" "${seed[@]}" "$@" \
    <"$WORK/in$i" > >(split_out "$i") 2>&1 &
  PID[$i]=$!
  PIDS+=($!)
}
# kill9 I: kill -9 node I and reap it.
kill9() { kill -9 "${PID[$1]}" 2>/dev/null; wait "${PID[$1]}" 2>/dev/null || true; }
for ((i = 1; i <= N; i++)); do
  # Made here, not by the node's redirection in the background: the
  # checks below read it at once.
  : >"$WORK/c$i.log"
  : >"$WORK/c$i.traffic"
  start $i
done

PASSED=0
FAILED=0
pass() { echo "PASS: $*"; PASSED=$((PASSED + 1)); }
fail() { echo "FAIL: $*"; FAILED=$((FAILED + 1)); }
lines() { wc -l <"$WORK/c$1.log"; }

# seen I J STATE FROM: node I's log has "member cJ@... STATE" after line FROM.
seen() { tail -n +"$(($4 + 1))" "$WORK/c$1.log" | grep -q "^member c$2@[^ ]* $3\$"; }
# all_see PAIRS STATE TIMEOUT_S: every "I:J" pair seen in STATE (after the
# mark line of node I) within TIMEOUT_S seconds.
declare -A MARK
mark() { for ((i = 1; i <= N; i++)); do MARK[$i]=$(lines $i); done; }
all_see() {
  local state=$1 end=$(($(ms) + $2 * 1000)) pair ok
  shift 2
  while :; do
    ok=1
    for pair in "$@"; do
      seen "${pair%%:*}" "${pair##*:}" "$state" "${MARK[${pair%%:*}]}" || { ok=0; break; }
    done
    [ "$ok" = 1 ] && return 0
    [ "$(ms)" -lt "$end" ] || return 1
    sleep 0.1
  done
}
# now_up PAIRS...: the latest state node I printed for node J is "up",
# for every "I:J" pair.
now_up() {
  local pair last
  for pair in "$@"; do
    last=$(grep "^member c${pair##*:}@" "$WORK/c${pair%%:*}.log" | tail -n 1)
    [ "${last##* }" = up ] || return 1
  done
}
all_up() {
  local end=$(($(ms) + $1 * 1000))
  shift
  while :; do
    now_up "$@" && return 0
    [ "$(ms)" -lt "$end" ] || return 1
    sleep 0.1
  done
}
ms() { echo $(($(date +%s%N) / 1000000)); }
# every_pair [M]: "I:J" for every pair of the first M (default N) nodes.
every_pair() {
  local i j m=${1:-$N}
  for ((i = 1; i <= m; i++)); do for ((j = 1; j <= m; j++)); do
    [ "$i" != "$j" ] && echo "$i:$j"
  done; done
}
across() {
  local i j
  for i in 1 2; do for j in 3 4 5; do echo "$i:$j $j:$i"; done; done
}

START=$SECONDS
T=$(ms)
mark
for ((i = 1; i <= N; i++)); do MARK[$i]=0; done
if all_see up 20 $(every_pair); then
  pass "5 nodes converged: every node sees 4 up ($(($(ms) - T)) ms)"
else
  fail "5 nodes did not converge within 20 s"
fi

# split: nodes 1 and 2 drop everything to and from 3, 4 and 5; heal
# undoes it.
split() {
  local i
  for i in 1 2; do
    ip netns exec "$(ns $i)" nft -f - <<NFT
table inet split {
  chain input { type filter hook input priority 0; policy accept; ip saddr { $(addr 3), $(addr 4), $(addr 5) } drop; }
  chain output { type filter hook output priority 0; policy accept; ip daddr { $(addr 3), $(addr 4), $(addr 5) } drop; }
}
NFT
  done
}
heal() { for i in 1 2; do ip netns exec "$(ns $i)" nft delete table inet split; done; }

mark
T=$(ms)
split
if all_see suspect 10 $(across); then
  pass "split 2/3: each side reports the other side unreachable ($(($(ms) - T)) ms)"
else
  fail "split 2/3: not every node reported the other side unreachable within 10 s"
fi

# The split is the scenario, not a wait for anything: it lasts
# SPLIT_HOLD_S seconds more, so that the suspicions' gossip is spent where
# it cannot arrive (foca sends each update a bounded number of times);
# after the heal only the suspects' refutations can clear them.
sleep "${SPLIT_HOLD_S:-3}"
T=$(ms)
heal
if all_up 15 $(every_pair); then
  pass "heal: every node holds every other member up again ($(($(ms) - T)) ms)"
else
  fail "heal: not every node held every other member up within 15 s"
fi
if grep -q " down$" "$WORK"/c*.log; then
  fail "a member was judged down, though the split was shorter than the suspect timeout"
else
  pass "nobody was judged down"
fi

# ready_at I FROM: the wall-clock ms of node I's "ready" line after line
# FROM of its log (empty until it is there).
ready_at() { tail -n +"$(($2 + 1))" "$WORK/c$1.log" | awk '$1 == "ready" { print $3; exit }'; }
# reply_at I VIA K SINCE: the ms of node I's first answer through VIA from
# node K stamped at or after SINCE (empty until there is one).
reply_at() {
  awk -v via="$2" -v k="c$3" -v since="$4" \
    '$1 == "reply" && $2 == via && $3 == k && $4 >= since { print $4; exit }' "$WORK/c$1.traffic"
}
# exited I: node I's process has ended.
exited() { ! kill -0 "${PID[$1]}" 2>/dev/null; }
# wait_exit TIMEOUT_S I...: every node I's process ends within TIMEOUT_S.
wait_exit() {
  local end=$(($(ms) + $1 * 1000)) i ok
  shift
  while :; do
    ok=1
    for i in "$@"; do exited "$i" || { ok=0; break; }; done
    [ "$ok" = 1 ] && return 0
    [ "$(ms)" -lt "$end" ] || return 1
    sleep 0.1
  done
}
# self_downed I: node I printed "self down" after its mark and exited 0.
self_downed() {
  local rc=0
  tail -n +"$((MARK[$1] + 1))" "$WORK/c$1.log" | grep -q '^self down$' || return 1
  wait "${PID[$1]}" 2>/dev/null || rc=$?
  [ "$rc" = 0 ]
}

# Restart: kill -9 node 4 and start it again on the same address while
# nodes 1 and 2 send traffic. Its new incarnation must get answers
# through both the group and the router within 2 s of its "ready" line
# (the nodes' stamps, so the poll's granularity does not count).
kill9 4
mark
start 4
for ((t = 0; t < 50; t++)); do
  R=$(ready_at 4 "${MARK[4]}")
  [ -n "$R" ] && break
  sleep 0.1
done
WORST=0
MISSING=""
for ((t = 0; t < 50; t++)); do
  WORST=0
  MISSING=""
  for i in 1 2; do for via in group router; do
    A=$(reply_at $i $via 4 "${R:-0}")
    if [ -z "$A" ]; then MISSING+=" c$i/$via"; else
      [ $((A - R)) -gt "$WORST" ] && WORST=$((A - R))
    fi
  done; done
  [ -z "$MISSING" ] && break
  sleep 0.1
done
if [ -z "$R" ]; then
  fail "restart: the restarted node 4 printed no ready line within 5 s"
elif [ -n "$MISSING" ] || [ "$WORST" -gt 2000 ]; then
  fail "restart: traffic did not reach the new incarnation of node 4 within 2 s of its start (missing:${MISSING:- none}, worst $WORST ms)"
else
  pass "restart: group and router traffic from nodes 1 and 2 reached the restarted node 4 (slowest $WORST ms after its start)"
fi
if ! all_up 10 $(every_pair); then fail "restart: not every node held every other up within 10 s"; fi

# Pause: SIGSTOP node 3 for 8 s (about 40 probe rounds at 200 ms), then
# SIGCONT. Once it has refuted (every node holds every other up), nobody
# may print a state change about it for PAUSE_QUIET_S (60) seconds.
kill -STOP "${PID[3]}"
sleep 8
kill -CONT "${PID[3]}"
T=$(ms)
if all_up 15 $(every_pair); then
  mark
  pass "pause: node 3 refuted its suspicion: every node holds every other up ($(($(ms) - T)) ms after SIGCONT)"
  sleep "${PAUSE_QUIET_S:-60}"
  CHANGES=$(for i in 1 2 4 5; do tail -n +"$((MARK[$i] + 1))" "$WORK/c$i.log" | grep "^member c3@" | sed "s/^/c$i: /"; done || true)
  if [ -z "$CHANGES" ]; then
    pass "pause: no state change about node 3 for ${PAUSE_QUIET_S:-60} s after it refuted"
  else
    fail "pause: node 3 changed state after it refuted: $(echo "$CHANGES" | tr '\n' ';')"
  fi
else
  fail "pause: not every node held every other up within 15 s of SIGCONT"
fi

# Seed restart: kill -9 node 1, the only seed, once the others hold it
# unreachable, and start it again on the same address: every node must
# hold every other up within 10 s.
mark
kill9 1
if ! all_see suspect 10 2:1 3:1 4:1 5:1; then fail "seed restart: the others did not suspect the killed seed within 10 s"; fi
mark
start 1
T=$(ms)
if all_up 10 $(every_pair); then
  pass "seed restart: all 5 nodes hold each other up again ($(($(ms) - T)) ms after the restart)"
else
  fail "seed restart: not every node held every other up within 10 s of the restart"
fi

# restart_all M ARGS...: kill every node, then start nodes 1..M with ARGS
# and wait until they hold each other up.
restart_all() {
  local m=$1 i
  shift
  for ((i = 1; i <= N; i++)); do kill9 $i; done
  for ((i = 1; i <= N; i++)); do echo "=== restarted: $*" >>"$WORK/c$i.log"; done
  mark
  for ((i = 1; i <= m; i++)); do start $i "$@"; done
  all_see up 20 $(every_pair "$m")
}

# Downing, 2/3: with keep-majority and a 3 s stable-after, a split held
# longer than that leaves the majority (3, 4, 5) running, and the
# minority (1, 2) downs itself and exits within 20 s.
if restart_all 5 --stable-ms 3000 --downing keep-majority; then
  mark
  T=$(ms)
  split
  if wait_exit 20 1 2 && self_downed 1 && self_downed 2; then
    pass "downing 2/3: the minority (nodes 1, 2) downed itself and exited 0 ($(($(ms) - T)) ms after the split)"
  else
    fail "downing 2/3: nodes 1 and 2 did not both print self down and exit 0 within 20 s"
  fi
  if all_see down 10 3:1 3:2 4:1 4:2 5:1 5:2 && ! exited 3 && ! exited 4 && ! exited 5 \
    && ! grep -q '^self down$' <(for i in 3 4 5; do tail -n +"$((MARK[$i] + 1))" "$WORK/c$i.log"; done); then
    pass "downing 2/3: the majority (nodes 3, 4, 5) runs on and holds nodes 1 and 2 down"
  else
    fail "downing 2/3: the majority did not run on holding nodes 1 and 2 down"
  fi
  heal
else
  fail "downing 2/3: the restarted cluster did not converge within 20 s"
fi

# Downing, 2/2: four nodes split in equal halves under keep-majority: the
# side with the lowest address (c1@10.201.0.1) survives, the other downs
# itself.
if restart_all 4 --stable-ms 3000 --downing keep-majority; then
  mark
  T=$(ms)
  split
  if wait_exit 20 3 4 && self_downed 3 && self_downed 4; then
    pass "downing 2/2: the side without the lowest address (nodes 3, 4) downed itself and exited 0 ($(($(ms) - T)) ms after the split)"
  else
    fail "downing 2/2: nodes 3 and 4 did not both print self down and exit 0 within 20 s"
  fi
  if all_see down 10 1:3 1:4 2:3 2:4 && ! exited 1 && ! exited 2 \
    && ! grep -q '^self down$' <(for i in 1 2; do tail -n +"$((MARK[$i] + 1))" "$WORK/c$i.log"; done); then
    pass "downing 2/2: the side with the lowest address (nodes 1, 2) runs on and holds 3 and 4 down"
  else
    fail "downing 2/2: nodes 1 and 2 did not run on holding 3 and 4 down"
  fi
  heal
else
  fail "downing 2/2: the restarted cluster did not converge within 20 s"
fi

echo "netns cluster tests: $PASSED passed, $FAILED failed ($((SECONDS - START)) s)"
if [ "$FAILED" != 0 ]; then
  for ((i = 1; i <= N; i++)); do echo "--- c$i"; cat "$WORK/c$i.log"; done
  exit 1
fi
