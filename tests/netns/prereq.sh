# Sourced by the netns scripts: what they need, checked the same way.
# Set NETNS_WHAT (e.g. "netns fault tests") first. Where root, `ip` or
# `nft` is missing (and apt-get cannot install nftables), prints
# "NOT RUN: <what>: <reason>" and exits 77.

NOT_RUN=77
not_run() {
  echo "NOT RUN: $NETNS_WHAT: $*"
  exit "$NOT_RUN"
}

[ "$(id -u)" = 0 ] || not_run "needs root (network namespaces and nftables)"
command -v ip >/dev/null 2>&1 || not_run "no 'ip' command (iproute2)"
if ! command -v nft >/dev/null 2>&1; then
  echo "nft missing: installing nftables"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nftables >/dev/null; } \
    || not_run "nftables is not installed and apt-get could not install it"
fi

# switched_namespaces INSIDE OUTSIDE: N namespaces `ns 1..N` (addresses
# `addr 1..N`, /24) on one bridge in namespace $SW, through veth pairs
# named INSIDE$i$ID (in the node's namespace) and OUTSIDE$i$ID (on the
# bridge); then checks that nftables works inside a namespace. Needs
# N, ID, SW, WORK and the functions `ns` and `addr`.
switched_namespaces() {
  local inside=$1 outside=$2 i
  ip netns add "$SW" 2>"$WORK/err" || not_run "cannot create network namespaces: $(cat "$WORK/err")"
  ip -n "$SW" link add br0 type bridge 2>"$WORK/err" || not_run "cannot create a bridge: $(cat "$WORK/err")"
  ip -n "$SW" link set br0 up
  for ((i = 1; i <= N; i++)); do
    ip netns add "$(ns "$i")"
    ip link add "$inside$i$ID" type veth peer name "$outside$i$ID" 2>"$WORK/err" \
      || not_run "cannot create a veth pair: $(cat "$WORK/err")"
    ip link set "$inside$i$ID" netns "$(ns "$i")"
    ip link set "$outside$i$ID" netns "$SW"
    ip -n "$SW" link set "$outside$i$ID" master br0
    ip -n "$SW" link set "$outside$i$ID" up
    ip -n "$(ns "$i")" addr add "$(addr "$i")/24" dev "$inside$i$ID"
    ip -n "$(ns "$i")" link set lo up
    ip -n "$(ns "$i")" link set "$inside$i$ID" up
  done
  ip netns exec "$(ns 1)" nft add table inet split 2>"$WORK/err" \
    || not_run "nftables does not work in a network namespace: $(cat "$WORK/err")"
  ip netns exec "$(ns 1)" nft delete table inet split
}
