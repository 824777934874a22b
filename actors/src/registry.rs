//! This node's registry: the local targets reachable by path (actors and
//! ask reply slots), the trait the remote reader delivers into, and the
//! dead-letter count. It sits below both refs and remoting, so that each
//! can reach local actors without knowing the other.

use std::{
    any::Any,
    collections::HashMap,
    fmt,
    future::Future,
    pin::Pin,
    sync::{
        Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak,
        atomic::{AtomicU64, Ordering},
    },
};

use bytes::Bytes;
use transport::{LogLimit, PeerText};

use crate::{
    budget::Charge,
    dead_letter::DeadLetterReason,
    mailbox::Refused,
    path::ActorPath,
    telemetry::SystemMeters,
    watch::{TooManyWatches, WatchSink},
};

/// The longest dead-letter reason logged, in characters: reasons quote
/// decode errors, which may quote a peer's bytes.
const MAX_REASON_CHARS: usize = 1024;

/// A dead letter's reason, made safe to log: control and bidirectional
/// formatting characters escaped (a peer's newline cannot start a line of
/// its own), cut after [`MAX_REASON_CHARS`]. Longer than
/// [`transport::PeerText`] allows, since the reasons are mostly this
/// node's own explanations.
struct Reason<'a>(&'a str);

impl fmt::Display for Reason<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use fmt::Write;
        let mut chars = self.0.chars();
        for c in chars.by_ref().take(MAX_REASON_CHARS) {
            if c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}') {
                write!(f, "{}", c.escape_debug())?;
            } else {
                f.write_char(c)?;
            }
        }
        if chars.next().is_some() {
            f.write_str("…")?;
        }
        Ok(())
    }
}

