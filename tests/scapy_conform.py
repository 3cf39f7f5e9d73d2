#!/usr/bin/python3
"""Builds, with scapy, small RoCEv2 conversations for the Rust test `conform`: for each rule
`roce conform` checks, one capture that breaks exactly that rule and one that bends it legally
(a retransmission after a genuine timeout, a lost packet, a READ retried from its middle...).

Usage: scapy_conform.py OUT_DIR
Writes OUT_DIR/<case>.pcap for each case and OUT_DIR/cases.json: for each case its file, the
rule it breaks (null when it only bends one) and the frame numbers (from 1, as tshark counts)
the checker must name.

Host A (10.0.0.1, QP 0x11) is the requester, host B (10.0.0.2, QP 0x12) the responder; both
directions use one UDP source port, as Linux derives it from the QP pair. The path MTU is 1024
unless a case says otherwise. scapy computes every ICRC (IPv4).
"""

import json
import struct
import sys

from scapy.all import IP, UDP, Ether, Raw, wrpcap
from scapy.contrib.roce import AETH, BTH

A, B = "10.0.0.1", "10.0.0.2"
QA, QB = 0x11, 0x12
SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_ONLY = 0x00, 0x01, 0x02, 0x04
WRITE_FIRST, WRITE_LAST, WRITE_ONLY = 0x06, 0x08, 0x0A
READ_REQUEST, RR_FIRST, RR_MIDDLE, RR_LAST, RR_ONLY = 0x0C, 0x0D, 0x0E, 0x0F, 0x10
ACKNOWLEDGE, ATOMIC_ACK, FETCH_ADD = 0x11, 0x12, 0x14
CNP = 0x81
ECN_CE = 3
UC_SEND_ONLY, UD_SEND_ONLY = 0x24, 0x64
ACK, NAK_SEQ = 0x1F, 0x60
GSI_QKEY = 0x80010000


def reth(length, va=0x1000, rkey=0x100):
    return struct.pack("!QII", va, rkey, length)


class Capture:
    """Frames of one conversation, each at its own time."""

    def __init__(self):
        self.frames = []
        self.t = 1_700_000_000.0

    def _add(self, src, dst, opcode, psn, dqpn, body, pad, ackreq, dt, tos=0):
        self.t += dt
        frame = (Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
                 / IP(src=src, dst=dst, flags="DF", ttl=64, tos=tos)
                 / UDP(sport=0xC123, dport=4791, chksum=0)
                 / BTH(opcode=opcode, padcount=pad, dqpn=dqpn, ackreq=ackreq, psn=psn & 0xFFFFFF)
                 / body)
        frame.time = self.t
        self.frames.append(frame)
        return len(self.frames)

    def req(self, opcode, psn, payload=0, ext=b"", dt=0.0001, src=A, dst=B, dqpn=QB, tos=0):
        """A request from A; `payload` is a length (bytes of a pattern) or bytes."""
        data = payload if isinstance(payload, bytes) else bytes(i % 251 for i in range(payload))
        pad = (4 - len(data) % 4) % 4
        return self._add(src, dst, opcode, psn, dqpn, Raw(ext + data + b"\0" * pad), pad, 1, dt,
                         tos)

    def cnp(self):
        """A congestion notification from B to A's QP (RoCEv2 annex A17.9: 16 reserved bytes)."""
        return self._add(B, A, CNP, 0, QA, Raw(b"\0" * 16), 0, 0, 0.0001)

    def ans(self, opcode, psn, syndrome=ACK, msn=0, payload=0, extra=b"", dt=0.0001, aeth=True):
        """An answer from B: an ACK or NAK, a READ response or an atomic ACK."""
        data = bytes(i % 251 for i in range(payload))
        pad = (4 - len(data) % 4) % 4
        body = Raw(extra + data + b"\0" * pad)
        if aeth:
            body = AETH(syndrome=syndrome, msn=msn) / body
        return self._add(B, A, opcode, psn, QA, body, pad, 0, dt)

    def ud(self, q_key, src_qp, dqpn, payload):
        data = bytes(payload)
        body = Raw(struct.pack("!II", q_key, src_qp) + data)
        return self._add(A, B, UD_SEND_ONLY, 0, dqpn, body, 0, 0, 0.0001)

    def mtu_1024(self, psn=0x100, msn=1):
        """A three-packet SEND that shows the path MTU (1024), and its ACK: frames 1-4."""
        self.req(SEND_FIRST, psn, 1024)
        self.req(SEND_MIDDLE, psn + 1, 1024)
        self.req(SEND_LAST, psn + 2, 100)
        self.ans(ACKNOWLEDGE, psn + 2, msn=msn)
        return psn + 3


