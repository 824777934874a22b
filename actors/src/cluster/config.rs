//! [`ClusterConfig`]: how a node joins and runs membership, built in code
//! or from a `[cluster]` section ([`ClusterSettings`]).
//!
//! A setter that can be given a bad value checks it with the rule the
//! configuration loader applies to the same key (the `ClusterSettings::
//! check_*` functions, which `ClusterSettings::validate` runs for a file),
//! so a file and code refuse the same values with the same words, and a
//! `ClusterConfig` is always valid: nothing is clamped, and
//! [`Cluster::join`](super::Cluster::join) has nothing left to check.

use std::{
    net::SocketAddr,
    num::{NonZeroU32, NonZeroUsize},
    time::Duration,
};

use super::{downing::DowningStrategy, wire};
use crate::config::{
    ClusterSettings, Downing, SystemConfig,
    file::{ConfigError, Invalid},
};

/// foca's suspect-to-down timer, which the downing strategy replaces: a
/// day, far past any `stable_after`.
const SUSPECT_TO_DOWN_NEVER: Duration = Duration::from_secs(24 * 3600);

/// How a node joins and runs membership. Defaults suit a LAN; tests and
/// benchmarks shorten the periods.
///
/// The setters: `&mut Self` for those that take any value, `Result<&mut
/// Self, ConfigError>` for those with a range, which they check with the
/// rule a `[cluster]` section's key gets from the configuration loader
/// (and leave the configuration unchanged on an error):
///
/// ```
/// use std::time::Duration;
/// use actors::cluster::ClusterConfig;
/// let mut config = ClusterConfig::new();
/// config
///     .set_seeds(["10.0.0.1:2552", "seed.example:2552"])?
///     .set_probe(Duration::from_millis(200), Duration::from_millis(100))?
///     .set_stable_after(Duration::from_secs(5));
/// let e = config.set_max_packet_size(100).unwrap_err();
/// assert_eq!(
///     e.to_string(),
///     "invalid value for \"cluster.max_packet_size\" set in code: must be at least 512, found 100"
/// );
/// # Ok::<(), actors::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    pub(super) seeds: Vec<String>,
    pub(super) udp_bind: Option<SocketAddr>,
    pub(super) udp_advertise: Option<SocketAddr>,
    pub(super) probe_period: Duration,
    pub(super) probe_rtt: Duration,
    pub(super) stable_after: Duration,
    pub(super) down_all_when_unstable: Option<Option<Duration>>,
    pub(super) downing: DowningStrategy,
    pub(super) shutdown_when_downed: bool,
    pub(super) remove_down_after: Duration,
    pub(super) announce_interval: Duration,
    pub(super) max_packet_size: usize,
    pub(super) max_members: usize,
    pub(super) event_capacity: usize,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl ClusterConfig {
    /// No seeds (the first node of a cluster), UDP on the TCP endpoint's
    /// address, foca's LAN periods: probe every 1.5 s, answer within
    /// 0.5 s; the keep-majority downing strategy deciding after 10 s of a
    /// stable view (`stable_after`); down members forgotten 15 s after.
    /// The same as an empty `[cluster]` section
    /// ([`ClusterSettings::default`]).
    pub fn new() -> Self {
        Self::from(&ClusterSettings::default())
    }

    /// Seed nodes' membership addresses (`host:port`, UDP; by default a
    /// node's TCP address): the node announces itself to them until one
    /// answers. Any member can be a seed; a seed list may name this node.
    /// Default: none (the first node of a cluster).
    ///
    /// # Errors
    /// A seed that is not `host:port` (as `cluster.seeds` in a file). The
    /// configuration is left unchanged.
    pub fn set_seeds<S: Into<String>>(
        &mut self,
        seeds: impl IntoIterator<Item = S>,
    ) -> Result<&mut Self, ConfigError> {
        let seeds: Vec<String> = seeds.into_iter().map(Into::into).collect();
        for seed in &seeds {
            ClusterSettings::check_seed(seed).map_err(Invalid::in_code)?;
        }
        self.seeds = seeds;
        Ok(self)
    }

    /// Seeds from a comma- or whitespace-separated list (an environment
    /// variable's value, say); empty entries are skipped.
    ///
    /// # Errors
    /// As [`set_seeds`](Self::set_seeds).
    pub fn set_seeds_from_list(&mut self, list: &str) -> Result<&mut Self, ConfigError> {
        self.set_seeds(
            list.split(|c: char| c == ',' || c.is_whitespace())
                .filter(|s| !s.is_empty()),
        )
    }

    /// The UDP address to bind; default: the TCP endpoint's bound address
    /// (same IP and port number). A wildcard (`0.0.0.0:2552`) binds every
    /// interface; peers then need an address to send to
    /// ([`set_udp_advertise`](Self::set_udp_advertise)).
    pub fn set_udp_bind(&mut self, addr: SocketAddr) -> &mut Self {
        self.udp_bind = Some(addr);
        self
    }

    /// The UDP address other members send membership packets to, when it
    /// is not the bound one: behind NAT, port mapping or a container's
    /// bridge (as remoting's advertised address is for TCP). Port 0 takes
    /// the bound port. Default: the bound address when it is not a
    /// wildcard, else remoting's advertised host (resolved once, at
    /// [`Cluster::join`](super::Cluster::join)) with the bound port.
    pub fn set_udp_advertise(&mut self, addr: SocketAddr) -> &mut Self {
        self.udp_advertise = Some(addr);
        self
    }

    /// How often a member probes another (`period`, default 1.5 s), and
    /// how long a probe waits for an answer before it asks others to
    /// probe indirectly (`rtt`, default 0.5 s). Set together because each
    /// bounds the other: the answer must come within half the period.
    /// Shorter: failures noticed sooner, for more packets per second.
    ///
    /// # Errors
    /// Either under 1 ms, or `rtt` over half of `period` (as
    /// `cluster.probe_period` and `cluster.probe_rtt` in a file). The
    /// configuration is left unchanged.
    pub fn set_probe(&mut self, period: Duration, rtt: Duration) -> Result<&mut Self, ConfigError> {
        ClusterSettings::check_probe(period, rtt).map_err(Invalid::in_code)?;
        self.probe_period = period;
        self.probe_rtt = rtt;
        Ok(self)
    }

    /// How long the view must stay the same (no member becoming
    /// unreachable or reachable, joining or going) before the downing
    /// strategy decides about the unreachable members (Akka's
    /// `stable-after`); default 10 s. A suspect member that refutes within
    /// it is never down; a node paused for longer may be downed (or down
    /// itself). Shorter: quicker failover; longer: fewer downs of slow but
    /// live nodes.
    ///
    /// It is also the down-removal margin by default: how long cluster
    /// singletons and sharding wait after they see a member down before
    /// they start what it ran (the time its side takes to down itself).
    pub fn set_stable_after(&mut self, d: Duration) -> &mut Self {
        self.stable_after = d;
        self
    }

    /// The same setting as [`set_stable_after`](Self::set_stable_after):
    /// how long a suspect member has to refute before the downing strategy
    /// decides.
    pub fn set_suspect_timeout(&mut self, d: Duration) -> &mut Self {
        self.set_stable_after(d)
    }

    /// Who is down when members are unreachable (the split-brain
    /// resolver): [`DowningStrategy`]; default keep-majority. Every member
    /// must use the same strategy.
    ///
    /// # Errors
    /// A static quorum of 0 (as `cluster.quorum_size` in a file). The
    /// configuration is left unchanged.
    pub fn set_downing(&mut self, strategy: DowningStrategy) -> Result<&mut Self, ConfigError> {
        if let DowningStrategy::StaticQuorum { quorum_size } = strategy {
            ClusterSettings::check_quorum_size(quorum_size).map_err(Invalid::in_code)?;
        }
        self.downing = strategy;
        Ok(self)
    }

    /// When reachability keeps changing for `stable_after` plus this long,
    /// every node downs itself (Akka's `down-all-when-unstable`): a
    /// cluster that cannot settle is safer stopped than split. `None`
    /// turns it off. Default: three quarters of `stable_after`, at least
    /// 4 s.
    pub fn set_down_all_when_unstable(&mut self, d: Option<Duration>) -> &mut Self {
        self.down_all_when_unstable = Some(d);
        self
    }

    /// Whether a node that the downing strategy puts on the losing side
    /// shuts its actor system down (`true`, the default: a downed node
    /// must not go on acting as a member, and its process should be
    /// restarted); with `false` only membership stops, and the
    /// application decides, on its own [`ClusterEvent`](super::ClusterEvent)
    /// (its [`Cluster::myself`](super::Cluster::myself) is then
    /// [`Down`](super::MemberState::Down)).
    pub fn set_shutdown_when_downed(&mut self, yes: bool) -> &mut Self {
        self.shutdown_when_downed = yes;
        self
    }

    /// How long a down or left member is remembered before it is
    /// forgotten ([`MemberState::Removed`](super::MemberState::Removed));
    /// default 15 s.
    pub fn set_remove_down_after(&mut self, d: Duration) -> &mut Self {
        self.remove_down_after = d;
        self
    }

    /// How often a node contacts the seeds that are not live members (and,
    /// while it knows no live member, the members it knew last); default
    /// 1 s. This is what heals a cluster after its seed restarted (the
    /// others contact the new incarnation) and what merges two islands
    /// that share a seed address. Seed names are re-resolved through DNS
    /// at most once per this interval while a seed is missing.
    ///
    /// # Errors
    /// Under 1 ms (as `cluster.announce_interval` in a file). The
    /// configuration is left unchanged.
    pub fn set_announce_interval(&mut self, d: Duration) -> Result<&mut Self, ConfigError> {
        ClusterSettings::check_announce_interval(d).map_err(Invalid::in_code)?;
        self.announce_interval = d;
        Ok(self)
    }

    /// The largest membership packet, payload and header; default 1400
    /// bytes (under a typical MTU).
    ///
    /// # Errors
    /// Under 512 (room for a probe and a few updates) or over 65,507 (the
    /// largest UDP datagram over IPv4), as `cluster.max_packet_size` in a
    /// file. The configuration is left unchanged.
    pub fn set_max_packet_size(&mut self, bytes: usize) -> Result<&mut Self, ConfigError> {
        ClusterSettings::check_max_packet_size(bytes).map_err(Invalid::in_code)?;
        self.max_packet_size = bytes;
        Ok(self)
    }

    /// The most other members this node keeps (every state, down ones
    /// included until forgotten); default
    /// [`DEFAULT_MAX_MEMBERS`](super::DEFAULT_MAX_MEMBERS). A packet that
    /// names one more is refused whole and counted
    /// ([`ClusterStats::full`](super::ClusterStats::full)). About 200
    /// bytes per member.
    ///
    /// # Errors
    /// Zero (as `cluster.max_members` in a file). The configuration is
    /// left unchanged.
    pub fn set_max_members(&mut self, n: usize) -> Result<&mut Self, ConfigError> {
        ClusterSettings::check_max_members(n).map_err(Invalid::in_code)?;
        self.max_members = n;
        Ok(self)
    }

    /// How many events a slow subscriber may fall behind before it misses
    /// some (`RecvError::Lagged`); default 1024.
    ///
    /// # Errors
    /// Zero, or over `usize::MAX / 2` (the most tokio's broadcast channel
    /// takes), as `cluster.event_capacity` in a file. The configuration is
    /// left unchanged.
    pub fn set_event_capacity(&mut self, n: usize) -> Result<&mut Self, ConfigError> {
        ClusterSettings::check_event_capacity(n).map_err(Invalid::in_code)?;
        self.event_capacity = n;
        Ok(self)
    }

    /// foca's configuration. The setters (or the loader) have checked
    /// every value, so none is adjusted here.
    pub(super) fn foca(&self) -> foca::Config {
        let mut c = foca::Config::new_lan(NonZeroU32::new(32).expect("non-zero"));
        c.probe_period = self.probe_period;
        // At least 1 ms and at most half the period: `check_probe`.
        c.probe_rtt = self.probe_rtt;
        // The downing strategy decides who is down, not a timer per
        // suspect: foca's own verdict is put out of reach.
        c.suspect_to_down_after = SUSPECT_TO_DOWN_NEVER;
        c.remove_down_after = self.remove_down_after;
        c.max_packet_size = NonZeroUsize::new(self.max_packet_size - wire::HEADER_LEN)
            .expect("at least 512: `check_max_packet_size`");
        c.notify_down_members = true;
        if let Some(p) = c.periodic_gossip.as_mut() {
            // Derived, not configured: a period of 1 ms gives 0 here.
            p.frequency = (self.probe_period / 7).max(Duration::from_millis(1));
        }
        if let Some(p) = c.periodic_announce.as_mut() {
            p.frequency = self.probe_period * 5;
        }
        c.periodic_announce_to_down_members = None;
        c
    }
}

