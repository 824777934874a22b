#!/usr/bin/env bash
# Side-by-side comparison of two bench-remote binaries on this noisy
# machine: alternates one `--compare 1` pass of each, ROUNDS times, and
# prints each binary's median msg/s and median ratio to the ceiling.
#
# Each pass sends 5,000,000 messages (about a second of actors) unless
# the options give --messages: the default 500,000 last 50-200 ms, so one
# scheduler hiccup can decide a pass (docs/PERFORMANCE.md, "Getting a figure worth quoting").
#
#   cp target/release/bench-remote /tmp/br-old   # before the change
#   cargo build --release -p bench-remote         # after it
#   scripts/ab.sh /tmp/br-old target/release/bench-remote 5 --in-flight 3
#
# With --tls it also prints each binary's median TLS / plaintext ratio
# (both measured in the same pass).
set -euo pipefail
if [ $# -lt 3 ]; then
    echo "usage: $0 BASE NEW ROUNDS [bench-remote options...]" >&2
    exit 2
fi
base=$1; new=$2; rounds=$3; shift 3
case " $* " in
    *" --messages "*|*" --messages="*) ;;
    *) set -- --messages 5000000 "$@" ;;
esac
rows=""
for _ in $(seq "$rounds"); do
    for which in base new; do
        bin=${!which}
        # Captured whole before it is parsed: nothing else runs during
        # the pass (a parser in the same pipe takes a core from it).
        out=$("$bin" --compare 1 "$@" 2>&1)
        line=$(grep '^median' <<<"$out" | tail -1)
        rate=$(echo "$line" | sed -E 's/.*actors[^0-9]*([0-9]+) msg\/s.*/\1/; s/.*raw transport ([0-9]+) msg\/s.*/\1/')
        ratio=$(echo "$line" | sed -E 's/.*ratio ([0-9.]+).*/\1/')
        # With --tls, also the TLS / plaintext ratio of the same pass.
        tls=$(grep '^median.*tls/plaintext' <<<"$out" | sed -E 's/.*tls\/plaintext ([0-9.]+).*/\1/' || true)
        rows+="$which $rate $ratio ${tls:-}"$'\n'
    done
done
python3 - "$rows" <<'PY'
import statistics as st, sys
rows = [l.split() for l in sys.argv[1].strip().splitlines()]
for k in ("base", "new"):
    rate = [int(r[1]) for r in rows if r[0] == k]
    ratio = [float(r[2]) for r in rows if r[0] == k]
    print(f"{k}: median {st.median(rate) / 1e6:.2f} M msg/s {[round(x / 1e6, 2) for x in rate]}, "
          f"ratio median {st.median(ratio):.3f} {ratio}")
    tls = [float(r[3]) for r in rows if r[0] == k and len(r) > 3]
    if tls:
        print(f"{k}: tls/plaintext median {st.median(tls):.3f} {tls}")
PY
