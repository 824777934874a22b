//! Dialing a remote node, as its own unit: where to dial (a route, or the
//! node's host and port resolved), which of those addresses may be dialed
//! (the allow-list), how many dials a node runs at once (the permits),
//! what a failure says (a refusal is evidence, see `liveness`), and which
//! node answered. Plus [`Attempts`]: at most one attempt per association,
//! waiting included.
//!
//! The rules are pure functions ([`target`], [`allowed`], [`failed`],
//! [`identity`]); [`dial`] strings them together with the IO (the permit,
//! the resolver, the endpoint). When an attempt may start is
//! `liveness`'s decision (`Liveness::attempt_wait`), and so is what a
//! refused connect after a lost link means (the refused-connect grace).
//!
//! ```text
//!  permit (max_concurrent_dials) ─► target: route | host:port ─► resolve
//!     ─► allow-list: none left → refused here ─► connect (each in turn)
//!     ─► the peer names the node? no → failed ─► Dialed (permit held)
//! ```

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use ipnet::IpNet;
use tokio::sync::{Notify, SemaphorePermit};
use tokio_util::sync::CancellationToken;
use transport::TransportError;

use super::{context::Context, net::Incoming};

/// Why a connect attempt failed, and whether the node's address refused
/// it (`ECONNREFUSED`: nothing listens there), the second half of the
/// evidence that a node is gone (see `liveness`).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ConnectFailed {
    /// What failed, for logs and dead letters.
    pub(crate) reason: String,
    /// The address refused the connection.
    pub(crate) refused: bool,
}

impl From<String> for ConnectFailed {
    fn from(reason: String) -> Self {
        Self {
            reason,
            refused: false,
        }
    }
}

impl From<&str> for ConnectFailed {
    fn from(reason: &str) -> Self {
        reason.to_owned().into()
    }
}

/// Where a node is dialed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Target<'a> {
    /// `SystemConfig::set_route`: dialed elsewhere, identity unchanged.
    Route(SocketAddr),
    /// The `host:port` of the node's address, to resolve.
    Lookup(&'a str),
}

/// Where `node` (`name@host:port`) is dialed: its route if one is set,
/// otherwise its host and port.
///
/// # Errors
/// A node address without `@host:port`.
pub(crate) fn target<'a>(
    node: &'a str,
    routes: &HashMap<String, SocketAddr>,
) -> Result<Target<'a>, ConnectFailed> {
    if let Some(addr) = routes.get(node) {
        return Ok(Target::Route(*addr));
    }
    let (_, hostport) = node.split_once('@').ok_or("node has no host:port")?;
    Ok(Target::Lookup(hostport))
}

/// The addresses of `target` (a DNS lookup for a host name).
async fn resolve(target: Target<'_>) -> Result<Vec<SocketAddr>, ConnectFailed> {
    let hostport = match target {
        Target::Route(addr) => return Ok(vec![addr]),
        Target::Lookup(hostport) => hostport,
    };
    let resolved: Vec<SocketAddr> = tokio::net::lookup_host(hostport)
        .await
        .map_err(|e| format!("cannot resolve {hostport}: {e}"))?
        .collect();
    if resolved.is_empty() {
        return Err(format!("{hostport} resolves to no address").into());
    }
    Ok(resolved)
}

/// The addresses the allow-list (`SystemConfig::set_dial_allow_list`; none:
/// every address) lets this node dial, in their order; those off it are
/// not dialed at all.
///
/// # Errors
/// None is on the list: the error names them.
pub(crate) fn allowed(
    addrs: Vec<SocketAddr>,
    allow: Option<&[IpNet]>,
) -> Result<Vec<SocketAddr>, ConnectFailed> {
    let (addrs, refused): (Vec<SocketAddr>, Vec<SocketAddr>) = addrs
        .into_iter()
        .partition(|addr| allow.is_none_or(|nets| nets.iter().any(|n| n.contains(&addr.ip()))));
    if addrs.is_empty() {
        return Err(format!(
            "{} is not on the dial allow-list (SystemConfig::set_dial_allow_list)",
            join(&refused)
        )
        .into());
    }
    Ok(addrs)
}

/// What connecting to `addrs` failing with `e` says: `refused` when the
/// address refused the connection.
pub(crate) fn failed(addrs: &[SocketAddr], e: &TransportError) -> ConnectFailed {
    ConnectFailed {
        refused: matches!(e, TransportError::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused),
        reason: format!("connect to {}: {e}", join(addrs)),
    }
}

/// Checks that the peer that answered at `at` names itself `node`, the
/// node dialed (a different node listens there now).
///
/// # Errors
/// It names another node: the error names both.
pub(crate) fn identity(node: &str, named: &str, at: SocketAddr) -> Result<(), ConnectFailed> {
    if named != node {
        return Err(format!("peer at {at} identifies as {named:?}, expected {node:?}").into());
    }
    Ok(())
}

