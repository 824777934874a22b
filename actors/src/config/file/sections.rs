//! The sections of a configuration file as serde structs, their rules
//! (`validate`), and the `SystemConfig` they build. `ClusterSettings`
//! (`[cluster]`) lives in `config` beside `SystemConfig`; its rules are
//! here with the others.

use std::{collections::BTreeMap, net::SocketAddr, time::Duration};

use ipnet::IpNet;
use serde::{Deserialize, Deserializer, Serialize, Serializer, de::Error as _};
use transport::{Backoff, HeartbeatConfig};

use super::{
    Invalid, NONZERO, at_least,
    values::{ByteSize, any_network, auto_bytes, never_bytes, never_duration, routes},
    within,
};
use crate::config::{
    ClusterSettings, Downing, MAX_CLUSTER_EVENT_CAPACITY, MAX_CLUSTER_PACKET_SIZE,
    MAX_MESSAGE_SIZE_LIMIT, MIN_CLUSTER_PACKET_SIZE, MIN_CLUSTER_PERIOD, MIN_PEER_MEMORY_BUDGET,
    SystemConfig,
};

const U32: u64 = u32::MAX as u64;
const USIZE: u64 = usize::MAX as u64;

/// `[mailbox]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct MailboxSection {
    capacity: usize,
    bytes: ByteSize,
}

/// `[remote]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RemoteSection {
    advertised_address: String,
    #[serde(with = "humantime_serde")]
    resolve_timeout: Duration,
    pending_capacity: usize,
    max_message_size: ByteSize,
    system_message_buffer: usize,
    max_malformed_per_second: usize,
    max_associations: usize,
    #[serde(with = "humantime_serde")]
    association_idle_timeout: Duration,
    #[serde(with = "humantime_serde")]
    refused_connect_grace: Duration,
    max_concurrent_dials: usize,
    max_recipient_ids: usize,
    recipient_window: ByteSize,
    max_parked_bytes: ByteSize,
    peer_memory_budget: ByteSize,
    #[serde(deserialize_with = "routes")]
    routes: BTreeMap<String, SocketAddr>,
    #[serde(with = "any_network")]
    dial_allow_list: Option<Vec<IpNet>>,
    untrusted_mode: bool,
    trace_propagation: bool,
    message_runs: bool,
    lookup_paths: Vec<String>,
}

/// `[heartbeat]`: [`HeartbeatConfig`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct HeartbeatSection {
    #[serde(with = "humantime_serde")]
    interval: Duration,
    threshold: f64,
    #[serde(with = "humantime_serde")]
    acceptable_pause: Duration,
    #[serde(with = "humantime_serde")]
    min_std_deviation: Duration,
    max_samples: usize,
}

/// `[reconnect_backoff]`: [`Backoff`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct BackoffSection {
    #[serde(with = "humantime_serde")]
    min: Duration,
    #[serde(with = "humantime_serde")]
    max: Duration,
    jitter: f64,
}

/// `[transport]`: [`transport::TransportConfig`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct TransportSection {
    max_frame_size: ByteSize,
    queue_capacity: ByteSize,
    write_buffer_size: ByteSize,
    read_buffer_size: ByteSize,
    #[serde(with = "never_bytes")]
    producer_yield_bytes: Option<ByteSize>,
    #[serde(with = "auto_bytes")]
    send_buffer_size: Option<ByteSize>,
    #[serde(with = "auto_bytes")]
    recv_buffer_size: Option<ByteSize>,
    nodelay: bool,
    #[serde(with = "humantime_serde")]
    handshake_timeout: Duration,
    #[serde(with = "humantime_serde")]
    connect_timeout: Duration,
    #[serde(with = "humantime_serde")]
    close_timeout: Duration,
    accept_backlog: u64,
    max_inbound_connections: usize,
    max_inbound_connections_per_ip: usize,
    max_unproven_per_ip: usize,
    #[serde(with = "never_duration")]
    idle_eviction_after: Option<Duration>,
    #[serde(with = "humantime_serde")]
    control_stall_timeout: Duration,
    cookie_file: String,
    insecure_no_authentication: bool,
}