def mad(attribute, data):
    header = struct.pack("!BBBBHHQHHI", 1, 0x07, 2, 0x03, 0, 0, 0x1234, attribute, 0, 0)
    return header + data.ljust(232, b"\0")


def u24(value):
    return struct.pack("!I", value)[1:]


def cm_req(qpn, psn):
    d = bytearray(232)
    d[0:4] = struct.pack("!I", 0xC0DE)
    d[8:16] = struct.pack("!Q", 0x0000000001064D2)
    d[32:35] = u24(qpn)
    d[43] = 0x02 << 1 & 0x06  # RC
    d[44:47] = u24(psn)
    d[50] = 3 << 4  # path MTU 1024
    return mad(0x0010, bytes(d))


def cm_rep(qpn, psn):
    d = bytearray(232)
    d[0:4] = struct.pack("!I", 0xBEEF)
    d[4:8] = struct.pack("!I", 0xC0DE)
    d[12:15] = u24(qpn)
    d[20:23] = u24(psn)
    return mad(0x0013, bytes(d))


def cm(c, first_psn_of_a):
    """A's REQ (B will send from 0x700) and B's REP (A sends from `first_psn_of_a`)."""
    c._add(A, B, UD_SEND_ONLY, 0, 1,
           Raw(struct.pack("!II", GSI_QKEY, 1) + cm_req(QA, 0x700)), 0, 0, 0.001)
    c._add(B, A, UD_SEND_ONLY, 0, 1,
           Raw(struct.pack("!II", GSI_QKEY, 1) + cm_rep(QB, first_psn_of_a)), 0, 0, 0.001)


CASES = []


def case(name, rule, frames_fn):
    c = Capture()
    frames = frames_fn(c)
    CASES.append((name, rule, frames, c.frames))


# --- opcode-sequence -------------------------------------------------------------------------
def opcode_break(c):
    p = c.mtu_1024()
    f = c.req(SEND_FIRST, p, 1024)
    g = c.req(WRITE_ONLY, p + 1, 8, reth(8))
    return [f, g]


def opcode_bend(c):
    # The SEND's LAST packet is not in the capture: a loss, not an opcode error.
    p = c.mtu_1024()
    c.req(SEND_FIRST, p, 1024)
    c.req(WRITE_ONLY, p + 2, 8, reth(8))
    return []


def reordered_bend(c):
    # The capture saw the middle packet late (reordered before the capture point).
    p = c.mtu_1024()
    c.req(SEND_FIRST, p, 1024)
    c.req(SEND_LAST, p + 2, 10)
    c.req(SEND_MIDDLE, p + 1, 1024)
    c.ans(ACKNOWLEDGE, p + 2, msn=2)
    return []


case("opcode-sequence-break", "opcode-sequence", opcode_break)
case("opcode-sequence-bend", None, opcode_bend)
case("reordered-bend", None, reordered_bend)


# --- payload-mtu, path-mtu --------------------------------------------------------------------
def payload_break(c):
    p = c.mtu_1024()
    c.req(SEND_FIRST, p, 1024)
    return [c.req(SEND_LAST, p + 1, 1100)]


