#!/usr/bin/env bash
# Moves the receiving TCP stacks of a running `bench/e2e/run.sh` Sluice run to another CPU for
# a window and prints TAP B's receive rate before, during and after it. When Sluice writes a
# frame into a TAP, the kernel runs the receiver's TCP stack (and its wake-up) in the writing
# datapath thread; RPS on the TAP's receive queues (`rps_cpus`) queues the frame to another
# CPU's backlog instead. Windows: 4 s off, 1 s settle, 4 s on, 1 s settle, 4 s off.
#
# Usage (as root), in a second shell, at most ~1 s after starting a run of at least 18 s:
#   bench/e2e/rps_window.sh other|same|both &
#   bench/e2e/run.sh --hop vxlan --systems sluice --streams 1 --rounds 1 --seconds 20
# other: the CPU that the busiest datapath thread is not on (two CPUs); same: that thread's
# CPU (a control: no move); both: every CPU (the kernel's flow hash picks one).
set -euo pipefail
MODE=${1:?usage: rps_window.sh other|same|both}
case $MODE in other | same | both) ;; *) echo "rps_window.sh: other, same or both, not $MODE" >&2; exit 2 ;; esac
for _ in $(seq 100); do pgrep -f "iperf3 -c 10.91.0.2" >/dev/null && break; sleep 0.2; done
pgrep -f "iperf3 -c 10.91.0.2" >/dev/null || { echo "rps_window.sh: no Sluice run of bench/e2e/run.sh" >&2; exit 1; }
NSB=$(ip netns list | awk '{print $1}' | grep -E '^sle2e[0-9]+-b$' | head -1)
NSA=${NSB%b}a
ID=${NSB#sle2e}; ID=${ID%-b}
TA=sla$ID; TB=slb$ID
PID=$(pgrep -f "sluice run --no-db" | head -1)
sleep 3
# The busiest datapath thread over one second, and the CPU it last ran on.
declare -A before
for t in /proc/"$PID"/task/*; do read -r -a f <"$t/stat"; before[$t]=$((f[13] + f[14])); done
sleep 1
busiest=-1; cpu=0
for t in /proc/"$PID"/task/*; do
    read -r -a f <"$t/stat"
    d=$((f[13] + f[14] - before[$t]))
    if [ "$d" -gt "$busiest" ]; then busiest=$d; cpu=${f[38]}; fi
done
case $MODE in
    other) mask=$(printf %x $((1 << (1 - cpu)))) ;;
    same) mask=$(printf %x $((1 << cpu))) ;;
    both) mask=3 ;;
esac
rx() { ip netns exec "$NSB" cat "/sys/class/net/$TB/statistics/rx_bytes"; }
set_rps() {
    local ns dev
    for pair in "$NSB $TB" "$NSA $TA"; do
        read -r ns dev <<<"$pair"
        ip netns exec "$ns" sh -c "for q in /sys/class/net/$dev/queues/rx-*; do echo $1 > \$q/rps_cpus; done"
    done
}
window() { local a b; a=$(rx); sleep 4; b=$(rx); python3 -c "print(f'{($b - $a) * 8 / 4e9:.2f}')"; }
off1=$(window); set_rps "$mask"; sleep 1
on=$(window); set_rps 0; sleep 1
off2=$(window)
echo "rps_window: busiest datapath thread on CPU $cpu ($busiest ticks in 1 s), rps_cpus $mask: TAP B Gbit/s off $off1, on $on, off $off2"