/// `[tls]`: [`transport::TlsConfig::from_pem_files`] and its flags.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct TlsSection {
    cert_chain: String,
    private_key: String,
    ca_certificates: String,
    client_auth: bool,
    allow_host_only_certificates: bool,
}

/// Every section: the whole file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct Settings {
    mailbox: MailboxSection,
    remote: RemoteSection,
    heartbeat: HeartbeatSection,
    reconnect_backoff: BackoffSection,
    transport: TransportSection,
    tls: TlsSection,
    cluster: ClusterSettings,
}

impl Default for MailboxSection {
    fn default() -> Self {
        Self::of(&SystemConfig::default())
    }
}

impl MailboxSection {
    /// The section as `config` holds it.
    pub(crate) fn of(config: &SystemConfig) -> Self {
        Self {
            capacity: config.mailbox_capacity,
            bytes: ByteSize::of(config.mailbox_bytes),
        }
    }

    pub(crate) fn validate(&self) -> Result<(), Invalid> {
        within("mailbox.capacity", self.capacity as u64, 1, USIZE)?;
        within("mailbox.bytes", self.bytes.0, 1, USIZE)
    }
}

impl Default for RemoteSection {
    fn default() -> Self {
        Self::of(&SystemConfig::default())
    }
}

impl RemoteSection {
    /// The section as `config` holds it.
    pub(crate) fn of(c: &SystemConfig) -> Self {
        Self {
            advertised_address: c.advertised.clone().unwrap_or_default(),
            resolve_timeout: c.resolve_timeout,
            pending_capacity: c.pending_capacity,
            max_message_size: ByteSize::of(c.max_message_size),
            system_message_buffer: c.system_buffer,
            max_malformed_per_second: c.max_malformed_per_second,
            max_associations: c.max_associations,
            association_idle_timeout: c.association_idle_timeout,
            refused_connect_grace: c.refused_connect_grace,
            max_concurrent_dials: c.max_concurrent_dials,
            max_recipient_ids: c.max_recipient_ids,
            recipient_window: ByteSize::of(c.recipient_window),
            max_parked_bytes: ByteSize::of(c.max_parked_bytes),
            peer_memory_budget: ByteSize::of(c.peer_memory_budget),
            routes: c.routes.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            dial_allow_list: c.dial_allow_list.clone(),
            untrusted_mode: c.untrusted_mode,
            trace_propagation: c.trace_propagation,
            message_runs: c.message_runs,
            lookup_paths: c.lookup_paths.clone(),
        }
    }

    pub(crate) fn validate(&self) -> Result<(), Invalid> {
        at_least("remote.resolve_timeout", self.resolve_timeout, NONZERO)?;
        let limit = MAX_MESSAGE_SIZE_LIMIT as u64;
        within("remote.max_message_size", self.max_message_size.0, 1, limit)?;
        let buffer = self.system_message_buffer as u64;
        within("remote.system_message_buffer", buffer, 1, USIZE)?;
        within(
            "remote.max_associations",
            self.max_associations as u64,
            1,
            USIZE,
        )?;
        let idle = self.association_idle_timeout;
        at_least("remote.association_idle_timeout", idle, NONZERO)?;
        let dials = self.max_concurrent_dials as u64;
        within("remote.max_concurrent_dials", dials, 1, USIZE)?;
        let ids = self.max_recipient_ids as u64;
        within("remote.max_recipient_ids", ids, 1, U32 - 1)?;
        within("remote.recipient_window", self.recipient_window.0, 1, USIZE)?;
        within("remote.max_parked_bytes", self.max_parked_bytes.0, 0, USIZE)?;
        let budget = self.peer_memory_budget.0;
        within(
            "remote.peer_memory_budget",
            budget,
            MIN_PEER_MEMORY_BUDGET as u64,
            USIZE,
        )?;
        within(
            "remote.pending_capacity",
            self.pending_capacity as u64,
            0,
            USIZE,
        )
    }
}

impl Default for HeartbeatSection {
    /// [`HeartbeatConfig::default`]'s values (a test holds them equal).
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(1),
            threshold: 10.0,
            acceptable_pause: Duration::from_secs(10),
            min_std_deviation: Duration::from_millis(100),
            max_samples: 200,
        }
    }
}

