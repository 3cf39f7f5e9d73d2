# Guest B (10.77.0.2) of `softroce-vm pair`: the active side of the RDMA CM handshakes recorded
# in captures/softroce/rdma_cm-two-rxe-guests.pcap (see server.sh for guest A), one after the
# other: a connect to a port nobody listens on (REJ, reason 8), rping (REQ, REP, RTU, the
# rping exchange, DREQ, DREP), ucmatose (the server disconnects), udaddy (SIDR_REQ, SIDR_REP
# and UD sends), and rping to the slow server (REQ twice, MRA, REP, RTU, ...).
set -u
echo "== rping to a port nobody listens on"
if rping -c -a 10.77.0.1 -p 7999 -C 1 -v; then echo "connected to nobody?"; exit 1; fi
rc=0
echo "== rping"
rping -c -a 10.77.0.1 -p 7174 -C 3 -v -V || rc=1
echo "== ucmatose"
ucmatose -s 10.77.0.1 -p 7471 -c 1 -C 2 || rc=1
echo "== udaddy"
udaddy -s 10.77.0.1 -c 1 -C 2 || rc=1
echo "== rping to the slow server"
rping -c -a 10.77.0.1 -p 7176 -C 1 -v -V || rc=1
exit $rc
