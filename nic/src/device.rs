//! A device: one emulated RNIC with its MAC, IP addresses, GID table and port MTU, its engine
//! thread and its link. Opening it gives a verbs [`Context`].

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam::channel::{self, Sender};
use roce_wire::EthernetAddress;
use smoltcp::wire::{IpAddress, IpCidr};

use crate::buf::BufPool;
use crate::control::{ClientId, Command, Control, Request, Response};
use crate::counters::{CounterSets, Snapshot};
use crate::doorbell::{qpns_for, Doorbell, ReadyBits, Record, Records};
use crate::engine::{Engine, RingMemory, Setup};
use crate::link::Link;
use crate::qp::PortInfo;
use crate::types::{Gid, Mtu};
use crate::verbs::{Backend, Context, VerbsError};
use crate::waker::{SharedWord, Waker};

/// How a device is set up.
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    pub name: String,
    pub mac: EthernetAddress,
    pub ips: Vec<IpAddr>,
    /// Prefix lengths of addresses in `ips` whose subnet is not a /24 (IPv4) or /64 (IPv6):
    /// the port reaches hosts inside its subnets directly, and has no router for others.
    pub prefix_lens: HashMap<IpAddr, u8>,
    /// The link's IP MTU; the largest path MTU follows from it (1500 gives 1024).
    pub mtu: u32,
    /// Peers' MAC addresses known in advance (for peers that do not answer ARP); others are
    /// learnt from the wire and resolved by ARP or neighbour discovery.
    pub neighbours: Vec<(IpAddr, EthernetAddress)>,
    /// How long a modify to RTR or an address handle waits for a peer's MAC before it fails.
    pub resolve_timeout: Duration,
    /// Follow Soft-RoCE where it deviates from the IBTA spec.
    pub rxe_compat: bool,
    /// IRN's two-level retransmission timer: with few packets unacknowledged, an RC requester
    /// also goes back after a timeout from the measured round trip (see
    /// [`crate::transport::requester::rto_low`]), not only after the QP's Local ACK Timeout.
    /// Off by default: the IBTA knows one timer (docs/rxe-differences.md).
    pub rto_low: bool,
    /// DCQCN congestion control: ECT(0) on everything sent, CNPs for marked packets, a rate
    /// limiter per QP. `None` (the default): off, as Soft-RoCE has none.
    pub dcqcn: Option<crate::dcqcn::Params>,
    /// The port's P_Key table (default: 0xffff, full member of the default partition).
    pub pkeys: crate::pkey::PKeyTable,
    pub rings: RingMemory,
    /// What hosts may create, in all and per host.
    pub limits: crate::limits::Limits,
    /// The CM's response timeout code (4.096 µs × 2^code): how long the peer is told we may
    /// take, and half the time a REQ, REP or DREQ waits before it is sent again. The RDMA CM's
    /// 20 (4.3 s) by default; tests that lose MADs on purpose use less.
    pub cm_response_timeout: u8,
    /// Engine threads the QPs are sharded over (QP `n` on thread `n % threads`), at least 1
    /// and at most [`crate::MAX_THREADS`]: 1 (the default) runs everything on one
    /// thread; more spread the per-packet work (copies, ICRCs) of different QPs over cores.
    pub threads: usize,
}

impl DeviceConfig {
    /// A device with one IPv4 address, MTU 4200 (path MTU 4096) and a MAC derived from the
    /// address (02:00:IP, locally administered).
    pub fn new(name: &str, ip: IpAddr) -> DeviceConfig {
        let mac = match ip {
            IpAddr::V4(v4) => {
                let o = v4.octets();
                EthernetAddress([0x02, 0x00, o[0], o[1], o[2], o[3]])
            }
            IpAddr::V6(v6) => {
                let o = v6.octets();
                EthernetAddress([0x02, 0x00, o[12], o[13], o[14], o[15]])
            }
        };
        DeviceConfig {
            name: name.to_owned(),
            mac,
            ips: vec![ip],
            prefix_lens: HashMap::new(),
            mtu: 4200,
            neighbours: Vec::new(),
            resolve_timeout: DEFAULT_RESOLVE_TIMEOUT,
            rxe_compat: false,
            rto_low: false,
            dcqcn: None,
            pkeys: crate::pkey::PKeyTable::default(),
            rings: RingMemory::Private,
            limits: crate::limits::Limits::default(),
            cm_response_timeout: crate::engine::CM_RESPONSE_TIMEOUT,
            threads: 1,
        }
    }