impl HeartbeatSection {
    /// The rules are [`HeartbeatConfig`]'s own setters', so a file and
    /// code refuse the same values; the error names the key.
    fn validate(&self) -> Result<(), Invalid> {
        self.config().map(drop)
    }

    fn config(&self) -> Result<HeartbeatConfig, Invalid> {
        let key = |key| move |e: transport::ConfigError| Invalid::new(key, e.to_string());
        let mut c = HeartbeatConfig::default();
        c.set_interval(self.interval)
            .map_err(key("heartbeat.interval"))?
            .set_threshold(self.threshold)
            .map_err(key("heartbeat.threshold"))?
            .set_acceptable_pause(self.acceptable_pause)
            .set_min_std_deviation(self.min_std_deviation)
            .map_err(key("heartbeat.min_std_deviation"))?
            .set_max_samples(self.max_samples)
            .map_err(key("heartbeat.max_samples"))?;
        Ok(c)
    }
}

impl Default for BackoffSection {
    fn default() -> Self {
        Self {
            min: transport::DEFAULT_BACKOFF_MIN,
            max: transport::DEFAULT_BACKOFF_MAX,
            jitter: transport::DEFAULT_BACKOFF_JITTER,
        }
    }
}

impl BackoffSection {
    /// The rules are [`Backoff::new`]'s, as for the heartbeat.
    fn validate(&self) -> Result<(), Invalid> {
        self.backoff().map(drop)
    }

    fn backoff(&self) -> Result<Backoff, Invalid> {
        Backoff::new(self.min, self.max, self.jitter).map_err(|e| {
            let reason = e.to_string();
            match e {
                // A rule about two keys: both origins are cited.
                transport::ConfigError::BackoffMaxBelowMin { .. } => Invalid {
                    or: Some("reconnect_backoff.min"),
                    ..Invalid::new("reconnect_backoff.max", reason)
                },
                transport::ConfigError::OutOfRange { .. } => {
                    Invalid::new("reconnect_backoff.jitter", reason)
                }
                _ => Invalid::new("reconnect_backoff.min", reason),
            }
        })
    }
}

impl Default for TransportSection {
    fn default() -> Self {
        use transport::*;
        Self {
            max_frame_size: ByteSize::of(DEFAULT_MAX_FRAME_SIZE),
            queue_capacity: ByteSize::of(DEFAULT_QUEUE_CAPACITY),
            write_buffer_size: ByteSize::of(DEFAULT_WRITE_BUFFER_SIZE),
            read_buffer_size: ByteSize::of(DEFAULT_READ_BUFFER_SIZE),
            producer_yield_bytes: Some(ByteSize::of(DEFAULT_PRODUCER_YIELD_BYTES)),
            send_buffer_size: None,
            recv_buffer_size: None,
            nodelay: true,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            close_timeout: DEFAULT_CLOSE_TIMEOUT,
            accept_backlog: 1024,
            max_inbound_connections: DEFAULT_MAX_INBOUND_CONNECTIONS,
            max_inbound_connections_per_ip: DEFAULT_MAX_INBOUND_CONNECTIONS_PER_IP,
            max_unproven_per_ip: DEFAULT_MAX_UNPROVEN_PER_IP,
            idle_eviction_after: Some(DEFAULT_IDLE_EVICTION_AFTER),
            control_stall_timeout: DEFAULT_CONTROL_STALL_TIMEOUT,
            cookie_file: String::new(),
            insecure_no_authentication: false,
        }
    }
}

impl TransportSection {
    /// The rules are [`TransportConfig`](transport::TransportConfig)'s
    /// own setters', as for the heartbeat, so a file and code refuse the
    /// same values; the file adds only that a number fits the setter's
    /// type (`u32` for the socket buffers, the backlog and a frame).
    fn validate(&self) -> Result<(), Invalid> {
        let mut config = transport::TransportConfig::default();
        self.apply(&mut config)
    }

