//! Whom a node contacts to find its cluster, and at which address it is
//! found: the address it advertises ([`advertise`]), the seed names it
//! resolves in the background ([`resolve_seeds`]), and the rules, pure,
//! for whom it announces itself to ([`announce_targets`], [`LastKnown`])
//! and when it warns that it is still alone ([`AloneWarning`]).

use std::{
    collections::{HashSet, VecDeque},
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::{sync::mpsc, time::Instant};

use super::{ClusterError, lock};

/// The address peers send this node's membership packets to: the
/// configured one (port 0: the bound port), else the bound address, else,
/// when that is a wildcard, remoting's advertised host (`name@host:port`)
/// with the bound port.
pub(super) async fn advertise(
    configured: Option<SocketAddr>,
    bound: SocketAddr,
    node: &str,
) -> Result<SocketAddr, ClusterError> {
    let with_port = |mut a: SocketAddr| {
        if a.port() == 0 {
            a.set_port(bound.port());
        }
        a
    };
    if let Some(a) = configured {
        return match with_port(a) {
            a if a.ip().is_unspecified() => Err(ClusterError::Wildcard(a)),
            a => Ok(a),
        };
    }
    if !bound.ip().is_unspecified() {
        return Ok(bound);
    }
    let host = node
        .rsplit_once('@')
        .map_or(node, |(_, hp)| hp)
        .rsplit_once(':')
        .map_or(node, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let found = match host.parse::<std::net::IpAddr>() {
        Ok(ip) => Some(SocketAddr::new(ip, bound.port())),
        Err(_) => tokio::net::lookup_host((host, bound.port()))
            .await
            .ok()
            .and_then(|mut a| a.next()),
    };
    found
        .filter(|a| !a.ip().is_unspecified())
        .ok_or(ClusterError::Wildcard(bound))
}

/// How many departed members' addresses a node remembers to contact when
/// it finds itself alone ([`LastKnown`]): a few dozen packets a
/// second at most, about 30 bytes each of memory.
const LAST_KNOWN: usize = 32;
/// How long a node with seeds may be alone before it warns.
const ALONE_WARNING_AFTER: Duration = Duration::from_secs(10);
/// How often it warns again while still alone.
const ALONE_WARNING_EVERY: Duration = Duration::from_secs(60);

/// Resolves the seed names whenever the membership task asks, at most once
/// per `every` (a seed that is an IP address costs no lookup), and sends
/// the addresses back. Ends with the task.
pub(super) async fn resolve_seeds(
    names: Arc<Mutex<Vec<String>>>,
    mut asks: mpsc::Receiver<()>,
    out: mpsc::Sender<Vec<SocketAddr>>,
    every: Duration,
) {
    let mut last: Option<Instant> = None;
    while asks.recv().await.is_some() {
        if let Some(t) = last {
            tokio::time::sleep_until(t + every).await;
        }
        last = Some(Instant::now());
        let names = lock(&names).clone();
        let mut addrs = Vec::new();
        for n in &names {
            if let Ok(a) = n.parse::<SocketAddr>() {
                addrs.push(a);
                continue;
            }
            match tokio::net::lookup_host(n.as_str()).await {
                Ok(found) => addrs.extend(found),
                Err(e) => {
                    tracing::debug!(seed = %transport::PeerText(n), error = %e, "seed does not resolve");
                }
            }
        }
        if out.send(addrs).await.is_err() {
            return;
        }
    }
}

/// Where a node announces itself: every seed that is not a live member,
/// and, while it knows no live member (`live` is empty), the members it
/// knew last. A restarted seed is found by the others (it knows nobody),
/// and two islands that share a seed merge; an announce to a live member
/// would only cost a packet.
pub(super) fn announce_targets(
    seeds: &[SocketAddr],
    live: &HashSet<SocketAddr>,
    last_known: &LastKnown,
) -> Vec<SocketAddr> {
    let mut targets: Vec<SocketAddr> = seeds
        .iter()
        .copied()
        .filter(|s| !live.contains(s))
        .collect();
    if live.is_empty() {
        for a in &last_known.0 {
            if !targets.contains(a) {
                targets.push(*a);
            }
        }
    }
    targets
}

/// Membership addresses of the last members that went away, newest last
/// (at most [`LAST_KNOWN`]): contacted while this node knows no live
/// member, so a node whose cluster restarted around it, or that was cut
/// off, finds it again without its seeds.
#[derive(Debug, Default)]
pub(super) struct LastKnown(VecDeque<SocketAddr>);

impl LastKnown {
    /// Remembers a member's address that went away, forgetting the
    /// oldest past the bound.
    pub(super) fn remember(&mut self, udp: SocketAddr) {
        self.0.retain(|a| *a != udp);
        if self.0.len() == LAST_KNOWN {
            self.0.pop_front();
        }
        self.0.push_back(udp);
    }

    /// The addresses, oldest first.
    #[cfg(test)]
    pub(super) fn iter(&self) -> impl Iterator<Item = SocketAddr> + '_ {
        self.0.iter().copied()
    }
}

/// When a node with seeds that is still alone warns that no seed
/// answered: [`ALONE_WARNING_AFTER`] after it started (or was given new
/// seeds), then every [`ALONE_WARNING_EVERY`]. Time is passed in.
#[derive(Debug)]
pub(super) struct AloneWarning {
    /// When membership started.
    started: Instant,
    /// When a node still alone next warns.
    next: Instant,
}

impl AloneWarning {
    /// Membership started at `now`.
    pub(super) fn new(now: Instant) -> Self {
        Self {
            started: now,
            next: now + ALONE_WARNING_AFTER,
        }
    }

    /// New seeds at `now`: they get the first warning's grace again.
    pub(super) fn restart(&mut self, now: Instant) {
        self.next = now + ALONE_WARNING_AFTER;
    }

    /// Whether to warn at `now`, given whether the node is alone and has
    /// seeds: how long it has been waiting since it started, if so.
    pub(super) fn poll(&mut self, now: Instant, alone_with_seeds: bool) -> Option<Duration> {
        if !alone_with_seeds || now < self.next {
            return None;
        }
        // Every minute at most once the first warning is out.
        self.next = now + ALONE_WARNING_EVERY;
        Some(now.duration_since(self.started))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn seeds_that_are_not_live_are_announced_to_and_the_last_known_only_when_alone() {
        let mut last = LastKnown::default();
        last.remember(addr(3));
        last.remember(addr(1));
        let seeds = [addr(1), addr(2)];
        let alone = HashSet::new();
        assert_eq!(
            announce_targets(&seeds, &alone, &last),
            [addr(1), addr(2), addr(3)]
        );
        let live = HashSet::from([addr(2), addr(9)]);
        assert_eq!(announce_targets(&seeds, &live, &last), [addr(1)]);
    }

    #[test]
    fn the_last_known_keep_the_newest_once_each() {
        let mut last = LastKnown::default();
        for port in 0..=u16::try_from(LAST_KNOWN).expect("small") {
            last.remember(addr(port));
        }
        last.remember(addr(5));
        let held: Vec<SocketAddr> = last.iter().collect();
        assert_eq!(held.len(), LAST_KNOWN);
        assert_eq!(held.first(), Some(&addr(1)), "the oldest is forgotten");
        assert_eq!(held.last(), Some(&addr(5)), "one met again is the newest");
        assert_eq!(held.iter().filter(|a| **a == addr(5)).count(), 1);
    }

    #[test]
    fn a_node_alone_warns_after_the_grace_then_once_a_minute_and_new_seeds_restart_it() {
        let t0 = Instant::now();
        let mut w = AloneWarning::new(t0);
        let at = |d: Duration| t0 + d;
        assert_eq!(w.poll(at(ALONE_WARNING_AFTER / 2), true), None);
        // Not alone, or without seeds: no warning, and none is spent.
        assert_eq!(w.poll(at(ALONE_WARNING_AFTER), false), None);
        assert_eq!(
            w.poll(at(ALONE_WARNING_AFTER), true),
            Some(ALONE_WARNING_AFTER)
        );
        let again = ALONE_WARNING_AFTER + ALONE_WARNING_EVERY;
        assert_eq!(w.poll(at(again - Duration::from_secs(1)), true), None);
        assert_eq!(w.poll(at(again), true), Some(again));
        // New seeds: the grace starts again; the wait counts from the
        // start.
        w.restart(at(again + Duration::from_secs(1)));
        let next = again + Duration::from_secs(1) + ALONE_WARNING_AFTER;
        assert_eq!(w.poll(at(next - Duration::from_secs(1)), true), None);
        assert_eq!(w.poll(at(next), true), Some(next));
    }
}
