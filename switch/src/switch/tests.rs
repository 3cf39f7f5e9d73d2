//! The switch in simulated time: learning, line rate, incast, RED marking, PFC.

use super::*;
use roce_wire::{EthernetRepr, Extensions, FrameRepr, Kind, NetworkRepr, Opcode, Transport};

const MB: u64 = 1_000_000;

fn mac(host: u8) -> EthernetAddress {
    EthernetAddress([2, 0, 10, 0, 0, host])
}

/// A RoCEv2 WRITE frame of `len` bytes from host `src` to host `dst`, ECN-capable or not.
fn frame(src: u8, dst: u8, len: usize, ect: bool) -> Vec<u8> {
    let opcode = Opcode::new(Transport::Rc, Kind::WriteMiddle).unwrap();
    let header = 14 + 20 + 8 + 12 + 4;
    let repr = FrameRepr {
        ethernet: Some(EthernetRepr {
            dst: mac(dst),
            src: mac(src),
            vlan: None,
        }),
        network: NetworkRepr::Ipv4 {
            src: [10, 0, 0, src].into(),
            dst: [10, 0, 0, dst].into(),
            dscp: 0,
            ecn: if ect { 2 } else { 0 },
            ident: 0,
            ttl: 64,
            udp_src_port: 0xc000,
        },
        bth: roce_wire::bth::Repr::new(opcode, 0x11, 0),
        ext: Extensions::for_opcode(opcode),
        payload_len: len - header,
    };
    // The payload rounded down to whole words; the rest is Ethernet padding after the packet.
    let payload = (len - header) & !3;
    let repr = FrameRepr {
        payload_len: payload,
        ..repr
    };
    let mut buf = vec![0u8; len];
    repr.emit(&mut buf, &vec![0x33; payload]).unwrap();
    buf
}

fn switch(ports: usize, port: PortConfig) -> Switch<Vec<u8>> {
    Switch::new(SwitchConfig::new(vec![port; ports]))
}

/// Everything due by `now`: (port, frame or pause).
fn drain(sw: &mut Switch<Vec<u8>>, now: Instant) -> Vec<(usize, Transmit<Vec<u8>>)> {
    std::iter::from_fn(|| sw.poll_transmit(now)).collect()
}

fn frames_out(out: &[(usize, Transmit<Vec<u8>>)]) -> Vec<(usize, Vec<u8>)> {
    out.iter()
        .filter_map(|(p, t)| match t {
            Transmit::Frame(f) => Some((*p, f.clone())),
            Transmit::Pause { .. } => None,
        })
        .collect()
}

#[test]
fn unknown_destinations_are_flooded_and_learned_ones_switched() {
    let t0 = Instant::now();
    let mut sw = switch(3, PortConfig::default());
    let a_to_b = frame(1, 2, 200, false);
    sw.receive(0, a_to_b.clone(), t0, <[u8]>::to_vec);
    let out = frames_out(&drain(&mut sw, t0));
    assert_eq!(out, vec![(1, a_to_b.clone()), (2, a_to_b.clone())]);
    assert_eq!(sw.counters(1).flooded, 1);
    // B answers from port 1: A is known, so only port 0 hears it.
    let b_to_a = frame(2, 1, 200, false);
    sw.receive(1, b_to_a.clone(), t0, <[u8]>::to_vec);
    assert_eq!(frames_out(&drain(&mut sw, t0)), vec![(0, b_to_a)]);
    // And now B is known too (once the line is free again).
    sw.receive(0, a_to_b.clone(), t0, <[u8]>::to_vec);
    let t1 = t0 + Duration::from_millis(1);
    assert_eq!(frames_out(&drain(&mut sw, t1)), vec![(1, a_to_b)]);
    // A frame for a host on the port it came from goes nowhere.
    sw.receive(0, frame(3, 1, 200, false), t0, <[u8]>::to_vec);
    assert_eq!(sw.counters(0).tx_frames, 1);
    assert_eq!(sw.counters(0).rx_frames, 3);
}