/// A connection to the node, handshake done, not yet started.
pub(crate) struct Dialed<'a> {
    /// The connection.
    pub(crate) conn: Incoming,
    /// One of the node's dial permits: the caller holds it until the
    /// connection is installed, so a dial counts until then.
    pub(crate) permit: SemaphorePermit<'a>,
}

/// Dials `node`: waits for a permit (at most `max_concurrent_dials` dials
/// at once, resolving included), resolves, keeps the addresses on the
/// allow-list, connects to each in turn, and checks that the peer is the
/// node.
///
/// # Errors
/// Any step failing, in words; `refused` when the address refused.
pub(crate) async fn dial<'a>(ctx: &'a Context, node: &str) -> Result<Dialed<'a>, ConnectFailed> {
    let permit = ctx.dials.acquire().await.map_err(|_| "system shut down")?;
    let addrs = resolve(target(node, &ctx.config.routes)?).await?;
    let addrs = allowed(addrs, ctx.config.dial_allow_list.as_deref())?;
    let conn = ctx
        .endpoint
        .connect(addrs.clone())
        .await
        .map_err(|e| failed(&addrs, &e))?;
    identity(node, &conn.peer().addr, conn.peer().socket_addr)?;
    Ok(Dialed { conn, permit })
}

/// An association's connect attempts: at most one in flight, waiting for
/// its turn included. A caller that needs the node now hurries an attempt
/// that waits for the backoff.
///
/// ```text
///          claim(paced)                      release
///  free ────────────────────► in flight ───────────────► free
///                              │  claim(false): hurried
///                              │  claim(true): nothing
/// ```
#[derive(Debug, Default)]
pub(crate) struct Attempts {
    in_flight: AtomicBool,
    /// Notified when someone needs a connect while an attempt waits for
    /// the backoff: it starts at once.
    hurry: Notify,
}

impl Attempts {
    /// Claims the one attempt: true if the caller starts it (and releases
    /// it when done). When one is in flight, false, and an unpaced claim
    /// (someone needs the node now) hurries it.
    pub(crate) fn claim(&self, paced: bool) -> bool {
        if self.in_flight.swap(true, Ordering::AcqRel) {
            if !paced {
                self.hurry.notify_waiters();
            }
            return false;
        }
        true
    }

    /// The attempt claimed is over.
    pub(crate) fn release(&self) {
        self.in_flight.store(false, Ordering::Release);
    }

    /// Whether an attempt is in flight.
    pub(crate) fn in_flight(&self) -> bool {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Waits until the claimed attempt may start. `wait(paced)` says how
    /// long from now (`Liveness::attempt_wait`); `paced` (a reconnect
    /// nobody waits for) until a claim hurries it.
    ///
    /// # Errors
    /// `cancel` fired: the system shut down.
    pub(crate) async fn when_due(
        &self,
        mut paced: bool,
        wait: impl Fn(bool) -> Duration,
        cancel: &CancellationToken,
    ) -> Result<(), ConnectFailed> {
        loop {
            // Enabled before the wait is read: a hurry after that wakes it.
            let hurried = self.hurry.notified();
            tokio::pin!(hurried);
            hurried.as_mut().enable();
            let wait = wait(paced);
            if wait.is_zero() {
                return Ok(());
            }
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = hurried => paced = false,
                () = cancel.cancelled() => return Err("system shut down".into()),
            }
        }
    }
}

