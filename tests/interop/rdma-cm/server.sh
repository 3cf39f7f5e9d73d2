# Guest A (10.77.0.1) of `softroce-vm pair`: the passive side of the RDMA CM handshakes recorded
# in captures/softroce/rdma_cm-two-rxe-guests.pcap. Every server listens at once, each on its
# own port; the client (client.sh, guest B) starts once this prints SERVERS-LISTENING.
#
# The last rping server is stopped (SIGSTOP) before anyone connects, to be a server too slow to
# accept: the client's REQ times out and is sent again, and the kernel's CM answers the
# duplicate with an MRA (Linux delays its MRA until a duplicate REQ arrives). The server is
# resumed once the MRA is counted as sent, and then accepts (REP).
set -u
mra=/sys/class/infiniband/rxe0/ports/1/cm_tx_msgs/mra
[ -r $mra ] || { echo "no CM counter $mra"; exit 1; }

rping -s -a 10.77.0.1 -p 7174 -C 3 -v -V >/tmp/rping.out 2>&1 &
rping=$!
ucmatose -b 10.77.0.1 -p 7471 -c 1 -C 2 >/tmp/ucmatose.out 2>&1 &
ucmatose=$!
# udaddy always uses port 7174, in the UDP port space (SIDR): no clash with rping's TCP 7174.
udaddy -b 10.77.0.1 -c 1 -C 2 >/tmp/udaddy.out 2>&1 &
udaddy=$!
rping -s -a 10.77.0.1 -p 7176 -C 1 -v -V >/tmp/slow.out 2>&1 &
slow=$!
sleep 1
kill -STOP $slow
echo SERVERS-LISTENING

# Bounded: 60 s at most.
i=0
while [ "$(cat $mra)" = 0 ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
echo "MRA sent: $(cat $mra)"
kill -CONT $slow

rc=0
for server in rping ucmatose udaddy slow; do
  eval "pid=\$$server"
  wait "$pid"; status=$?
  echo "== $server server exit $status"
  cat /tmp/$server.out
  [ $status = 0 ] || rc=1
done
[ "$(cat $mra)" != 0 ] || { echo "no MRA was sent"; rc=1; }
exit $rc