#[test]
fn pause_frames_and_other_link_local_frames_are_never_forwarded() {
    let t0 = Instant::now();
    let mut sw = switch(2, PortConfig::default());
    let mut pause = vec![0u8; 60];
    Pause::priority(3, 100).emit(mac(1), &mut pause);
    sw.receive(0, pause, t0, <[u8]>::to_vec);
    let mut lldp = frame(1, 2, 100, false);
    lldp[0..6].copy_from_slice(&[0x01, 0x80, 0xc2, 0, 0, 0x0e]);
    sw.receive(0, lldp, t0, <[u8]>::to_vec);
    assert!(drain(&mut sw, t0).is_empty());
    assert_eq!(sw.counters(0).pause_received, 1);
}

/// Learns each of `hosts` (host n on port n-1) with one small frame to nobody known.
fn learn_hosts(sw: &mut Switch<Vec<u8>>, hosts: &[u8], now: Instant) {
    for &h in hosts {
        sw.receive(
            usize::from(h) - 1,
            frame(h, 99, 100, false),
            now,
            <[u8]>::to_vec,
        );
    }
    drain(sw, now);
}

/// Four senders at full line rate into one port of the same rate, for `duration`: returns
/// the frames each sender got through and the switch.
fn incast(port: PortConfig, ect: bool, obey_pauses: bool, duration: Duration) -> Switch<Vec<u8>> {
    let t0 = Instant::now();
    let mut sw = switch(5, port);
    learn_hosts(&mut sw, &[1, 2, 3, 4, 5], t0);
    let len = 1000;
    let gap = crate::queue::serialisation(len, port.rate);
    // Each sender's pause (from the switch's pause frames), as a NIC that obeys them has it.
    let mut paused_until = [t0; 4];
    let mut now = t0;
    while now < t0 + duration {
        for (s, until) in paused_until.iter().enumerate() {
            if !obey_pauses || *until <= now {
                sw.receive(s, frame(s as u8 + 1, 5, len, ect), now, <[u8]>::to_vec);
            }
        }
        for (p, out) in drain(&mut sw, now) {
            if let Transmit::Pause { quanta, .. } = out {
                paused_until[p] = now + pause_time(quanta, Rate(port.rate));
            }
        }
        now += gap;
    }
    sw
}

#[test]
fn an_incast_fills_the_buffer_and_drops_at_its_tail_while_the_line_stays_busy() {
    let port = PortConfig {
        rate: 1000 * MB,
        buffer: 100_000,
        ..PortConfig::default()
    };
    let sw = incast(port, false, false, Duration::from_millis(10));
    let c = sw.counters(4);
    // 10 ms at 1 Gbit/s is 1250 frames of 1000 bytes out of 5000 offered (the flooded ones
    // are the senders' first frames, which taught the switch where they are).
    let sent = c.tx_frames - c.flooded;
    assert!((1245..=1251).contains(&sent), "{c:?}");
    assert!(
        c.queue_max_bytes > 99_000 && c.queue_max_bytes <= 100_000,
        "{c:?}"
    );
    assert!(
        c.queue_bytes >= 99_000,
        "the queue sits at the buffer: {c:?}"
    );
    assert_eq!(c.dropped + sent + c.queue_bytes / 1000, 4 * 1250, "{c:?}");
    assert_eq!(c.ecn_marked, 0);
    assert_eq!(c.ecn_capable, 0);
}