/// The settings of a `[cluster]` section (see `actors/reference.toml`).
/// Only the loader makes a `ClusterSettings`, and it has run the rules
/// the setters run, so the values are taken as they are.
impl From<&ClusterSettings> for ClusterConfig {
    fn from(s: &ClusterSettings) -> Self {
        let downing = match s.downing {
            Downing::KeepMajority => DowningStrategy::KeepMajority,
            Downing::StaticQuorum => DowningStrategy::StaticQuorum {
                quorum_size: s
                    .quorum_size
                    .expect("the loader gives static-quorum its quorum_size"),
            },
            Downing::KeepOldest => DowningStrategy::KeepOldest {
                down_if_alone: s.down_if_alone,
            },
            Downing::DownAll => DowningStrategy::DownAll,
        };
        Self {
            seeds: s.seeds.clone(),
            udp_bind: s.udp_bind,
            udp_advertise: s.udp_advertise,
            probe_period: s.probe_period,
            probe_rtt: s.probe_rtt,
            stable_after: s.stable_after,
            down_all_when_unstable: s.down_all_when_unstable,
            downing,
            shutdown_when_downed: s.shutdown_when_downed,
            remove_down_after: s.remove_down_after,
            announce_interval: s.announce_interval,
            max_packet_size: s.max_packet_size,
            max_members: s.max_members,
            event_capacity: s.event_capacity,
        }
    }
}

