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