def payload_bend(c):
    p = c.mtu_1024()
    c.req(SEND_FIRST, p, 1024)
    c.req(SEND_LAST, p + 1, 1024)
    return []


def path_mtu_break(c):
    f = c.req(SEND_FIRST, 0x10, 1000)
    c.req(SEND_LAST, 0x11, 10)
    return [f]


def path_mtu_bend(c):
    c.req(SEND_FIRST, 0x10, 256)
    c.req(SEND_LAST, 0x11, 10)
    return []


case("payload-mtu-break", "payload-mtu", payload_break)
case("payload-mtu-bend", None, payload_bend)
case("path-mtu-break", "path-mtu", path_mtu_break)
case("path-mtu-bend", None, path_mtu_bend)


# --- write-length, dma-length -----------------------------------------------------------------
def write_len(dma):
    def build(c):
        p = c.mtu_1024()
        f = c.req(WRITE_FIRST, p, 1024, reth(dma))
        g = c.req(WRITE_LAST, p + 1, 1000)
        return [f, g]
    return build


def dma_len(length):
    def build(c):
        p = c.mtu_1024()
        return [c.req(READ_REQUEST, p, 0, reth(length))]
    return build


case("write-length-break", "write-length", write_len(2100))
case("write-length-bend", None, lambda c: write_len(2024)(c) and [])
case("dma-length-break", "dma-length", dma_len(0x80000001))
case("dma-length-bend", None, lambda c: dma_len(0x80000000)(c) and [])


# --- read-psn-span ----------------------------------------------------------------------------
def read_span(next_offset):
    def build(c):
        p = c.mtu_1024()
        f = c.req(READ_REQUEST, p, 0, reth(4096))
        g = c.req(SEND_ONLY, p + next_offset, 16)
        return [f, g]
    return build


case("read-psn-span-break", "read-psn-span", read_span(2))
case("read-psn-span-bend", None, lambda c: read_span(4)(c) and [])


# --- starting-psn -----------------------------------------------------------------------------
def starting(first):
    def build(c):
        cm(c, 0x500)
        return [c.req(SEND_ONLY, first, 16, dt=0.001)]
    return build


case("starting-psn-break", "starting-psn", starting(0x400))
case("starting-psn-bend", None, lambda c: starting(0x500)(c) and [])
# Two packets the capture missed: told apart from a wrong starting PSN.
case("starting-psn-missing-bend", None, lambda c: starting(0x502)(c) and [])


# --- resend-same, resend-cause (and the retransmission after a genuine timeout) ---------------
def resend_same_break(c):
    p = c.mtu_1024()
    f = c.req(SEND_ONLY, p, 100)
    g = c.req(SEND_ONLY, p, 200, dt=0.5)
    return [f, g]


def timeout_bend(c):
    p = c.mtu_1024()
    c.req(SEND_ONLY, p, 100)
    c.req(SEND_ONLY, p, 100, dt=0.5)
    c.ans(ACKNOWLEDGE, p, msn=2)
    return []


def resend_cause(wait):
    def build(c):
        p = c.mtu_1024()
        f = c.req(SEND_ONLY, p, 100)
        c.ans(ACKNOWLEDGE, p, msn=2, dt=0.0001)
        g = c.req(SEND_ONLY, p, 100, dt=wait)
        return [f, g]
    return build


case("resend-same-break", "resend-same", resend_same_break)
case("timeout-resend-bend", None, timeout_bend)
case("resend-cause-break", "resend-cause", resend_cause(0.00001))
# The ACK may have been lost after the capture point: the timer resends, much later.
case("resend-cause-bend", None, lambda c: resend_cause(0.2)(c) and [])


