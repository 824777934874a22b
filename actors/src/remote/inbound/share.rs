//! The connection's share of the node's memory budget for peers: every
//! charge for what the peer's bytes make this node hold (recipient ids, a
//! large message in reassembly, batches waiting for their actors) goes
//! through it, and a refused one pauses reading at the end of the read,
//! then cuts the connection if it stays over (the rule is
//! `budget::Pressure`; this is its clock and its effects).

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use super::{Peer, conn::Conn};
use crate::budget::{Charge, ConnBudget, Held, Pressure, Verdict};

/// Why something a peer sent was refused: the connection (or its address)
/// holds its share of the node's budget for peers already, or the node
/// holds the whole budget.
pub(super) const OVER_SHARE: &str =
    "the peer holds its share of SystemConfig::set_peer_memory_budget";

/// A connection's share: its account, and whether it went over.
pub(super) struct Share {
    /// The connection's share of the node-wide budget.
    account: Arc<ConnBudget>,
    /// A charge was refused during this read (set where only `&self` is
    /// at hand; taken at the end of the read).
    refused: AtomicBool,
    /// Over its share: reading pauses, then the connection is cut.
    pressure: Pressure,
}

impl Share {
    pub(super) fn new(account: Arc<ConnBudget>) -> Self {
        Self {
            account,
            refused: AtomicBool::new(false),
            pressure: Pressure::default(),
        }
    }

    /// The connection's share of the node's budget for peers.
    pub(super) fn account(&self) -> &Arc<ConnBudget> {
        &self.account
    }

    /// A charge was refused: the connection is over its share (see
    /// `budget::Pressure`), acted on at the end of the read.
    #[cold]
    pub(super) fn over(&self) {
        self.refused.store(true, Ordering::Relaxed);
    }

    /// Charges `cost` for a batch about to wait for an actor (`kind`: in
    /// its mailbox, or parked for it) to the connection's share; `None`,
    /// and the connection's reads pause, if it is over its share.
    #[inline]
    pub(super) fn charge(&self, kind: Held, cost: usize) -> Option<Charge> {
        let charge = self.account.charge(kind, cost);
        if charge.is_none() {
            self.over();
        }
        charge
    }

    /// Whether the end of this read must wait in [`hold_back`](Self::hold_back).
    #[inline]
    pub(super) fn must_hold_back(&self) -> bool {
        self.refused.load(Ordering::Relaxed) || self.pressure.is_over()
    }

    /// At the end of a read over its share: reading pauses until the
    /// connection is back within it, or it is disconnected (counted, and
    /// a sampled warning).
    #[cold]
    #[inline(never)]
    pub(super) async fn hold_back(&mut self, conn: &mut Conn) {
        // The runtime's clock, so that paused-time tests step through it.
        let now = || tokio::time::Instant::now().into_std();
        if self.refused.swap(false, Ordering::Relaxed) {
            self.pressure.refused(now());
        }
        // Told to the peer's liveness while paused, and reads on (or the
        // cut, or the connection's end dropping this future) untold.
        let mut paused: Option<ReadsPaused> = None;
        loop {
            let within = self.account.within_share();
            match self.pressure.poll(now(), within) {
                Verdict::Go => return,
                Verdict::Wait { until } => {
                    // Heartbeat acks come on proven connections only.
                    if paused.is_none() && conn.proven {
                        paused = Some(ReadsPaused::new(conn.peer.clone()));
                    }
                    let account = self.account.clone();
                    account.wait_release(until).await;
                }
                Verdict::Disconnect => return self.cut(conn),
            }
        }
    }

    #[cold]
    fn cut(&self, conn: &mut Conn) {
        let n = self.account.node().count_disconnect();
        let reason = format!(
            "peer stayed over its share of the memory budget for peers (holds {} bytes)",
            self.account.used()
        );
        static CUT: transport::LogLimit = transport::LogLimit::new();
        if let Some(s) = CUT.sample() {
            tracing::warn!(node = %transport::PeerText(conn.peer.node()), %reason, total = n, suppressed = s.suppressed, "disconnecting a peer over its memory share");
        }
        conn.abort(&reason);
    }
}

/// While alive, the peer's liveness knows that this node paused reading one
/// of its connections (`Peer::on_reads_paused`).
struct ReadsPaused(Arc<dyn Peer>);

impl ReadsPaused {
    fn new(peer: Arc<dyn Peer>) -> Self {
        peer.on_reads_paused(true);
        Self(peer)
    }
}

impl Drop for ReadsPaused {
    fn drop(&mut self) {
        self.0.on_reads_paused(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        budget::{NodeBudget, PAUSE_GRACE},
        remote::inbound::tests::conn,
    };

    /// A share of a node budget of `budget` bytes, and its node.
    fn share(budget: usize) -> (Share, Arc<NodeBudget>) {
        let node = NodeBudget::new(budget);
        let account = node.connect([127, 0, 0, 1].into());
        (Share::new(account), node)
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_within_the_share_goes_on_at_once() {
        let (mut share, _node) = share(1_000);
        let (mut conn, peer, _) = conn(true);
        assert!(share.charge(Held::Queued, 500).is_some());
        assert!(!share.must_hold_back());
        let start = tokio::time::Instant::now();
        share.hold_back(&mut conn).await;
        assert_eq!(start.elapsed(), std::time::Duration::ZERO);
        assert!(!conn.misbehaving);
        assert!(peer.events().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_charge_pauses_reading_then_cuts_the_connection() {
        let (mut share, node) = share(1_000);
        let (mut conn, peer, _) = conn(true);
        let held = share.charge(Held::Queued, 900).expect("fits");
        assert!(share.charge(Held::Queued, 200).is_none());
        assert!(share.must_hold_back());
        let start = tokio::time::Instant::now();
        share.hold_back(&mut conn).await;
        assert!(start.elapsed() >= PAUSE_GRACE);
        assert!(conn.misbehaving);
        assert_eq!(node.snapshot().disconnected, 1);
        // The peer's liveness knew of the pause while it lasted.
        assert_eq!(peer.events(), ["reads paused true", "reads paused false"]);
        drop(held);
    }

    #[tokio::test(start_paused = true)]
    async fn reading_resumes_once_the_share_is_given_back() {
        let (mut share, node) = share(1_000);
        let (mut conn, peer, _) = conn(true);
        let held = share.charge(Held::Queued, 900).expect("fits");
        assert!(share.charge(Held::Queued, 200).is_none());
        let release = async {
            tokio::time::sleep(PAUSE_GRACE / 4).await;
            drop(held);
        };
        let start = tokio::time::Instant::now();
        tokio::join!(share.hold_back(&mut conn), release);
        assert!(start.elapsed() < PAUSE_GRACE);
        assert!(!conn.misbehaving);
        assert_eq!(node.snapshot().disconnected, 0);
        assert_eq!(peer.events(), ["reads paused true", "reads paused false"]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unproven_connection_pauses_without_telling_the_peer() {
        let (mut share, _node) = share(1_000);
        let (mut conn, peer, _) = conn(false);
        let held = share.charge(Held::Queued, 900).expect("fits");
        assert!(share.charge(Held::Queued, 200).is_none());
        share.hold_back(&mut conn).await;
        assert!(conn.misbehaving);
        assert!(peer.events().is_empty(), "{:?}", peer.events());
        drop(held);
    }
}