    /// Sets every key on `c` through its setter; the error names the key.
    fn apply(&self, c: &mut transport::TransportConfig) -> Result<(), Invalid> {
        let key = |key| move |e: transport::ConfigError| Invalid::new(key, e.to_string());
        let u32_of = |key, n: u64| {
            within(key, n, 0, U32)?;
            Ok::<_, Invalid>(u32::try_from(n).expect("checked against u32::MAX"))
        };
        let usize_of = |key, n: ByteSize| {
            within(key, n.0, 0, USIZE)?;
            Ok::<_, Invalid>(n.get())
        };
        let frame = "transport.max_frame_size";
        c.set_max_frame_size(u32_of(frame, self.max_frame_size.0)? as usize)
            .map_err(key(frame))?;
        let queue = "transport.queue_capacity";
        c.set_queue_capacity(usize_of(queue, self.queue_capacity)?)
            .map_err(key(queue))?;
        let write = "transport.write_buffer_size";
        c.set_write_buffer_size(usize_of(write, self.write_buffer_size)?)
            .map_err(key(write))?;
        let read = "transport.read_buffer_size";
        c.set_read_buffer_size(usize_of(read, self.read_buffer_size)?)
            .map_err(key(read))?;
        let yield_bytes = "transport.producer_yield_bytes";
        let yield_at = self.producer_yield_bytes.map(|b| usize_of(yield_bytes, b));
        c.set_producer_yield_bytes(yield_at.transpose()?);
        let bytes = |name, size: Option<ByteSize>| size.map(|s| u32_of(name, s.0)).transpose();
        let (send, recv) = ("transport.send_buffer_size", "transport.recv_buffer_size");
        c.set_send_buffer_size(bytes(send, self.send_buffer_size)?)
            .map_err(key(send))?
            .set_recv_buffer_size(bytes(recv, self.recv_buffer_size)?)
            .map_err(key(recv))?;
        let backlog = "transport.accept_backlog";
        c.set_nodelay(self.nodelay)
            .set_close_timeout(self.close_timeout)
            .set_accept_backlog(u32_of(backlog, self.accept_backlog)?)
            .map_err(key(backlog))?
            .set_handshake_timeout(self.handshake_timeout)
            .map_err(key("transport.handshake_timeout"))?
            .set_connect_timeout(self.connect_timeout)
            .map_err(key("transport.connect_timeout"))?
            .set_control_stall_timeout(self.control_stall_timeout)
            .map_err(key("transport.control_stall_timeout"))?
            .set_max_inbound_connections(self.max_inbound_connections)
            .map_err(key("transport.max_inbound_connections"))?
            .set_max_inbound_connections_per_ip(self.max_inbound_connections_per_ip)
            .map_err(key("transport.max_inbound_connections_per_ip"))?
            .set_max_unproven_per_ip(self.max_unproven_per_ip)
            .map_err(key("transport.max_unproven_per_ip"))?
            .set_idle_eviction_after(self.idle_eviction_after)
            .set_insecure_no_authentication(self.insecure_no_authentication);
        if !self.cookie_file.is_empty() {
            c.set_cookie_file(&self.cookie_file);
        }
        Ok(())
    }
}

impl Default for TlsSection {
    fn default() -> Self {
        Self {
            cert_chain: String::new(),
            private_key: String::new(),
            ca_certificates: String::new(),
            client_auth: true,
            allow_host_only_certificates: false,
        }
    }
}

impl TlsSection {
    const FILES: [&'static str; 3] = ["tls.cert_chain", "tls.private_key", "tls.ca_certificates"];

    /// The three files together, or none; the flags away from their
    /// defaults only with them.
    fn validate(&self) -> Result<(), Invalid> {
        let files = [&self.cert_chain, &self.private_key, &self.ca_certificates];
        let given: Vec<_> = (0..3).filter(|&i| !files[i].is_empty()).collect();
        if let (Some(&set), Some(missing)) = (given.first(), (0..3).find(|i| !given.contains(i))) {
            return Err(Invalid {
                or: Some(Self::FILES[set]),
                keep_key: true,
                ..Invalid::new(
                    Self::FILES[missing],
                    format!(
                        "missing: {} is set, and TLS needs tls.cert_chain, tls.private_key \
                         and tls.ca_certificates",
                        Self::FILES[set]
                    ),
                )
            });
        }
        if !given.is_empty() && cfg!(not(feature = "tls")) {
            return Err(Invalid::new(
                Self::FILES[given[0]],
                "this build has no TLS (the actors crate's `tls` feature is off)".into(),
            ));
        }
        let defaults = Self::default();
        for (key, differs) in [
            ("tls.client_auth", self.client_auth != defaults.client_auth),
            (
                "tls.allow_host_only_certificates",
                self.allow_host_only_certificates != defaults.allow_host_only_certificates,
            ),
        ] {
            if differs && given.is_empty() {
                let reason = "TLS is off: set tls.cert_chain, tls.private_key and \
                              tls.ca_certificates";
                return Err(Invalid::new(key, reason.into()));
            }
        }
        Ok(())
    }
}

impl Settings {
    /// Every rule of every section: what the loader checks before it
    /// builds a [`SystemConfig`], and (for the sections a `SystemConfig`
    /// setter changes) what [`SystemConfig::validate`] checks.
    pub(crate) fn validate(&self) -> Result<(), Invalid> {
        self.mailbox.validate()?;
        self.remote.validate()?;
        self.heartbeat.validate()?;
        self.reconnect_backoff.validate()?;
        self.transport.validate()?;
        self.tls.validate()?;
        self.cluster.validate()
    }