/// A local actor (or ask slot) that remote messages can be delivered to.
pub(crate) trait Target: Send + Sync + 'static {
    fn manifest(&self) -> u32;
    fn manifest_name(&self) -> &'static str;
    /// Appends a batch of `n` records (`[len u32 LE][payload]`, one read's
    /// worth for this target); refuses when full or closed. A target that
    /// keeps the batch takes `charge` with it (held until it is done with
    /// the batch); one that handles it at once leaves it to the caller.
    fn push_batch(&self, batch: &Bytes, n: usize, charge: &mut Charge) -> Result<(), Refused>;
    fn wait_space(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
    /// Whether it still takes messages (an actor that stopped does not).
    fn is_open(&self) -> bool {
        true
    }
    /// An ask's reply slot learns that no reply will come, and why (its
    /// request was a dead letter on the recipient's node). Nothing for
    /// actors.
    fn fail(&self, reason: &str) {
        let _ = reason;
    }
    /// An ask's reply slot learns that its request's node will send no
    /// reply, and why (`reply::NoReply`). Nothing for actors.
    fn no_reply(&self, why: crate::reply::NoReply) {
        let _ = why;
    }
    /// Adds a watcher; a node past its watch limit is refused.
    fn add_watcher(&self, sink: WatchSink) -> Result<(), TooManyWatches>;
    /// Removes `sink`'s watches (see `WatchSink::same`).
    fn remove_watcher(&self, sink: &WatchSink) {
        let _ = sink;
    }
    fn stop(&self);
    fn as_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

/// The local side of one node: who it is, what is reachable by path, and
/// what was lost.
pub(crate) struct Registry {
    /// The system's name, for logs.
    name: String,
    /// `name@host:port` with remoting, `name` without.
    node: Arc<str>,
    /// Paths are `tcp://` (remoting) or `local://`.
    remote: bool,
    targets: Mutex<HashMap<Arc<str>, Arc<dyn Target>>>,
    next_id: AtomicU64,
    dead_letters: AtomicU64,
    /// Samples the dead-letter log lines: a peer can cause any number.
    dead_letter_log: LogLimit,
    /// The node that refs decoded for this registry's targets resolve
    /// against (`node::Node`, type-erased because it sits above this
    /// module; see `serialization::with_decode_scope`).
    decode_scope: OnceLock<Weak<dyn Any + Send + Sync>>,
    /// This system's metric handles.
    meters: SystemMeters,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl Registry {
    pub(crate) fn new(name: &str, node: Arc<str>, remote: bool) -> Self {
        Self {
            name: name.to_owned(),
            remote,
            targets: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            dead_letters: AtomicU64::new(0),
            dead_letter_log: LogLimit::new(),
            decode_scope: OnceLock::new(),
            meters: SystemMeters::new(&node),
            node,
        }
    }

    /// Sets the node decodes resolve refs against; once, when the node is
    /// built.
    pub(crate) fn set_decode_scope(&self, node: Weak<dyn Any + Send + Sync>) {
        let _ = self.decode_scope.set(node);
    }

    /// The node decodes resolve refs against, while it lives.
    pub(crate) fn decode_scope(&self) -> Option<Arc<dyn Any + Send + Sync>> {
        self.decode_scope.get().and_then(Weak::upgrade)
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn node(&self) -> &Arc<str> {
        &self.node
    }

    /// A path on this node.
    pub(crate) fn path(&self, elements: &str) -> ActorPath {
        ActorPath::new(self.node.clone(), self.remote, elements)
    }

    /// A fresh number for an anonymous actor or reply slot.
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// A fresh reply-slot path, `/temp/$` and 64 random bits in hex: only
    /// a node that was handed the reply ref can address it (sequential ids
    /// let a third party answer someone else's ask). From the OS's random
    /// source, once per ask.
    pub(crate) fn temp_path(&self) -> ActorPath {
        self.path(&format!("/temp/${:016x}", transport::random_uid()))
    }

    /// The targets, locked. No other lock is taken while it is held.
    pub(crate) fn targets(&self) -> MutexGuard<'_, HashMap<Arc<str>, Arc<dyn Target>>> {
        // No user code runs under this lock; a poisoned map is consistent.
        self.targets.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn register(&self, elements: &str, target: Arc<dyn Target>) {
        self.targets().insert(elements.into(), target);
    }

    pub(crate) fn unregister(&self, elements: &str) {
        self.targets().remove(elements);
    }

    /// Stops the actor at `elements` and every actor under it, each by a
    /// stop that jumps its queue (what it has queued is not handled).
    /// Returns how many were told.
    pub(crate) fn stop_subtree(&self, elements: &str) -> usize {
        let targets: Vec<Arc<dyn Target>> = self
            .targets()
            .iter()
            .filter(|(k, _)| {
                k.strip_prefix(elements)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
            })
            .map(|(_, t)| t.clone())
            .collect();
        for t in &targets {
            t.stop();
        }
        targets.len()
    }

    pub(crate) fn lookup(&self, elements: &str) -> Option<Arc<dyn Target>> {
        self.targets().get(elements).cloned()
    }

    /// This system's metric handles.
    pub(crate) fn meters(&self) -> &SystemMeters {
        &self.meters
    }

    /// Dead letters so far.
    pub(crate) fn dead_letter_count(&self) -> u64 {
        self.dead_letters.load(Ordering::Relaxed)
    }

    /// Counts a dead letter and logs it (sampled: a peer can cause any
    /// number; its recipient path is the peer's text, escaped; `msg_type`
    /// is always this node's own label).
    pub(crate) fn dead_letter(
        &self,
        msg_type: &str,
        recipient: &dyn fmt::Display,
        why: &DeadLetterReason,
    ) {
        let n = self.dead_letters.fetch_add(1, Ordering::Relaxed) + 1;
        self.meters.dead_letters(1, why);
        if let Some(s) = self.dead_letter_log.sample() {
            let recipient = recipient.to_string();
            tracing::warn!(
                system = %self.name,
                msg_type,
                recipient = %PeerText(&recipient),
                reason = %Reason(&why.to_string()),
                label = why.label(),
                total = n,
                suppressed = s.suppressed,
                "dead letter"
            );
        }
    }

    /// Adds `n` dead letters of one kind with one log line.
    pub(crate) fn dead_letters_n(
        &self,
        n: u64,
        msg_type: &str,
        recipient: &dyn fmt::Display,
        why: &DeadLetterReason,
    ) {
        if n == 0 {
            return;
        }
        let total = self.dead_letters.fetch_add(n, Ordering::Relaxed) + n;
        self.meters.dead_letters(n, why);
        if let Some(s) = self.dead_letter_log.sample() {
            let recipient = recipient.to_string();
            tracing::warn!(system = %self.name, msg_type, recipient = %PeerText(&recipient), reason = %Reason(&why.to_string()), label = why.label(), count = n, total, suppressed = s.suppressed, "dead letters");
        }
    }
}
