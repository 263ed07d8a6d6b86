#!/usr/bin/env bash
# The product path of rule loading: a 1M-rule file over 16 masks loaded into the running daemon
# with the CLI, next to Open vSwitch's bundle add-flows of the same rules in the same run, and
# next to the in-process figures of `sluice bench flows`.
#
#   bench/flows/run.sh [RULES] [MASKS] [REPEATS]        (defaults: 1000000 16 3)
#
# For each repeat: a fresh `sluice run --socket S --threads 2` (release build); the daemon's
# VmRSS from /proc before and after; `sluice flow add --socket S --batch sluice.rules` timed
# end to end (wall clock, CLI start to exit); `sluice flow dump` must list every rule; then
# `sluice flow mod --batch` of the same rules with other actions, then `sluice flow del --batch`
# of every handle, timed the same way (the table must be empty after). Then
# `ovs-ofctl -O OpenFlow14 --bundle add-flows br0 ovs.flows` on a private ovs-vswitchd
# (userspace bridge, datapath_type=netdev) with the same keys, priorities and outputs, and
# `sluice bench flows --rules RULES --masks MASKS` (insert and lookups at 65,536 active flows:
# plain, bursts of 32, exact-match cache key by key and by bursts of 32). Medians of the repeats; the ratio to OVS is of the
# same run. Needs root and openvswitch-switch (apt-get install -y openvswitch-switch).
# Everything it starts is killed on exit; its files live in a temp dir that is removed.
set -euo pipefail

RULES=${1:-1000000}
MASKS=${2:-16}
REPS=${3:-3}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d /tmp/sluice-bench-flows.XXXXXX)
SOCK="$WORK/sluice.sock"
DPID=""