    /// The configuration these (validated) settings describe.
    pub(crate) fn into_config(self) -> SystemConfig {
        let Self {
            mailbox: m,
            remote: r,
            heartbeat,
            reconnect_backoff: b,
            transport: t,
            tls,
            cluster,
        } = self;
        let mut c = SystemConfig {
            mailbox_capacity: m.capacity,
            mailbox_bytes: m.bytes.get(),
            advertised: (!r.advertised_address.is_empty()).then_some(r.advertised_address),
            resolve_timeout: r.resolve_timeout,
            pending_capacity: r.pending_capacity,
            max_message_size: r.max_message_size.get(),
            system_buffer: r.system_message_buffer,
            max_malformed_per_second: r.max_malformed_per_second,
            max_associations: r.max_associations,
            association_idle_timeout: r.association_idle_timeout,
            refused_connect_grace: r.refused_connect_grace,
            max_concurrent_dials: r.max_concurrent_dials,
            max_recipient_ids: r.max_recipient_ids,
            recipient_window: r.recipient_window.get(),
            max_parked_bytes: r.max_parked_bytes.get(),
            peer_memory_budget: r.peer_memory_budget.get(),
            routes: r.routes.into_iter().collect(),
            dial_allow_list: r.dial_allow_list,
            untrusted_mode: r.untrusted_mode,
            trace_propagation: r.trace_propagation,
            message_runs: r.message_runs,
            lookup_paths: r.lookup_paths,
            heartbeat: heartbeat
                .config()
                .expect("validated: the same setters' rules"),
            backoff: b.backoff().expect("validated: the same rules"),
            cluster,
            ..SystemConfig::default()
        };
        t.apply(&mut c.transport)
            .expect("validated: the same setters' rules");
        #[cfg(feature = "tls")]
        if !tls.cert_chain.is_empty() {
            let mut config = transport::TlsConfig::from_pem_files(
                tls.cert_chain,
                tls.private_key,
                tls.ca_certificates,
            );
            config
                .set_client_auth(tls.client_auth)
                .set_allow_host_only_certificates(tls.allow_host_only_certificates);
            c.tls = Some(config);
        }
        #[cfg(not(feature = "tls"))]
        let _ = tls;
        c
    }
}

impl Serialize for Downing {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Downing {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        let name = name.trim();
        match Self::ALL.into_iter().find(|d| d.name() == name) {
            Some(downing) => Ok(downing),
            None if name == "lease-majority" => Err(D::Error::custom(
                "lease-majority needs a lease, which is code: \
                 ClusterConfig::set_downing(DowningStrategy::LeaseMajority { .. })",
            )),
            None => Err(D::Error::custom(format!(
                "expected \"keep-majority\", \"static-quorum\", \"keep-oldest\" \
                 or \"down-all\", found {name:?}"
            ))),
        }
    }
}

/// The rules of `[cluster]`, one function per key (or per pair of keys
/// that bound each other): [`validate`](ClusterSettings::validate) runs
/// them all for a file, and each `ClusterConfig` setter runs its own, so
/// a file and code refuse the same values with the same words.
impl ClusterSettings {
    /// A seed is `host:port`.
    pub(crate) fn check_seed(seed: &str) -> Result<(), Invalid> {
        match seed.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(()),
            _ => Err(Invalid::new(
                "cluster.seeds",
                format!(
                    "expected seeds like \"10.0.0.1:2552\" or \"seed.example:2552\" \
                     (host:port), found {seed:?}"
                ),
            )),
        }
    }

