#!/bin/sh
# The floor relays behind the sandbox's kind of redirect: in a network namespace of its own (root),
# the upstream and a floor relay, measured plain and then behind an nftables NAT redirect with the
# conntrack state rules a sandbox's namespace has, alternated in each round (the table is added and
# deleted around the redirected measurement), so that the ratio says what the redirect costs the
# floor itself, apart from any gateway. A third arm hands the same connections to the relays with an
# nftables tproxy rule and no connection tracking at all (the design that would drop the NAT
# rewrite and conntrack entry from each connection; the relays' listeners are transparent), so that
# the three can be compared in one round. Each connection arm also gives the client's own CPU per
# connection. Usage, from the repository:
#
#	go build -o /tmp/egress-bench ./bench/egress
#	flock /tmp/bench.lock unshare -n sh bench/egress/redirect.sh /tmp/egress-bench [rounds]
set -eu
bin=$1
rounds=${2:-5}
ip link set lo up
fifo=$(mktemp -u)
mkfifo "$fifo"
start() { "$bin" "$@" > "$fifo" & pid=$!; read -r _ port < "$fifo"; }
start serve 0; srv=$pid; up=127.0.0.1:$port
start relay-go "$up"; gor=$pid; goport=$port
start relay-epoll "$up"; epr=$pid; epport=$port
rm -f "$fifo"
trap 'kill $srv $gor $epr' EXIT
rules() {
	nft -f - <<NFT
table inet bench {
	chain nat-output { type nat hook output priority -100; tcp dport 19998 redirect to :$goport; tcp dport 19999 redirect to :$epport; }
	chain filter-output { type filter hook output priority 0; policy accept; ct state established,related accept; }
	chain filter-input { type filter hook input priority 0; policy accept; ct state established,related accept; }
}
NFT
}
# tproxy: packets to any address on port 19998 or 19999 leave by lo (the namespace's default route, as
# in a sandbox's), come back in, and are given to the relay's listener as they are, untracked.
tproxy() {
	nft -f - <<NFT
table inet bench {
	chain raw-output { type filter hook output priority raw; meta l4proto tcp notrack; }
	chain raw-prerouting { type filter hook prerouting priority raw; meta l4proto tcp notrack; }
	chain mangle-prerouting { type filter hook prerouting priority mangle;
		ip daddr 10.99.0.1 tcp dport 19998 tproxy ip to 127.0.0.1:$goport meta mark set 1 accept;
		ip daddr 10.99.0.1 tcp dport 19999 tproxy ip to 127.0.0.1:$epport meta mark set 1 accept; }
}
NFT
}
ip route add default dev lo src 127.0.0.1
ip rule add fwmark 1 lookup 100
ip route add local 0.0.0.0/0 dev lo table 100
speed() { curl -sS -o /dev/null -w '%{speed_download}' "http://$1/?mib=1024"; }
# conns ADDR: the client role's line (rate, p50 in µs, its own CPU in s) for $n connections, with its
# CPU turned into µs per connection (the role makes 50 warm-up connections first).
n=2000
conns() { "$bin" client "$1" $n 1 | awk -v n=$n '{printf "%s %s %.0f", $1, $2, $3 * 1e6 / (n + 50)}'; }
for i in $(seq "$rounds"); do
	a=$(speed 127.0.0.1:$goport)
	c=$(conns 127.0.0.1:$epport)
	d=$(conns "$up")
	rules
	b=$(speed 127.0.0.1:19998)
	e=$(conns 127.0.0.1:19999)
	nft delete table inet bench
	tproxy
	f=$(speed 10.99.0.1:19998)
	g=$(conns 10.99.0.1:19999)
	nft delete table inet bench
	echo "$a $b $f $c $e $g $d" | awk '{printf "round: 1 GiB through the Go relay %.0f, behind the redirect %.0f MiB/s (%.2fx), by tproxy %.0f (%.2fx); new connections through the epoll relay %.0f/s p50 +%.0f us client %.0f us CPU, behind the redirect %.0f/s (%.2fx) p50 +%.0f us client %.0f us, by tproxy %.0f/s (%.2fx) p50 +%.0f us client %.0f us (direct p50 %.0f us, client %.0f us)\n",
		$1/2^20, $2/2^20, $2/$1, $3/2^20, $3/$1, $4, $5-$14, $6, $7, $7/$4, $8-$14, $9, $10, $10/$4, $11-$14, $12, $14, $15}'
done
