#!/usr/bin/env bash
# Issue 16's goals in one invocation: `sluice run` through each hop (vlan, qinq, vxlan, geneve)
# and the kernel's VXLAN over veth, one stream, alternating in every round (one `run.sh` call
# per hop and round, so a slow moment of the shared machine hits all of them), then the
# medians over the rounds, the ratios the issue asks for, and the share of segments the sender
# retransmitted (segments estimated as bytes / 1448, the MSS of the 1500-byte MTU).
#
#   bench/e2e/hops.sh [--rounds N] [--seconds N] [--sluice PATH]      (as root)
#
# Defaults: 3 rounds of 6 s. Goals: QinQ and VXLAN each >= 0.8x the single-tag hop; VXLAN >=
# 0.5x the kernel's VXLAN; fewer than 0.1 % of segments retransmitted on every hop. The frame
# accounting of each hop (every frame one hop port sent is received or in a drop counter) is
# checked on every run: a run whose accounting does not add up fails the script.
set -euo pipefail
ROUNDS=3
SECS=6
SLUICE_BIN=${SLUICE:-}
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS=$2; shift 2 ;;
        --seconds) SECS=$2; shift 2 ;;
        --sluice) SLUICE_BIN=$2; shift 2 ;;
        -h | --help) sed -n '2,13p' "$0"; exit 0 ;;
        *) echo "hops.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "hops.sh: run as root" >&2; exit 1; }
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
WORK=$(mktemp -d /tmp/sluice-hops.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
if [ -z "$SLUICE_BIN" ]; then
    (cd "$ROOT" && cargo build --release -q -p sluice --bin sluice)
    SLUICE_BIN=$ROOT/target/release/sluice
fi
# A copy, so a rebuild during the runs does not change what is measured.
cp "$SLUICE_BIN" "$WORK/sluice"

echo "# hops.sh: $ROUNDS rounds of $SECS s, 1 stream ($(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ))"
RUNS=(vlan qinq vxlan geneve kernel)
for r in $(seq "$ROUNDS"); do
    for h in "${RUNS[@]}"; do
        if [ "$h" = kernel ]; then
            args=(--hop vxlan --systems vxlan)
        else
            args=(--hop "$h" --systems sluice)
        fi
        log=$WORK/$h-$r.log
        "$HERE/run.sh" "${args[@]}" --streams 1 --rounds 1 --seconds "$SECS" \
            --sluice "$WORK/sluice" --no-install >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
        line=$(grep -E '^round 1 ' "$log") || { cat "$log" >&2; exit 1; }
        read -r gbit retr < <(awk '{for (i = 1; i <= NF; i++) { if ($i == "Gbit/s") g = $(i-1); if ($i == "retransmits") t = $(i+1) } } END { print g, t }' <<<"$line")
        if [ "$h" != kernel ]; then
            # Every frame one hop port sent was received or is in a drop counter.
            grep -E '^hop ' "$log" >"$WORK/hop" || { cat "$log" >&2; exit 1; }
            if ! awk '{ m = $0; sub(/.*missing /, "", m); sub(/,.*/, "", m); if (m + 0 > $NF + 0) bad = 1 } END { exit bad }' "$WORK/hop"; then
                cat "$WORK/hop" >&2; echo "hops.sh: $h: frames lost and not counted" >&2; exit 1
            fi
        fi
        echo "$h $r $gbit $retr" >>"$WORK/results"
        printf 'round %d  %-7s %6.2f Gbit/s  retransmits %d\n' "$r" "$h" "$gbit" "$retr"
    done
done

python3 - "$WORK/results" "$SECS" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
secs = float(sys.argv[2])
by = {}
for h, r, g, t in rows:
    by.setdefault(h, []).append((int(r), float(g), int(t)))
med = {h: statistics.median(g for _, g, _ in v) for h, v in by.items()}
print()
print(f"{'path':8} {'median Gbit/s':>14} {'runs':>28} {'retransmitted':>14}")
for h in ["vlan", "qinq", "vxlan", "geneve", "kernel"]:
    v = by.get(h, [])
    if not v:
        continue
    segs = sum(g * 1e9 / 8 * secs / 1448 for _, g, _ in v)
    share = 100 * sum(t for _, _, t in v) / segs if segs else 0.0
    runs = " ".join(f"{g:.2f}" for _, g, _ in v)
    print(f"{h:8} {med[h]:14.2f} {runs:>28} {share:13.4f}%")
# Ratios within each round (same moment of the machine), and of the medians.
def per_round(a, b):
    ra = {r: g for r, g, _ in by[a]}
    rb = {r: g for r, g, _ in by[b]}
    return [ra[r] / rb[r] for r in sorted(ra) if r in rb and rb[r] > 0]
print()
for a, b, goal in [("qinq", "vlan", 0.8), ("vxlan", "vlan", 0.8), ("geneve", "vlan", 0.8), ("vxlan", "kernel", 0.5)]:
    rr = per_round(a, b)
    m = med[a] / med[b]
    print(f"{a} / {b}: medians {m:.2f} (goal >= {goal}: {'met' if m >= goal else 'not met'}); per round " + " ".join(f"{x:.2f}" for x in rr))
EOF