# The netdev datapath of the private ovs-vswitchd creates TAP devices `br0` and `ovs-netdev` in
# the root namespace and leaves them when it is killed: remove those this run created.
OVS_LINKS=()
for l in br0 ovs-netdev; do ip link show "$l" >/dev/null 2>&1 || OVS_LINKS+=("$l"); done
cleanup() {
    set +e
    [ -n "$DPID" ] && kill "$DPID" 2>/dev/null && wait "$DPID" 2>/dev/null
    for p in "$WORK"/ovs-vswitchd.pid "$WORK"/ovsdb-server.pid; do
        [ -f "$p" ] && kill "$(cat "$p")" 2>/dev/null
    done
    sleep 0.5
    for p in "$WORK"/ovs-vswitchd.pid "$WORK"/ovsdb-server.pid; do
        [ -f "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null
    done
    for l in "${OVS_LINKS[@]}"; do ip link del "$l" 2>/dev/null; done
    rm -rf "$WORK"
}
trap cleanup EXIT

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
now() { date +%s.%N; }
rss_of() { awk '/VmRSS/ {print $2 * 1024}' "/proc/$1/status"; }
calc() { python3 -c "print($1)"; }
jget() { python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }

cd "$ROOT"
cargo build --release -q -p sluice --bin sluice --example bench_flows
SLUICE="$ROOT/target/release/sluice"
"$ROOT/target/release/examples/bench_flows" --emit "$WORK" --rules "$RULES" --masks "$MASKS"
rm -f "$WORK/nft.elems"
# The same rules with other actions, for `flow mod --batch` (actions replaced in place).
sed -E 's/action output:([0-9]+)$/action output:1\1/' "$WORK/sluice.rules" >"$WORK/sluice.mod"

echo "rules=$RULES masks=$MASKS repeats=$REPS ($(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ))"

# --- Sluice: the daemon and the CLI ---------------------------------------------------------
# Every repeat starts from a fresh durable store (`--db`): the store's commit is in the measured
# path, as an operator's daemon has one.
start_daemon() {
    rm -f "$SOCK"
    rm -rf "$WORK/db"
    "$SLUICE" run --socket "$SOCK" --db "$WORK/db" --threads 2 --max-rules $((RULES + 1024)) 2>"$WORK/daemon.log" &
    DPID=$!
    for _ in $(seq 200); do
        "$SLUICE" --socket "$SOCK" flow dump >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    echo "the daemon did not start:" >&2; cat "$WORK/daemon.log" >&2; exit 1
}
stop_daemon() { kill "$DPID"; wait "$DPID" 2>/dev/null || true; DPID=""; }

sl=(); sl_mem=(); sl_secs=(); sl_mod=(); sl_del=()
for _ in $(seq "$REPS"); do
    start_daemon
    r0=$(rss_of "$DPID")
    t0=$(now)
    "$SLUICE" --socket "$SOCK" flow add --batch "$WORK/sluice.rules" >"$WORK/add.out"
    t1=$(now)
    r1=$(rss_of "$DPID")
    "$SLUICE" --socket "$SOCK" flow dump >"$WORK/dump.out"
    n=$(wc -l <"$WORK/dump.out")
    if [ "$n" != "$RULES" ]; then
        echo "FAIL: flow dump lists $n rules, expected $RULES" >&2; exit 1
    fi
    # Every rule's handle, for `flow del --batch` below.
    sed -E 's/^handle ([0-9]+):.*/handle \1/' "$WORK/dump.out" >"$WORK/del.handles"
    t2=$(now)
    "$SLUICE" --socket "$SOCK" flow mod --batch "$WORK/sluice.mod" >"$WORK/mod.out"
    t3=$(now)
    sl_mod+=("$(calc "$RULES / ($t3 - $t2)")")
    echo "sluice flow mod --batch: $RULES rules in $(calc "round($t3 - $t2, 3)") s ($(cat "$WORK/mod.out"))" >&2
    t4=$(now)
    "$SLUICE" --socket "$SOCK" flow del --batch "$WORK/del.handles" >"$WORK/del.out"
    t5=$(now)
    left=$("$SLUICE" --socket "$SOCK" flow dump | wc -l)
    [ "$left" = 0 ] || { echo "FAIL: $left rules left after flow del --batch" >&2; exit 1; }
    sl_del+=("$(calc "$RULES / ($t5 - $t4)")")
    echo "sluice flow del --batch: $RULES handles in $(calc "round($t5 - $t4, 3)") s ($(cat "$WORK/del.out"))" >&2
    stop_daemon
    sl_secs+=("$(calc "round($t1 - $t0, 3)")")
    sl+=("$(calc "$RULES / ($t1 - $t0)")")
    sl_mem+=("$(calc "round(($r1 - $r0) / $RULES)")")
    echo "sluice flow add --batch: $RULES rules in ${sl_secs[-1]} s, daemon RSS +$(( (r1 - r0) / 1048576 )) MiB, flow dump lists $n ($(cat "$WORK/add.out"))" >&2
done

# --- Open vSwitch -----------------------------------------------------------------------------
export OVS_RUNDIR="$WORK" OVS_LOGDIR="$WORK" OVS_DBDIR="$WORK" OVS_SYSCONFDIR="$WORK"
ovsdb-tool create "$WORK/conf.db" /usr/share/openvswitch/vswitch.ovsschema
ovsdb-server "$WORK/conf.db" --remote="punix:$WORK/db.sock" --pidfile="$WORK/ovsdb-server.pid" \
    --log-file="$WORK/ovsdb-server.log" --unixctl="$WORK/ovsdb-server.ctl" --detach
VSCTL=(ovs-vsctl --db="unix:$WORK/db.sock" --timeout=30)
"${VSCTL[@]}" --no-wait init
ovs-vswitchd "unix:$WORK/db.sock" --pidfile="$WORK/ovs-vswitchd.pid" \
    --log-file="$WORK/ovs-vswitchd.log" --unixctl="$WORK/ovs-vswitchd.ctl" --detach
"${VSCTL[@]}" add-br br0 -- set bridge br0 datapath_type=netdev
OFCTL=(ovs-ofctl -O OpenFlow14)
ovs=(); ovs_mem=""
for _ in $(seq "$REPS"); do
    "${OFCTL[@]}" del-flows br0
    r0=$(rss_of "$(cat "$WORK/ovs-vswitchd.pid")")
    t0=$(now)
    "${OFCTL[@]}" --bundle add-flows br0 "$WORK/ovs.flows"
    t1=$(now)
    r1=$(rss_of "$(cat "$WORK/ovs-vswitchd.pid")")
    n=$("${OFCTL[@]}" dump-aggregate br0 | sed -n 's/.*flow_count=\([0-9]*\).*/\1/p')
    [ "$n" = "$RULES" ] || echo "warning: ovs holds $n flows, expected $RULES" >&2
    ovs+=("$(calc "$RULES / ($t1 - $t0)")")
    echo "ovs bundle add-flows: $RULES flows in $(calc "round($t1 - $t0, 3)") s, vswitchd RSS +$(( (r1 - r0) / 1048576 )) MiB" >&2
    [ -z "$ovs_mem" ] && ovs_mem=$(calc "round(($r1 - $r0) / $RULES)")
done
"${OFCTL[@]}" del-flows br0

# --- In process -------------------------------------------------------------------------------
inp=(); lk=(); lkb=(); lkc=(); lkcb=(); inp_mem=""
for _ in $(seq "$REPS"); do
    j=$("$SLUICE" bench flows --rules "$RULES" --masks "$MASKS" --lookups 2000000 --json | tail -1)
    inp+=("$(jget "$j" insert_rules_per_sec)")
    lk+=("$(jget "$j" lookups_per_sec)")
    lkb+=("$(jget "$j" lookups_per_sec_burst)")
    lkc+=("$(jget "$j" lookups_per_sec_cached)")
    lkcb+=("$(jget "$j" lookups_per_sec_cached_burst)")
    [ -z "$inp_mem" ] && inp_mem=$(calc "round($(jget "$j" bytes_per_rule))")
    echo "sluice bench flows: insert ${inp[-1]} rules/s, lookups ${lk[-1]} / burst ${lkb[-1]} / cached ${lkc[-1]} / cached burst ${lkcb[-1]} per s" >&2
done

# --- Report -----------------------------------------------------------------------------------
m_sl=$(printf '%s\n' "${sl[@]}" | median)
m_mem=$(printf '%s\n' "${sl_mem[@]}" | median)
m_ovs=$(printf '%s\n' "${ovs[@]}" | median)
m_inp=$(printf '%s\n' "${inp[@]}" | median)
echo
printf '%-34s %14s %8s %12s   %s\n' "path" "rules/s" "x OVS" "bytes/rule" "runs (rules/s)"
row() { printf '%-34s %14.0f %8.1f %12s   %s\n' "$1" "$2" "$(calc "$2 / $m_ovs")" "$3" "$4"; }
row "sluice flow add --batch (daemon)" "$m_sl" "$m_mem" "${sl[*]}"
row "sluice flow mod --batch (daemon)" "$(printf '%s\n' "${sl_mod[@]}" | median)" "-" "${sl_mod[*]}"
row "sluice flow del --batch (daemon)" "$(printf '%s\n' "${sl_del[@]}" | median)" "-" "${sl_del[*]}"
row "ovs-ofctl --bundle add-flows" "$m_ovs" "$ovs_mem" "${ovs[*]}"
row "sluice bench flows (in process)" "$m_inp" "$inp_mem" "${inp[*]}"
echo "daemon wall clock per load (s): ${sl_secs[*]}; every load listed all $RULES rules in flow dump"
printf 'lookups at %s rules, 65536 active flows, 1 thread: plain %.0f/s, burst %.0f/s, cached %.0f/s, cached burst %.0f/s (medians)\n' \
    "$RULES" "$(printf '%s\n' "${lk[@]}" | median)" "$(printf '%s\n' "${lkb[@]}" | median)" "$(printf '%s\n' "${lkc[@]}" | median)" "$(printf '%s\n' "${lkcb[@]}" | median)"
echo "goals: >= 1000000 rules/s and >= 12x OVS through the daemon, <= 400 resident bytes per rule, all listed"