# --- nak-go-back, ack-coverage ----------------------------------------------------------------
def nak(resend_from, ack_without_resend=False):
    def build(c):
        p = c.mtu_1024()
        for i in range(4):
            c.req(SEND_ONLY, p + i, 16)
        n = c.ans(ACKNOWLEDGE, p + 1, syndrome=NAK_SEQ, msn=2)
        if ack_without_resend:
            return [n, c.ans(ACKNOWLEDGE, p + 3, msn=5)]
        r = c.req(SEND_ONLY, p + resend_from, 16)
        for i in range(resend_from + 1, 4):
            c.req(SEND_ONLY, p + i, 16)
        if resend_from <= 1:
            # (after a go-back that skipped the NAK's PSN no ACK may cover it: see ack-coverage)
            c.ans(ACKNOWLEDGE, p + 3, msn=5)
        return [n, r]
    return build


case("nak-go-back-break", "nak-go-back", nak(2))
case("nak-go-back-bend", None, lambda c: nak(1)(c) and [])
case("ack-coverage-break", "ack-coverage", nak(0, ack_without_resend=True))


def go_back_crossing_nak(c):
    """A probe resends the lost PSN before the NAK for it arrives: the responder acknowledges
    beyond it with no copy sent after the NAK, legally (our own NIC under loss does this)."""
    p = c.mtu_1024()
    for i in range(4):
        c.req(SEND_ONLY, p + i, 16)
    c.ans(ACKNOWLEDGE, p, msn=2)
    for i in range(1, 4):
        c.req(SEND_ONLY, p + i, 16, dt=0.001 if i == 1 else 0.0001)
    c.ans(ACKNOWLEDGE, p + 1, syndrome=NAK_SEQ, msn=2)
    c.ans(ACKNOWLEDGE, p + 3, msn=5)
    return []


case("ack-coverage-race-bend", None, go_back_crossing_nak)


# --- rnr-wait ---------------------------------------------------------------------------------
def rnr(wait):
    def build(c):
        p = c.mtu_1024()
        c.req(SEND_ONLY, p, 16)
        n = c.ans(ACKNOWLEDGE, p, syndrome=0x20, msn=1)  # RNR NAK, timer 0: 655.36 ms
        r = c.req(SEND_ONLY, p, 16, dt=wait)
        c.ans(ACKNOWLEDGE, p, msn=2)
        return [n, r]
    return build


case("rnr-wait-break", "rnr-wait", rnr(0.001))
case("rnr-wait-bend", None, lambda c: rnr(0.7)(c) and [])


# --- uc-no-resend -----------------------------------------------------------------------------
def uc(second):
    def build(c):
        f = c.req(UC_SEND_ONLY, 0x40, 16)
        g = c.req(UC_SEND_ONLY, second, 16, dt=0.5)
        return [f, g]
    return build


case("uc-no-resend-break", "uc-no-resend", uc(0x40))
# A UC packet lost: never sent again, and not a violation.
case("uc-no-resend-bend", None, lambda c: uc(0x42)(c) and [])


# --- answer-unsent, msn -----------------------------------------------------------------------
def unsent(c):
    p = c.mtu_1024()
    c.req(SEND_ONLY, p, 16)
    return [c.ans(ACKNOWLEDGE, p + 5, msn=2)]


def coalesced_bend(c):
    p = c.mtu_1024()
    for i in range(3):
        c.req(SEND_ONLY, p + i, 16)
    c.ans(ACKNOWLEDGE, p + 2, msn=4)
    return []


def msn_break(c):
    p = c.mtu_1024()
    c.req(SEND_ONLY, p, 16)
    c.ans(ACKNOWLEDGE, p, msn=2)
    c.req(SEND_ONLY, p + 1, 16)
    return [c.ans(ACKNOWLEDGE, p + 1, msn=2)]


def msn_bend(c):
    # A duplicate's ACK carries the responder's count now, beyond the duplicate's own.
    p = c.mtu_1024()
    c.req(SEND_ONLY, p, 16)
    c.req(SEND_ONLY, p + 1, 16)
    c.ans(ACKNOWLEDGE, p + 1, msn=3)
    c.req(SEND_ONLY, p, 16, dt=0.5)
    c.ans(ACKNOWLEDGE, p, msn=3)
    return []


