#!/usr/bin/env bash
# Runs every fuzz target for a bounded time (FUZZ_SECONDS, default 60 each)
# from the checked-in seed corpus. New inputs go to a scratch corpus, so the
# checked-in seeds only change by hand; crashes land in fuzz/artifacts/.
#
#   fuzz/run.sh                 # all targets, 60 s each
#   FUZZ_SECONDS=10 fuzz/run.sh frame_decode
set -euo pipefail
cd "$(dirname "$0")"

if ! rustup toolchain list | grep -q '^nightly'; then
    echo "==================================================================" >&2
    echo "fuzz/run.sh: the nightly toolchain is missing; cargo fuzz needs it." >&2
    echo "  install it with: rustup toolchain install nightly" >&2
    echo "==================================================================" >&2
    exit 2
fi
if ! command -v cargo-fuzz >/dev/null 2>&1; then
    echo "fuzz/run.sh: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi

seconds="${FUZZ_SECONDS:-60}"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(frame_decode handshake envelope wire tls_records)
fi
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

for t in "${targets[@]}"; do
    echo "=== fuzz target $t: ${seconds}s" >&2
    mkdir -p "$scratch/$t"
    # -rss_limit_mb: a decode that allocates what a hostile length claims
    # fails the run. The target is built once, in release with debug
    # assertions (cargo fuzz's default).
    cargo +nightly fuzz run "$t" "$scratch/$t" "corpus/$t" -- \
        -max_total_time="$seconds" -rss_limit_mb=512 -print_final_stats=1
done
echo "fuzz/run.sh: all targets ran ${seconds}s without a failure" >&2
