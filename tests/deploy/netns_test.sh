#!/usr/bin/env bash
# The emulated rack's life cycle (deploy/netns/rack.sh): up builds hosts that reach each other
# over shaped links and a management bridge, up again starts from a clean slate, down leaves
# nothing behind and succeeds when nothing is there. Exit 77 (ctest: skipped) without root or
# without permission to create network namespaces.
set -euo pipefail
RACK="$(cd "$(dirname "$0")/../.." && pwd)/deploy/netns/rack.sh"
STATE_TMP=$(mktemp -d)
export PHUB_RACK_STATE_DIR=$STATE_TMP/state
trap 'rm -rf "$STATE_TMP"' EXIT

if [[ $(id -u) != 0 ]]; then echo "SKIP: needs root (ip netns, tc)"; exit 77; fi
if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
  echo "SKIP: ip/tc missing (apt-get install iproute2)"; exit 77
fi
if ! ip netns add phub-probe 2>/dev/null; then echo "SKIP: cannot create network namespaces here"; exit 77; fi
ip netns del phub-probe
if [[ -n $(ip netns list | grep '^phub-' || true) ]]; then
  echo "SKIP: a rack is up (a benchmark may be running); not tearing it down"; exit 77
fi

fail() { echo "FAIL: $*"; "$RACK" down >/dev/null 2>&1 || true; exit 1; }
trap '"$RACK" down >/dev/null 2>&1 || true; rm -rf "$STATE_TMP"' EXIT

# A TCP round trip from host $1 to $2:$3 (a listener started in host $2's namespace).
tcp_reaches() {
  local from=$1 to=$2 ip=$3
  ip netns exec "phub-$to" python3 -c '
import socket,sys
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 7999)); s.listen(1); s.settimeout(10)
c,_=s.accept(); c.sendall(c.recv(5))' "$ip" &
  local server=$!
  local got=""
  for _ in $(seq 50); do
    got=$(ip netns exec "phub-$from" python3 -c '
import socket,sys
try:
    c=socket.create_connection((sys.argv[1], 7999), timeout=1); c.sendall(b"hello"); print(c.recv(5).decode())
except OSError: pass' "$ip") || true
    [[ $got == hello ]] && break
    sleep 0.1
  done
  wait "$server" 2>/dev/null || true
  [[ $got == hello ]]
}

"$RACK" up --topology pbox --workers 2 --rate 100mbit >/dev/null 2>&1 || fail "up pbox N=2"
state=$PHUB_RACK_STATE_DIR/topology
grep -qx "hosts=ps w0 w1" "$state" || fail "state file lacks 'hosts=ps w0 w1': $(cat "$state")"
grep -qx "link_bits.ps=200000000" "$state" || fail "pbox PS link is not N*B"
tcp_reaches w0 ps 10.77.0.100 || fail "w0 cannot reach ps over TCP"
tcp_reaches w0 w1 10.77.0.11 || fail "w0 cannot reach w1 over TCP"
for h in ps w0 w1; do
  # Output captured first: `cmd | grep -q` under pipefail fails when grep exits early and cmd
  # gets SIGPIPE.
  qdiscs=$(tc -n "phub-$h" qdisc show dev eth0)
  [[ $qdiscs == *htb* ]] || fail "no htb shaping on $h's eth0"
  addrs=$(ip -n "phub-$h" -br addr show dev mgmt0)
  [[ $addrs == *10.78.0.* ]] || fail "$h has no management leg"
done
qdiscs=$(tc -n phub-sw qdisc show dev w0)
[[ $qdiscs == *htb* ]] || fail "no shaping on the switch port towards w0"

"$RACK" up --topology cloud --workers 3 --rate 100mbit >/dev/null 2>&1 || fail "second up (cloud N=3)"
grep -qx "link_bits.ps=100000000" "$state" || fail "cloud PS link is not B"
[[ $(ip netns list | grep -c '^phub-w') == 3 ]] || fail "second up did not replace the first rack"

# --- multips: K PS hosts of link B beside N workers (issue 19 item 6) -------------------------
"$RACK" up --topology multips --workers 3 --ps-hosts 2 --rate 100mbit >/dev/null 2>&1 ||
  fail "up multips N=3 K=2"
grep -qx "hosts=ps0 ps1 w0 w1 w2" "$state" || fail "multips state lacks 'hosts=ps0 ps1 w0 w1 w2': $(cat "$state")"
grep -qx "ps_hosts=2" "$state" || fail "multips state lacks ps_hosts=2"
grep -qx "ip.ps1=10.77.0.101" "$state" || fail "PS host 1 is not 10.77.0.101"
for h in ps0 ps1; do
  grep -qx "link_bits.$h=100000000" "$state" || fail "multips PS host $h's link is not B"
  class=$(tc -n "phub-$h" class show dev eth0)
  [[ $class == *"rate 100Mbit"* ]] || fail "$h's eth0 is not shaped to B: $class"
  class=$(tc -n phub-sw class show dev "$h")
  [[ $class == *"rate 100Mbit"* ]] || fail "the switch port towards $h is not shaped to B: $class"
done
[[ -z $(ip netns list | grep '^phub-ps ' || true) ]] || fail "multips built the single PS host phub-ps"
tcp_reaches w2 ps1 10.77.0.101 || fail "w2 cannot reach ps1 over TCP"
tcp_reaches ps0 ps1 10.77.0.101 || fail "ps0 cannot reach ps1 over TCP"
addrs=$(ip -n phub-ps1 -br addr show dev mgmt0)
[[ $addrs == *10.78.0.101/* ]] || fail "ps1 has no management leg 10.78.0.101"
# --ps-hosts belongs to multips alone, and multips needs it; a refused up leaves the old rack
# torn down and nothing half-built.
"$RACK" up --topology multips --workers 2 >/dev/null 2>&1 && fail "multips without --ps-hosts accepted"
"$RACK" up --topology pbox --workers 2 --ps-hosts 2 >/dev/null 2>&1 && fail "pbox with --ps-hosts accepted"
"$RACK" up --topology multips --workers 2 --ps-hosts 0 >/dev/null 2>&1 && fail "--ps-hosts 0 accepted"
# The other topologies' state files have no ps_hosts line (unchanged format).
"$RACK" up --topology cloud --workers 2 --rate 100mbit >/dev/null 2>&1 || fail "up cloud after multips"
! grep -q "^ps_hosts=" "$state" || fail "cloud state file has a ps_hosts line"
grep -qx "hosts=ps w0 w1" "$state" || fail "cloud after multips: $(cat "$state")"

"$RACK" down >/dev/null 2>&1 || fail "down"
[[ -z $(ip netns list | grep '^phub-' || true) ]] || fail "namespaces left after down: $(ip netns list)"
[[ -z $(ip -o link show | awk -F': ' '{print $2}' | grep '^phub-' || true) ]] || fail "links left after down"
[[ ! -e $state ]] || fail "state file left after down"
"$RACK" down >/dev/null 2>&1 || fail "down with nothing up"
echo "PASS"