#[test]
fn red_marks_ect_frames_from_kmin_and_all_of_them_past_kmax() {
    let red: Red = "kmin=10K,kmax=50K,pmax=0.2".parse().unwrap();
    let port = PortConfig {
        rate: 1000 * MB,
        buffer: 100_000,
        red: Some(red),
        ..PortConfig::default()
    };
    let sw = incast(port, true, false, Duration::from_millis(10));
    let c = sw.counters(4);
    // The queue sat past Kmax most of the time: nearly every frame was marked, and the
    // buffer still overflowed (nothing here slows the senders down).
    assert_eq!(
        c.ecn_capable,
        c.tx_frames - c.flooded + c.queue_bytes / 1000
    );
    assert!(c.ecn_marked as f64 > 0.9 * c.ecn_capable as f64, "{c:?}");
    assert!(c.dropped > 0);

    // Held between Kmin and Kmax (one frame in for each out), the marking rate is RED's.
    let t0 = Instant::now();
    let mut sw = switch(2, port);
    learn_hosts(&mut sw, &[1, 2], t0);
    let depth = 30 * 1024; // p = 0.2 * 20/40 = 0.1
    let mut now = t0;
    while sw.queue_bytes(1) + 1000 <= depth {
        sw.receive(0, frame(1, 2, 1000, false), now, <[u8]>::to_vec);
    }
    let n = 20_000;
    let mut marked = 0;
    for _ in 0..n {
        sw.receive(0, frame(1, 2, 1000, true), now, <[u8]>::to_vec);
        now += crate::queue::serialisation(1000, port.rate);
        for (_, out) in drain(&mut sw, now) {
            if let Transmit::Frame(f) = out {
                marked += u32::from(ecn::ecn(&f) == Some(Ecn::Ce));
            }
        }
    }
    let rate = f64::from(marked) / f64::from(n);
    let want = red.probability(sw.queue_bytes(1));
    assert!((rate - want).abs() < 0.02, "marked {rate}, RED says {want}");
    // Marked frames still decode with a good ICRC (the mark is outside its scope).
    assert!(sw.counters(1).ecn_marked > 0);
}

#[test]
fn with_pfc_the_senders_are_paused_and_nothing_is_dropped() {
    let port = PortConfig {
        rate: 1000 * MB,
        buffer: 100_000,
        pfc: Some("xoff=20K,xon=10K".parse().unwrap()),
        ..PortConfig::default()
    };
    let sw = incast(port, false, true, Duration::from_millis(20));
    let out = sw.counters(4);
    assert_eq!(out.dropped, 0, "{out:?}");
    let sent = out.tx_frames - out.flooded;
    assert!(
        (2490..=2501).contains(&sent),
        "the line stays busy: {out:?}"
    );
    for s in 0..4 {
        let c = sw.counters(s);
        assert!(c.pause_xoff_sent > 0, "sender {s} was never paused: {c:?}");
        assert!(c.pause_xon_sent > 0, "sender {s} was never let go: {c:?}");
    }
    // XOFF per ingress port is 20K: the egress queue stays well under the buffer.
    assert!(out.queue_max_bytes < 4 * 21_000 + 4 * 1000, "{out:?}");
}

#[test]
fn a_pause_from_the_peer_stops_the_egress_until_it_ends_or_an_xon() {
    let t0 = Instant::now();
    let port = PortConfig {
        rate: 1000 * MB,
        ..PortConfig::default()
    };
    let mut sw = switch(2, port);
    learn_hosts(&mut sw, &[1, 2], t0);
    let mut pause = vec![0u8; 60];
    // 1000 quanta at 1 Gbit/s: 512 µs.
    Pause::priority(3, 1000).emit(mac(2), &mut pause);
    sw.receive(1, pause.clone(), t0, <[u8]>::to_vec);
    sw.receive(0, frame(1, 2, 1000, false), t0, <[u8]>::to_vec);
    assert!(sw.is_paused(1, t0));
    assert!(drain(&mut sw, t0 + Duration::from_micros(500)).is_empty());
    assert_eq!(sw.next_deadline(), Some(t0 + Duration::from_micros(512)));
    assert_eq!(
        frames_out(&drain(&mut sw, t0 + Duration::from_micros(512))).len(),
        1
    );
    // Paused again, then let go at once by an XON.
    let t1 = t0 + Duration::from_millis(1);
    sw.receive(1, pause, t1, <[u8]>::to_vec);
    sw.receive(0, frame(1, 2, 1000, false), t1, <[u8]>::to_vec);
    assert!(drain(&mut sw, t1).is_empty());
    let mut xon = vec![0u8; 60];
    Pause::priority(3, 0).emit(mac(2), &mut xon);
    sw.receive(1, xon, t1, <[u8]>::to_vec);
    assert_eq!(frames_out(&drain(&mut sw, t1)).len(), 1);
    // A pause for another priority is counted and ignored.
    let mut other = vec![0u8; 60];
    Pause::priority(5, 1000).emit(mac(2), &mut other);
    sw.receive(1, other, t1, <[u8]>::to_vec);
    assert!(!sw.is_paused(1, t1));
    assert_eq!(sw.counters(1).pause_received, 4);
}