case("answer-unsent-break", "answer-unsent", unsent)
case("answer-unsent-bend", None, coalesced_bend)
case("msn-break", "msn", msn_break)
case("msn-bend", None, msn_bend)


# --- ack-credits ------------------------------------------------------------------------------
def credits_break(c):
    # 8 credits (code 6), one SEND: the responder has 7 receives left at least, advertised as 6
    # (code 5); 3 credits (code 3) takes back receives no message consumed.
    p = c.mtu_1024()
    c.req(SEND_ONLY, p, 16)
    f = c.ans(ACKNOWLEDGE, p, syndrome=6, msn=2)
    c.req(SEND_ONLY, p + 1, 16)
    return [f, c.ans(ACKNOWLEDGE, p + 1, syndrome=3, msn=3)]


def credits_bend(c):
    # Credits rise after the host posts receives (unseen on the wire), code 31 says nothing,
    # and a fall by one message, rounded down by the encoding (8 to 6), is legal.
    p = c.mtu_1024()
    c.req(SEND_ONLY, p, 16)
    c.ans(ACKNOWLEDGE, p, syndrome=3, msn=2)
    c.req(SEND_ONLY, p + 1, 16)
    c.ans(ACKNOWLEDGE, p + 1, syndrome=ACK, msn=3)
    c.req(SEND_ONLY, p + 2, 16)
    c.ans(ACKNOWLEDGE, p + 2, syndrome=6, msn=4)
    c.req(SEND_ONLY, p + 3, 16)
    c.ans(ACKNOWLEDGE, p + 3, syndrome=5, msn=5)
    return []


case("ack-credits-break", "ack-credits", credits_break)
case("ack-credits-bend", None, credits_bend)


# --- read-response, read-response-psn ---------------------------------------------------------
def read_break(c):
    p = c.mtu_1024()
    f = c.req(READ_REQUEST, p, 0, reth(2500))
    c.ans(RR_FIRST, p, msn=2, payload=1024)
    c.ans(RR_MIDDLE, p + 1, payload=1024, aeth=False)
    return [f, c.ans(RR_LAST, p + 2, msn=2, payload=400)]


def read_retry_bend(c):
    # The MIDDLE response was lost; the requester's timer asks again for the rest, from the
    # middle, and the responder answers that as a READ of its own (FIRST, LAST).
    p = c.mtu_1024()
    c.req(READ_REQUEST, p, 0, reth(2500))
    c.ans(RR_FIRST, p, msn=2, payload=1024)
    c.req(READ_REQUEST, p + 1, 0, reth(1476, va=0x1000 + 1024), dt=0.5)
    c.ans(RR_FIRST, p + 1, msn=2, payload=1024)
    c.ans(RR_LAST, p + 2, msn=2, payload=452)
    return []


def read_psn_break(c):
    p = c.mtu_1024()
    f = c.req(SEND_ONLY, p, 16)
    return [f, c.ans(RR_ONLY, p, msn=2, payload=16)]


def read_psn_bend(c):
    p = c.mtu_1024()
    c.req(READ_REQUEST, p, 0, reth(16))
    c.req(SEND_ONLY, p + 1, 16)
    c.ans(RR_ONLY, p, msn=2, payload=16)
    c.ans(ACKNOWLEDGE, p + 1, msn=3)
    return []


case("read-response-break", "read-response", read_break)
case("read-response-bend", None, read_retry_bend)
case("read-response-psn-break", "read-response-psn", read_psn_break)
case("read-response-psn-bend", None, read_psn_bend)


# --- atomic-ack-psn, atomic-replay ------------------------------------------------------------
def atomic_eth():
    return struct.pack("!QIQQ", 0x2000, 0x100, 1, 0)


