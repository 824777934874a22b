//! An optional lease for a cluster singleton (Akka's lease): an outside
//! authority (a lock in a database, a Kubernetes lease, a file on shared
//! storage) that at most one owner holds at a time. The downing strategy
//! already keeps one instance under its assumptions; a lease keeps it
//! when they fail (a paused node that wakes after the margin, a side that
//! did not down itself), as long as the lease's store is consistent.

use std::{
    fmt,
    future::Future,
    pin::Pin,
    sync::{Mutex, PoisonError},
};

/// What a [`Lease`] call returns.
pub type LeaseFuture<'a> = Pin<Box<dyn Future<Output = Result<bool, LeaseError>> + Send + 'a>>;

/// Why a lease could not be asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// The lease's store did not answer or refused the request. The
    /// manager asks again after its retry interval; check the store.
    #[error("lease unavailable: {0}")]
    Unavailable(String),
}

/// A lease one owner at a time may hold. `owner` names a node's
/// incarnation (`name@host:port#uid`); an implementation keeps whatever
/// expiry its store needs (a node that dies without releasing must not
/// hold it for ever).
///
/// Pass one to [`SingletonSettings::lease`](super::SingletonSettings::lease):
/// the singleton's instance starts on a node only once the node has
/// acquired the lease, and the node releases it once its instance has
/// stopped, before it tells the next host.
pub trait Lease: fmt::Debug + Send + Sync + 'static {
    /// Takes the lease for `owner`: `Ok(true)` if `owner` holds it now
    /// (taking it again is fine), `Ok(false)` if another owner does.
    ///
    /// # Errors
    /// [`LeaseError`] when the store cannot be asked; the manager asks
    /// again later.
    fn acquire<'a>(&'a self, owner: &'a str) -> LeaseFuture<'a>;

    /// Gives the lease up if `owner` holds it: `Ok(true)` if it did.
    ///
    /// # Errors
    /// [`LeaseError`] when the store cannot be asked.
    fn release<'a>(&'a self, owner: &'a str) -> LeaseFuture<'a>;

    /// Whether `owner` holds the lease now, as far as this node knows,
    /// without waiting (Akka's `checkLease`): for the singleton's actor
    /// to call before it acts on the outside world.
    fn check(&self, owner: &str) -> bool;
}

/// A lease in memory: shared by the nodes of one process (tests), never
/// expiring. Cheap to share behind an `Arc`.
#[derive(Default)]
pub struct MemoryLease {
    holder: Mutex<Option<String>>,
}

impl fmt::Debug for MemoryLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryLease")
            .field("holder", &self.holder())
            .finish()
    }
}

impl MemoryLease {
    /// A lease nobody holds.
    pub fn new() -> Self {
        Self::default()
    }

    /// Who holds it now.
    pub fn holder(&self) -> Option<String> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.holder.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn try_acquire(&self, owner: &str) -> bool {
        let mut h = self.lock();
        match h.as_deref() {
            Some(o) if o != owner => false,
            _ => {
                *h = Some(owner.to_owned());
                true
            }
        }
    }

    fn try_release(&self, owner: &str) -> bool {
        let mut h = self.lock();
        if h.as_deref() == Some(owner) {
            *h = None;
            true
        } else {
            false
        }
    }
}

impl Lease for MemoryLease {
    fn acquire<'a>(&'a self, owner: &'a str) -> LeaseFuture<'a> {
        let got = self.try_acquire(owner);
        Box::pin(async move { Ok(got) })
    }

    fn release<'a>(&'a self, owner: &'a str) -> LeaseFuture<'a> {
        let had = self.try_release(owner);
        Box::pin(async move { Ok(had) })
    }

    fn check(&self, owner: &str) -> bool {
        self.lock().as_deref() == Some(owner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now<T>(f: Pin<Box<dyn Future<Output = T> + Send + '_>>) -> T {
        // The memory lease answers at once: one poll finishes it.
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut f = f;
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => unreachable!("the memory lease never waits"),
        }
    }

    #[test]
    fn one_owner_at_a_time_until_it_releases() {
        let l = MemoryLease::new();
        assert!(now(l.acquire("a#1")).expect("in memory"));
        assert!(now(l.acquire("a#1")).expect("again, same owner"));
        assert!(!now(l.acquire("b#2")).expect("held by a"));
        assert!(l.check("a#1") && !l.check("b#2"));
        assert!(!now(l.release("b#2")).expect("b does not hold it"));
        assert_eq!(l.holder().as_deref(), Some("a#1"));
        assert!(now(l.release("a#1")).expect("a held it"));
        assert!(!l.check("a#1"));
        assert!(now(l.acquire("b#2")).expect("free now"));
        assert_eq!(l.holder().as_deref(), Some("b#2"));
    }
}
