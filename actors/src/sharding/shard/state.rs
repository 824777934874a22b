//! A shard's state in one region ([`State`]: Inactive, Awaiting, Active,
//! HandingOff, with what each holds) and its [`Phase`], the state without
//! its data. The transitions are the state machine's (the parent module
//! draws them).

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Instant,
};

use super::{alloc::RegionId, buffer::Buffer};

/// A shard's state in one region.
#[derive(Debug)]
pub(crate) enum State<T> {
    /// Not held here; messages go to the owner (parked while none is
    /// known, or after too many hops).
    Inactive { parked: Buffer<T> },
    /// This region owns it in its view and waits for the others' markers.
    Awaiting {
        req: u64,
        /// Regions asked, and whose marker arrived.
        asked: BTreeSet<String>,
        acked: BTreeSet<String>,
        /// The region this region's own marker is relayed through, while
        /// it is still out.
        own_marker_out: Option<RegionId>,
        asked_at: Instant,
        buffer: Buffer<T>,
        /// Messages that came straight from their origin, by origin: they
        /// go behind what was forwarded (older messages of the same
        /// origin, sent while another region owned the shard).
        held: BTreeMap<String, Buffer<T>>,
    },
    /// Held here: its entities run here.
    Active,
    /// Its entities are stopping; then the buffer goes to the owner.
    HandingOff {
        since: Instant,
        /// A request to answer once released: its number and asker.
        answer: Option<(u64, RegionId)>,
        buffer: Buffer<T>,
        killed: bool,
    },
}

/// Which state, for reports and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Phase {
    Inactive,
    Awaiting,
    Active,
    HandingOff,
}

impl<T> State<T> {
    pub(crate) fn phase(&self) -> Phase {
        match self {
            Self::Inactive { .. } => Phase::Inactive,
            Self::Awaiting { .. } => Phase::Awaiting,
            Self::Active => Phase::Active,
            Self::HandingOff { .. } => Phase::HandingOff,
        }
    }

    /// Messages buffered (or parked, or held) here.
    pub(crate) fn buffered(&self) -> usize {
        match self {
            Self::Inactive { parked } => parked.len(),
            Self::Awaiting { buffer, held, .. } => {
                buffer.len() + held.values().map(Buffer::len).sum::<usize>()
            }
            Self::Active => 0,
            Self::HandingOff { buffer, .. } => buffer.len(),
        }
    }

    pub(super) fn bytes(&self) -> usize {
        match self {
            Self::Inactive { parked } => parked.bytes(),
            Self::Awaiting { buffer, held, .. } => {
                buffer.bytes() + held.values().map(Buffer::bytes).sum::<usize>()
            }
            Self::Active => 0,
            Self::HandingOff { buffer, .. } => buffer.bytes(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sharding::shard::buffer::{Envelope, Item};

    fn buffer(sizes: &[usize]) -> Buffer<u32> {
        let mut b = Buffer::default();
        for (n, bytes) in sizes.iter().enumerate() {
            b.push(Item::Msg(Envelope {
                entity: "e".into(),
                msg: u32::try_from(n).expect("a few items"),
                origin: "a".into(),
                hops: 0,
                bytes: *bytes,
            }));
        }
        b
    }

    #[test]
    fn each_state_reports_its_phase_and_everything_it_holds() {
        let now = Instant::now();
        let parked = State::Inactive {
            parked: buffer(&[10, 20]),
        };
        assert_eq!(parked.phase(), Phase::Inactive);
        assert_eq!((parked.buffered(), parked.bytes()), (2, 30));
        // Awaiting holds a forwarded buffer and one held buffer per
        // origin: all of them count.
        let awaiting = State::Awaiting {
            req: 1,
            asked: BTreeSet::new(),
            acked: BTreeSet::new(),
            own_marker_out: None,
            asked_at: now,
            buffer: buffer(&[5]),
            held: [
                ("b".to_owned(), buffer(&[7, 8])),
                ("c".to_owned(), buffer(&[9])),
            ]
            .into(),
        };
        assert_eq!(awaiting.phase(), Phase::Awaiting);
        assert_eq!((awaiting.buffered(), awaiting.bytes()), (4, 29));
        let active: State<u32> = State::Active;
        assert_eq!(active.phase(), Phase::Active);
        assert_eq!((active.buffered(), active.bytes()), (0, 0));
        let handing_off = State::HandingOff {
            since: now,
            answer: None,
            buffer: buffer(&[3, 3, 3]),
            killed: false,
        };
        assert_eq!(handing_off.phase(), Phase::HandingOff);
        assert_eq!((handing_off.buffered(), handing_off.bytes()), (3, 9));
    }
}
