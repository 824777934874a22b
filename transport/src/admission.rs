//! The hook through which an endpoint charges what its pending handshakes
//! hold to an account it does not own: [`Admission`], set with
//! [`TransportConfig::set_admission`](crate::TransportConfig::set_admission).
//!
//! An inbound connection holds memory from the moment it is accepted,
//! before its peer has proved anything: its handshake task, read buffer,
//! handshake state and slot ([`PENDING_HANDSHAKE_COST`]). The slots bound
//! how many such connections there are; an [`Admission`] lets the
//! application count them in its own memory budget as well, so that what
//! peers make the node hold is one account.
//!
//! ```text
//!  accept ──slot──▶ charge_pending(ip, cost) ──Some(charge)──▶ handshake
//!                        │ None                                  │ proven: charge dropped
//!                        ▼                                       │ (the application charges
//!             the oldest pending handshake of the                │  the connection from then on)
//!             address with the most gives its charge             │ failed, timed out, evicted:
//!             back (it is evicted), and the charge is            ▼ charge dropped with the slot
//!             asked once more; refused again: closed
//! ```
//!
//! The hook is called once per accepted connection (twice when it
//! refused the first time), never per byte, and never under the endpoint's
//! locks; the charge it returns is dropped exactly once, by whichever of
//! the connection's ends comes first, possibly under the endpoint's slot
//! lock (so its `Drop` must not call back into the endpoint).

use std::{fmt, net::IpAddr};

/// What one inbound plaintext connection in its handshake holds in the
/// node's process, charged to an [`Admission`] while the peer has not
/// proved itself: 3,200 bytes. Measured: 1,000 pending handshakes that
/// exchanged their first flights grew an endpoint's heap by 2,830 bytes
/// each and its resident memory by 3,088 to 3,235 (the handshake task, a
/// 512-byte read buffer, the handshake state, a slot-table entry);
/// rounded up for the charge itself. Kernel socket buffers are not
/// counted. `mem::a_pending_handshake_holds_no_more_than_it_is_charged`
/// in the integration tests measures it, and fails above it.
pub const PENDING_HANDSHAKE_COST: usize = 3_200;

/// As [`PENDING_HANDSHAKE_COST`], for a TLS endpoint: 32 KiB. rustls's
/// handshake state for a ClientHello it has answered (its buffers, the
/// key schedule, the transcript while it waits for the client's
/// certificate) grew the heap by 30.0 to 30.4 KB per pending handshake
/// (resident memory by 17 to 19 KB: some buffers are not yet touched),
/// measured by the same test. Charged whatever the peer does next, since
/// a peer chooses when to stop.
pub const PENDING_TLS_HANDSHAKE_COST: usize = 32 * 1024;

/// An account outside the transport that inbound connections are charged
/// to while their handshake is pending, set with
/// [`TransportConfig::set_admission`](crate::TransportConfig::set_admission).
///
/// An inbound connection holds memory from the moment it is accepted,
/// before its peer has proved anything ([`PENDING_HANDSHAKE_COST`]). The
/// slots bound how many such connections there are; an `Admission` lets
/// the application count them in its own memory budget as well:
///
/// ```text
///  accept ──▶ charge_pending(ip, cost) ──Some(charge)──▶ slot, handshake
///                  │ None                                  │ proven: charge dropped
///                  ▼                                       │ (the application charges
///       the oldest pending handshake of the                │  the connection from then on)
///       address with the most gives its charge             │ failed, timed out, evicted:
///       back (it is evicted), and the charge is            ▼ charge dropped with the slot
///       asked once more; refused again: closed
/// ```
///
/// The actors' node-wide memory budget implements it; any other
/// implementation must not block, since it runs in the endpoint's accept
/// loop.
pub trait Admission: Send + Sync + fmt::Debug + 'static {
    /// Charges `bytes` for a connection from `ip` that has not proved
    /// itself yet. Returns what gives them back when dropped, or `None`
    /// to refuse: the endpoint then evicts its oldest pending handshake
    /// that holds a charge (from the address with the most), asks once
    /// more, and closes the new connection if refused again.
    fn charge_pending(&self, ip: IpAddr, bytes: usize) -> Option<PendingCharge>;
}

/// A charge made by an [`Admission`]: the endpoint holds it while the
/// connection's handshake is pending and drops it when the peer has proved
/// itself or the connection ends, whichever comes first. Dropping it gives
/// the bytes back (the guard inside does, in its own `Drop`).
pub struct PendingCharge {
    /// Held for its `Drop` only.
    _guard: Box<dyn Send>,
}

impl PendingCharge {
    /// A charge that `guard` gives back when it is dropped.
    pub fn new(guard: impl Send + 'static) -> Self {
        Self {
            _guard: Box::new(guard),
        }
    }
}

impl fmt::Debug for PendingCharge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PendingCharge")
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    };

    use super::*;

    /// An account of `limit` bytes that counts what its charges hold and
    /// how many it refused.
    #[derive(Debug, Default)]
    pub(crate) struct Account {
        pub(crate) limit: usize,
        pub(crate) held: Arc<AtomicUsize>,
        pub(crate) refused: AtomicUsize,
    }

    struct Give(Arc<AtomicUsize>, usize);

    impl Drop for Give {
        fn drop(&mut self) {
            self.0.fetch_sub(self.1, Ordering::AcqRel);
        }
    }

    impl Admission for Account {
        fn charge_pending(&self, _: IpAddr, bytes: usize) -> Option<PendingCharge> {
            let after = self.held.fetch_add(bytes, Ordering::AcqRel) + bytes;
            if after > self.limit {
                self.held.fetch_sub(bytes, Ordering::AcqRel);
                self.refused.fetch_add(1, Ordering::AcqRel);
                return None;
            }
            Some(PendingCharge::new(Give(self.held.clone(), bytes)))
        }
    }

    #[test]
    fn a_charge_gives_back_what_it_took_when_dropped() {
        let account = Account {
            limit: 10,
            ..Account::default()
        };
        let a = account.charge_pending([127, 0, 0, 1].into(), 6).unwrap();
        assert!(account.charge_pending([127, 0, 0, 1].into(), 6).is_none());
        assert_eq!(account.held.load(Ordering::Acquire), 6);
        drop(a);
        assert_eq!(account.held.load(Ordering::Acquire), 0);
        assert_eq!(account.refused.load(Ordering::Acquire), 1);
    }
}