def atomic_psn_break(c):
    p = c.mtu_1024()
    f = c.req(SEND_ONLY, p, 16)
    return [f, c.ans(ATOMIC_ACK, p, msn=2, extra=struct.pack("!Q", 5))]


def atomic_replay(again):
    def build(c):
        p = c.mtu_1024()
        f = c.req(FETCH_ADD, p, 0, atomic_eth())
        c.ans(ATOMIC_ACK, p, msn=2, extra=struct.pack("!Q", 5))
        c.req(FETCH_ADD, p, 0, atomic_eth(), dt=0.5)
        return [f, c.ans(ATOMIC_ACK, p, msn=2, extra=struct.pack("!Q", again))]
    return build


def atomic_psn_bend(c):
    p = c.mtu_1024()
    c.req(FETCH_ADD, p, 0, atomic_eth())
    c.ans(ATOMIC_ACK, p, msn=2, extra=struct.pack("!Q", 5))
    return []


case("atomic-ack-psn-break", "atomic-ack-psn", atomic_psn_break)
case("atomic-ack-psn-bend", None, atomic_psn_bend)
case("atomic-replay-break", "atomic-replay", atomic_replay(6))
case("atomic-replay-bend", None, lambda c: atomic_replay(5)(c) and [])


def atomic_answer_lost(c):
    """Both answers lost; after the timeout the responder acknowledges the duplicate SEND up to
    the atomic it executed — a plain ACK for the atomic's PSN: its answer was lost, and the
    requester asks again at once (an implied NAK), before the replayed answer arrives."""
    p = c.mtu_1024()
    c.req(SEND_ONLY, p, 16)
    c.req(FETCH_ADD, p + 1, 0, atomic_eth())
    c.req(SEND_ONLY, p, 16, dt=0.2)
    c.req(FETCH_ADD, p + 1, 0, atomic_eth())
    c.ans(ACKNOWLEDGE, p + 1, msn=3)
    c.req(FETCH_ADD, p + 1, 0, atomic_eth(), dt=0.00001)
    c.ans(ATOMIC_ACK, p + 1, msn=3, extra=struct.pack("!Q", 5))
    return []


case("atomic-answer-lost-bend", None, atomic_answer_lost)


# --- UD ---------------------------------------------------------------------------------------
case("ud-gsi-qkey-break", "ud-gsi-qkey", lambda c: [c.ud(0x1234, 1, 1, b"\0" * 256)])
case("ud-gsi-qkey-bend", None, lambda c: c.ud(GSI_QKEY, 1, 1, b"\0" * 256) and [])
case("ud-payload-break", "ud-payload", lambda c: [c.ud(0x42, 0x20, 0x30, b"\1" * 4100)])
case("ud-payload-bend", None, lambda c: c.ud(0x42, 0x20, 0x30, b"\1" * 4096) and [])
case("ud-source-qp-break", "ud-source-qp", lambda c: [c.ud(0x42, 0, 0x30, b"\1" * 64)])
case("ud-source-qp-bend", None, lambda c: c.ud(0x42, 1, 0x30, b"\1" * 64) and [])


# --- CNPs and ECN marks: reported, never a violation ------------------------------------------
def congestion(c):
    p = c.mtu_1024()
    c.req(SEND_ONLY, p, 16, tos=ECN_CE)
    c.req(SEND_ONLY, p + 1, 16, tos=ECN_CE)
    c.cnp()
    c.ans(ACKNOWLEDGE, p + 1, msn=3)
    return []


case("cnp-ecn-bend", None, congestion)


def main(out_dir):
    manifest = []
    for name, rule, frames, packets in CASES:
        wrpcap(f"{out_dir}/{name}.pcap", packets)
        manifest.append({"file": f"{name}.pcap", "rule": rule, "frames": frames})
    with open(f"{out_dir}/cases.json", "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