    /// Both at least [`MIN_CLUSTER_PERIOD`], and the probe's answer
    /// within half its period (foca would otherwise take the half
    /// silently).
    pub(crate) fn check_probe(period: Duration, rtt: Duration) -> Result<(), Invalid> {
        at_least("cluster.probe_period", period, MIN_CLUSTER_PERIOD)?;
        at_least("cluster.probe_rtt", rtt, MIN_CLUSTER_PERIOD)?;
        if rtt > period / 2 {
            return Err(Invalid {
                or: Some("cluster.probe_period"),
                ..Invalid::new(
                    "cluster.probe_rtt",
                    format!(
                        "probe_rtt {} must be at most half of probe_period {}",
                        humantime::format_duration(rtt),
                        humantime::format_duration(period)
                    ),
                )
            });
        }
        Ok(())
    }

    /// At least [`MIN_CLUSTER_PERIOD`].
    pub(crate) fn check_announce_interval(d: Duration) -> Result<(), Invalid> {
        at_least("cluster.announce_interval", d, MIN_CLUSTER_PERIOD)
    }

    /// [`MIN_CLUSTER_PACKET_SIZE`] to [`MAX_CLUSTER_PACKET_SIZE`].
    pub(crate) fn check_max_packet_size(bytes: usize) -> Result<(), Invalid> {
        let (min, max) = (MIN_CLUSTER_PACKET_SIZE, MAX_CLUSTER_PACKET_SIZE);
        within(
            "cluster.max_packet_size",
            bytes as u64,
            min as u64,
            max as u64,
        )
    }

    /// At least 1.
    pub(crate) fn check_max_members(n: usize) -> Result<(), Invalid> {
        within("cluster.max_members", n as u64, 1, USIZE)
    }

    /// 1 to [`MAX_CLUSTER_EVENT_CAPACITY`].
    pub(crate) fn check_event_capacity(n: usize) -> Result<(), Invalid> {
        let max = MAX_CLUSTER_EVENT_CAPACITY as u64;
        within("cluster.event_capacity", n as u64, 1, max)
    }

    /// At least 1.
    pub(crate) fn check_quorum_size(n: usize) -> Result<(), Invalid> {
        within("cluster.quorum_size", n as u64, 1, USIZE)
    }

    /// Every rule above, and the keys that only make sense together: the
    /// downing strategy's parameters with their strategy (a
    /// `DowningStrategy` in code carries its own).
    pub(crate) fn validate(&self) -> Result<(), Invalid> {
        for seed in &self.seeds {
            Self::check_seed(seed)?;
        }
        Self::check_probe(self.probe_period, self.probe_rtt)?;
        Self::check_announce_interval(self.announce_interval)?;
        Self::check_max_packet_size(self.max_packet_size)?;
        Self::check_max_members(self.max_members)?;
        Self::check_event_capacity(self.event_capacity)?;
        if let Some(quorum) = self.quorum_size {
            Self::check_quorum_size(quorum)?;
        }
        let pair = |key, reason| Invalid {
            or: Some("cluster.downing"),
            ..Invalid::new(key, reason)
        };
        let downing = format!("downing is \"{}\"", self.downing.name());
        let static_quorum = self.downing == Downing::StaticQuorum;
        if static_quorum && self.quorum_size.is_none() {
            return Err(Invalid {
                keep_key: true,
                ..pair(
                    "cluster.quorum_size",
                    "missing: downing \"static-quorum\" needs quorum_size, the members a side \
                     needs to survive"
                        .into(),
                )
            });
        }
        if !static_quorum && self.quorum_size.is_some() {
            return Err(pair(
                "cluster.quorum_size",
                format!("quorum_size is for downing \"static-quorum\" only; {downing}"),
            ));
        }
        if !self.down_if_alone && self.downing != Downing::KeepOldest {
            return Err(pair(
                "cluster.down_if_alone",
                format!("down_if_alone = false is for downing \"keep-oldest\" only; {downing}"),
            ));
        }
        Ok(())
    }
}