/// Addresses for a log line or an error: `a, b, c`.
fn join(addrs: &[SocketAddr]) -> String {
    let list: Vec<String> = addrs.iter().map(ToString::to_string).collect();
    list.join(", ")
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().expect("a socket address")
    }

    #[test]
    fn a_route_is_dialed_instead_of_the_nodes_address() {
        let mut routes = HashMap::new();
        routes.insert("a@far:1".to_owned(), addr("10.0.0.1:7"));
        assert_eq!(
            target("a@far:1", &routes),
            Ok(Target::Route(addr("10.0.0.1:7")))
        );
        assert_eq!(target("b@near:2", &routes), Ok(Target::Lookup("near:2")));
        assert_eq!(
            target("no-host", &routes).unwrap_err().reason,
            "node has no host:port"
        );
    }

    #[tokio::test]
    async fn a_route_resolves_to_itself_and_an_ip_to_itself() {
        let route = resolve(Target::Route(addr("10.0.0.1:7"))).await;
        assert_eq!(route, Ok(vec![addr("10.0.0.1:7")]));
        let ip = resolve(Target::Lookup("127.0.0.1:9")).await;
        assert_eq!(ip, Ok(vec![addr("127.0.0.1:9")]));
        let bad = resolve(Target::Lookup("127.0.0.1")).await.unwrap_err();
        assert!(
            bad.reason.starts_with("cannot resolve 127.0.0.1"),
            "{bad:?}"
        );
        assert!(!bad.refused);
    }

    #[test]
    fn only_addresses_on_the_allow_list_are_dialed() {
        let addrs = vec![
            addr("10.1.2.3:1"),
            addr("192.168.0.1:1"),
            addr("10.9.9.9:2"),
        ];
        let ten: Vec<IpNet> = vec!["10.0.0.0/8".parse().expect("a network")];
        assert_eq!(
            allowed(addrs.clone(), Some(&ten)),
            Ok(vec![addr("10.1.2.3:1"), addr("10.9.9.9:2")])
        );
        assert_eq!(allowed(addrs.clone(), None), Ok(addrs), "no list: all");
        let off = allowed(vec![addr("192.168.0.1:1"), addr("[::1]:2")], Some(&ten));
        assert_eq!(
            off.unwrap_err().reason,
            "192.168.0.1:1, [::1]:2 is not on the dial allow-list (SystemConfig::set_dial_allow_list)"
        );
        assert!(
            allowed(vec![addr("10.0.0.1:1")], Some(&[][..])).is_err(),
            "empty list: none"
        );
    }

    #[test]
    fn a_refused_connect_is_told_from_other_failures() {
        let addrs = [addr("10.0.0.1:1"), addr("10.0.0.2:1")];
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let f = failed(&addrs, &TransportError::Io(refused));
        assert!(f.refused);
        assert!(
            f.reason.starts_with("connect to 10.0.0.1:1, 10.0.0.2:1: "),
            "{f:?}"
        );
        let timeout = std::io::Error::from(std::io::ErrorKind::TimedOut);
        assert!(!failed(&addrs, &TransportError::Io(timeout)).refused);
    }

    #[test]
    fn the_peer_must_name_the_node_dialed() {
        let at = addr("10.0.0.1:1");
        assert_eq!(identity("a@h:1", "a@h:1", at), Ok(()));
        assert_eq!(
            identity("a@h:1", "b@h:1", at).unwrap_err().reason,
            "peer at 10.0.0.1:1 identifies as \"b@h:1\", expected \"a@h:1\""
        );
    }

    #[test]
    fn one_attempt_at_a_time() {
        let a = Attempts::default();
        assert!(!a.in_flight());
        assert!(a.claim(true));
        assert!(a.in_flight());
        assert!(!a.claim(true) && !a.claim(false), "one in flight");
        a.release();
        assert!(!a.in_flight());
        assert!(a.claim(false));
    }

    #[tokio::test(start_paused = true)]
    async fn a_paced_attempt_waits_until_someone_hurries_it() {
        let a = Arc::new(Attempts::default());
        let cancel = CancellationToken::new();
        assert!(a.claim(true));
        // Paced: the backoff's 60 s; hurried: the first delay's 0.
        let wait = |paced: bool| {
            if paced {
                Duration::from_secs(60)
            } else {
                Duration::ZERO
            }
        };
        let t0 = tokio::time::Instant::now();
        let waiting = {
            let (a, cancel) = (a.clone(), cancel.clone());
            tokio::spawn(async move { a.when_due(true, wait, &cancel).await })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!waiting.is_finished(), "paced: waits for the backoff");
        assert!(!a.claim(false), "one in flight: hurried instead");
        // Bounded: unhurried, it would wait out the backoff again and again.
        let due = tokio::time::timeout(Duration::from_secs(30), waiting).await;
        due.expect("hurried").expect("no panic").expect("due");
        assert!(t0.elapsed() < Duration::from_secs(30));
        // A paced claim does not hurry it.
        let waiting = {
            let (a, cancel) = (a.clone(), cancel.clone());
            tokio::spawn(async move { a.when_due(true, wait, &cancel).await })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!a.claim(true));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!waiting.is_finished());
        // Shutdown ends the wait.
        cancel.cancel();
        let shut = waiting.await.expect("no panic").unwrap_err();
        assert_eq!(shut.reason, "system shut down");
    }

    #[tokio::test(start_paused = true)]
    async fn an_attempt_starts_when_its_wait_is_over() {
        let a = Attempts::default();
        let cancel = CancellationToken::new();
        let t0 = tokio::time::Instant::now();
        // The wait is read again after each sleep: 100 ms three times, then
        // nothing left.
        let reads = std::cell::Cell::new(0);
        let wait = |_| {
            reads.set(reads.get() + 1);
            if reads.get() <= 3 {
                Duration::from_millis(100)
            } else {
                Duration::ZERO
            }
        };
        a.when_due(true, wait, &cancel).await.expect("due");
        assert_eq!(reads.get(), 4);
        assert_eq!(t0.elapsed(), Duration::from_millis(300));
    }
}