    /// Adds an address with the prefix length of its subnet.
    pub fn add_ip(&mut self, ip: IpAddr, prefix_len: u8) {
        self.ips.push(ip);
        self.prefix_lens.insert(ip, prefix_len);
    }

    /// The prefix length of `ip`'s subnet: as given, else /24 for IPv4 and /64 for IPv6.
    pub fn prefix_len(&self, ip: IpAddr) -> u8 {
        self.prefix_lens
            .get(&ip)
            .copied()
            .unwrap_or(if ip.is_ipv4() { 24 } else { 64 })
    }

    /// The port's addresses with their subnets: the link-local IPv6 address of the MAC (/64)
    /// first, then `ips`.
    fn subnets(&self) -> io::Result<Vec<IpCidr>> {
        let link_local = Gid::link_local(self.mac).ip();
        std::iter::once((link_local, 64))
            .chain(self.ips.iter().map(|ip| (*ip, self.prefix_len(*ip))))
            .map(|(ip, len)| {
                let max = if ip.is_ipv4() { 32 } else { 128 };
                if len > max {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("a prefix length of {len} is too long for {ip}"),
                    ));
                }
                Ok(IpCidr::new(IpAddress::from(ip), len))
            })
            .collect()
    }

    /// The GID table: index 0 the link-local GID of the MAC, then one per IP address (IPv4-mapped
    /// for IPv4), all RoCEv2 — as Soft-RoCE lays it out.
    pub fn gids(&self) -> Vec<Gid> {
        std::iter::once(Gid::link_local(self.mac))
            .chain(self.ips.iter().map(|ip| Gid::from_ip(*ip)))
            .collect()
    }
}

/// How long a peer's MAC is asked for by default: Linux's neighbour discovery gives up after
/// 3 solicitations one second apart.
pub const DEFAULT_RESOLVE_TIMEOUT: Duration = Duration::from_secs(3);

/// The engine's end of a device, shared by every context opened on it in this process (and by
/// the control socket that serves other processes).
struct Handle {
    name: String,
    control: Sender<Control>,
    waker: Arc<Waker>,
    /// The doorbell of the hosts in this process.
    doorbell: Doorbell,
    /// Every doorbell record the engine drains (those of hosts in other processes too).
    records: Arc<Records>,
    next_client: AtomicU64,
    stopped: AtomicBool,
}

impl Handle {
    fn gone(&self) -> VerbsError {
        VerbsError::DeviceGone {
            nic: self.name.clone(),
        }
    }
}

impl Backend for Handle {
    fn connect(&self) -> Result<ClientId, VerbsError> {
        Ok(self.next_client.fetch_add(1, Ordering::Relaxed))
    }

    fn call(&self, client: ClientId, request: Request) -> Result<Response, VerbsError> {
        let (reply, answer) = channel::bounded(1);
        self.control
            .send(Control::Call(Command {
                client,
                request,
                reply,
            }))
            .map_err(|_| self.gone())?;
        self.waker.signal();
        answer.recv().map_err(|_| self.gone())?
    }

    fn doorbell(&self) -> &Doorbell {
        &self.doorbell
    }

    fn alive(&self) -> bool {
        !self.stopped.load(Ordering::Relaxed)
    }
}

/// A running emulated RNIC.
pub struct Device {
    handle: Arc<Handle>,
    counters: Arc<CounterSets>,
    config: DeviceConfig,
    thread: Option<JoinHandle<()>>,
}