/// The cluster settings of a system's configuration
/// ([`SystemConfig::cluster`]).
///
/// ```
/// use actors::cluster::{ClusterConfig, DowningStrategy};
/// let config = actors::SystemConfig::from_toml_str(r#"
///     [cluster]
///     seeds = ["10.0.0.1:2552", "10.0.0.2:2552"]
///     downing = "static-quorum"
///     quorum_size = 2
/// "#)?;
/// // Changed in code where needed, then `Cluster::join(&system, cluster)`.
/// let mut cluster = ClusterConfig::from(&config);
/// cluster.set_shutdown_when_downed(false);
/// # let _ = (cluster, DowningStrategy::DownAll);
/// # Ok::<(), actors::ConfigError>(())
/// ```
impl From<&SystemConfig> for ClusterConfig {
    fn from(config: &SystemConfig) -> Self {
        Self::from(config.cluster())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::ClusterConfig;
    use crate::{SystemConfig, cluster::DowningStrategy};

    const MS: Duration = Duration::from_millis(1);

    /// Each setter refuses what the `[cluster]` key refuses, with the
    /// same reason (one rule, two origins), and leaves the configuration
    /// as it was.
    #[test]
    fn setters_and_the_file_refuse_the_same_values_alike() {
        let mut config = ClusterConfig::new();
        let before = format!("{config:?}");
        for (refused, toml, key, reason) in [
            (
                config.set_seeds(["10.0.0.1"]).map(drop),
                "seeds = [\"10.0.0.1\"]",
                "cluster.seeds",
                "expected seeds like \"10.0.0.1:2552\" or \"seed.example:2552\" (host:port), \
                 found \"10.0.0.1\"",
            ),
            (
                config.set_seeds_from_list("10.0.0.1:2552, :2552").map(drop),
                "seeds = [\"10.0.0.1:2552\", \":2552\"]",
                "cluster.seeds",
                "expected seeds like \"10.0.0.1:2552\" or \"seed.example:2552\" (host:port), \
                 found \":2552\"",
            ),
            (
                config.set_probe(Duration::ZERO, MS).map(drop),
                "probe_period = \"0s\"\nprobe_rtt = \"1ms\"",
                "cluster.probe_period",
                "must be at least 1ms, found 0s",
            ),
            (
                config.set_probe(1500 * MS, Duration::ZERO).map(drop),
                "probe_rtt = \"0s\"",
                "cluster.probe_rtt",
                "must be at least 1ms, found 0s",
            ),
            (
                config.set_probe(1500 * MS, 1000 * MS).map(drop),
                "probe_rtt = \"1s\"",
                "cluster.probe_rtt",
                "probe_rtt 1s must be at most half of probe_period 1s 500ms",
            ),
            (
                config.set_announce_interval(Duration::ZERO).map(drop),
                "announce_interval = \"0s\"",
                "cluster.announce_interval",
                "must be at least 1ms, found 0s",
            ),
            (
                config.set_max_packet_size(100).map(drop),
                "max_packet_size = 100",
                "cluster.max_packet_size",
                "must be at least 512, found 100",
            ),
            (
                config.set_max_packet_size(65_508).map(drop),
                "max_packet_size = 65508",
                "cluster.max_packet_size",
                "must be at most 65507, found 65508",
            ),
            (
                config.set_max_members(0).map(drop),
                "max_members = 0",
                "cluster.max_members",
                "must be at least 1, found 0",
            ),
            (
                config.set_event_capacity(0).map(drop),
                "event_capacity = 0",
                "cluster.event_capacity",
                "must be at least 1, found 0",
            ),
            (
                config
                    .set_downing(DowningStrategy::StaticQuorum { quorum_size: 0 })
                    .map(drop),
                "downing = \"static-quorum\"\nquorum_size = 0",
                "cluster.quorum_size",
                "must be at least 1, found 0",
            ),
        ] {
            let in_code = refused.expect_err(toml).to_string();
            assert_eq!(
                in_code,
                format!("invalid value for \"{key}\" set in code: {reason}"),
            );
            let in_file = SystemConfig::from_toml_str(&format!("[cluster]\n{toml}"))
                .expect_err(toml)
                .to_string();
            assert_eq!(
                in_file,
                format!("invalid value for \"{key}\" in the TOML text: {reason}"),
            );
        }
        assert_eq!(
            format!("{config:?}"),
            before,
            "a refused value changes nothing"
        );
    }

    /// The largest event capacity tokio's broadcast channel takes, and
    /// one more: code cannot reach the channel's panic.
    #[test]
    fn the_event_capacity_stops_where_the_channel_does() {
        let mut config = ClusterConfig::new();
        config.set_event_capacity(usize::MAX / 2).unwrap();
        let e = config.set_event_capacity(usize::MAX / 2 + 1).unwrap_err();
        assert!(
            e.to_string().ends_with(&format!(
                "must be at most {}, found {}",
                usize::MAX / 2,
                usize::MAX / 2 + 1
            )),
            "{e}"
        );
    }

    /// The bounds themselves are taken, and what is taken is what foca
    /// gets: nothing is adjusted on the way.
    #[test]
    fn values_at_the_bounds_are_taken_as_they_are() {
        let mut config = ClusterConfig::new();
        config
            .set_probe(2 * MS, MS)
            .unwrap()
            .set_announce_interval(MS)
            .unwrap()
            .set_max_packet_size(512)
            .unwrap()
            .set_max_members(1)
            .unwrap()
            .set_downing(DowningStrategy::StaticQuorum { quorum_size: 1 })
            .unwrap()
            .set_seeds_from_list("10.0.0.1:2552 seed.example:2552,,[::1]:2552")
            .unwrap();
        assert_eq!(
            config.seeds,
            ["10.0.0.1:2552", "seed.example:2552", "[::1]:2552"]
        );
        let foca = config.foca();
        assert_eq!((foca.probe_period, foca.probe_rtt), (2 * MS, MS));
        assert_eq!(foca.max_packet_size.get(), 512 - super::wire::HEADER_LEN);
        config.set_max_packet_size(65_507).unwrap();
        assert_eq!(
            config.foca().max_packet_size.get(),
            65_507 - super::wire::HEADER_LEN
        );
    }
}