impl Device {
    /// Starts the device's engine on `link`.
    pub fn start(config: DeviceConfig, link: impl Link + 'static) -> io::Result<Device> {
        let max_mtu = Mtu::for_link_mtu(config.mtu).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "an MTU of {} cannot carry RoCE packets of even 256 bytes",
                    config.mtu
                ),
            )
        })?;
        let (control, requests) = channel::unbounded();
        // Hosts in other processes get doorbells of their own (see `Waker::add_host`): this
        // word is read in this process only.
        let waker = Waker::new(SharedWord::private())?;
        let ready = Arc::new(ReadyBits::private(qpns_for(config.limits.max_qp)));
        let records = Arc::new(Records::new(Record {
            host: None,
            ready: Arc::clone(&ready),
        }));
        let threads = config.threads.clamp(1, crate::engine::MAX_THREADS);
        let counters = CounterSets::new(threads);
        let port = PortInfo {
            mac: config.mac,
            gids: config.gids(),
            max_mtu,
            neighbours: config.neighbours.iter().copied().collect::<HashMap<_, _>>(),
            pkeys: config.pkeys.clone(),
        };
        let engine = Engine::new(Setup {
            name: config.name.clone(),
            port,
            // RoCE packets may come to any GID's address, the link-local one included.
            local_ips: config.gids().iter().map(|g| g.ip()).collect(),
            subnets: config.subnets()?,
            mtu: config.mtu,
            resolve_timeout: config.resolve_timeout,
            control: requests,
            waker: Arc::clone(&waker),
            records: Arc::clone(&records),
            link: match config.dcqcn {
                // A DCQCN NIC's packets are ECN-capable: switches mark them rather than drop.
                Some(_) => Box::new(crate::link::ecn::Ect::new(link)),
                None => Box::new(link),
            },
            pool: BufPool::stocked(4096, 384),
            counters: Arc::clone(&counters),
            threads,
            rings: config.rings.clone(),
            rxe_compat: config.rxe_compat,
            rto_low: config.rto_low,
            dcqcn: config.dcqcn,
            limits: config.limits,
            cm_response_timeout: config.cm_response_timeout,
        })?;
        let thread = std::thread::Builder::new()
            .name(format!("{}-engine", config.name))
            .spawn(move || engine.run())?;
        Ok(Device {
            handle: Arc::new(Handle {
                name: config.name.clone(),
                control,
                doorbell: Doorbell::new(ready, Arc::clone(&waker)),
                waker,
                records,
                next_client: AtomicU64::new(1),
                stopped: AtomicBool::new(false),
            }),
            counters,
            config,
            thread: Some(thread),
        })
    }

    /// Opens the device (`ibv_open_device`).
    pub fn open(&self) -> Result<Context, VerbsError> {
        Context::open(Arc::clone(&self.handle) as Arc<dyn Backend>)
    }

    pub fn config(&self) -> &DeviceConfig {
        &self.config
    }

    pub fn counters(&self) -> Snapshot {
        self.counters.snapshot()
    }

    /// The counters of engine thread `k` alone (0: the port thread, which also counts every
    /// frame in and out), `None` past the last: how the work spreads over the threads.
    pub fn thread_counters(&self, k: usize) -> Option<Snapshot> {
        self.counters.snapshot_of(k)
    }

    /// The engine's end, for the control socket that serves host programs in other processes.
    pub(crate) fn backend(&self) -> Arc<dyn Backend> {
        Arc::clone(&self.handle) as Arc<dyn Backend>
    }

    /// The doorbell records the engine drains, for the control socket to add its hosts' to.
    pub(crate) fn records(&self) -> &Arc<Records> {
        &self.handle.records
    }

    /// The engine's wake-up line, for the control socket to add its hosts' lines to.
    pub(crate) fn waker(&self) -> &Arc<Waker> {
        &self.handle.waker
    }

    /// Stops the engine: QPs go to the error state, the link is flushed.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.handle.stopped.store(true, Ordering::Relaxed);
            let _ = self.handle.control.send(Control::Shutdown);
            self.handle.waker.signal();
            let _ = thread.join();
        }
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        self.shutdown();
    }
}
