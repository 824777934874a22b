//! Remote messages decoded on the actor's task: a batch (one read's
//! records for this actor) is decoded in slices of at most
//! [`DECODE_SLICE_BYTES`], the plain records in the run loop itself and
//! the records with an extension block out of line
//! ([`decode_ext_records`]); and the messages a stopped actor never
//! handled are decoded once more to fail the asks among them
//! ([`drop_unhandled`]).

use std::{any::Any, collections::VecDeque, panic::AssertUnwindSafe, sync::Arc};

use super::outcome::panic_message;
use crate::{
    dead_letter::DeadLetterReason,
    mailbox::{Queued, STOP_RECORD, next_record_ext},
    serialization::with_decode_scope,
    trace::TraceContext,
};

/// A remote message that did not decode: a dead letter that says why.
#[cold]
#[inline(never)]
pub(super) fn undecodable<M>(
    registry: &crate::registry::Registry,
    path: &crate::path::ActorPath,
    e: &crate::error::SerializationError,
) {
    registry.dead_letter(
        std::any::type_name::<M>(),
        path,
        &DeadLetterReason::Undecodable(e.to_string().into()),
    );
}

/// Drops the messages an actor that stopped never handled, and says how
/// many there were, for one dead-letter count.
///
/// A remote batch is decoded first, message by message, each dropped at
/// once: a remote ask's reply ref travels inside its request, so
/// decoding is the only way to find it, and dropping it (inside the
/// caller's `reply::collect`) sends the asker's node the failure at once
/// (`SysWire::NoReply`) instead of leaving the asker to its timeout.
/// What does not decode is not a second dead letter; a panicking
/// `Deserialize` ends the decoding (the asks after it wait for their
/// timeout) but not the count.
#[cold]
#[inline(never)]
pub(super) fn drop_unhandled<M: Send + 'static>(
    user: &mut VecDeque<Queued<M>>,
    decoders: Option<&crate::serialization::Decoders<M>>,
    scope: Option<&Arc<dyn Any + Send + Sync>>,
) -> u64 {
    let mut left = 0;
    for queued in user.drain(..) {
        left += queued.count() as u64;
        let (Queued::Batch(bytes, _, _charge), Some(decoders)) = (queued, decoders) else {
            continue;
        };
        let decode_all = || {
            let mut pos = 0;
            loop {
                while let Some((range, ext)) = next_record_ext(&bytes, &mut pos) {
                    if ext {
                        drop((decoders.ext)(&bytes[range]));
                    } else {
                        drop((decoders.plain)(&bytes[range]));
                    }
                }
                // A graceful stop's marker: the records after it too.
                if bytes.get(pos..pos + 4) != Some(&STOP_RECORD.to_le_bytes()[..]) {
                    return;
                }
                pos += 4;
            }
        };
        let decoded = std::panic::catch_unwind(AssertUnwindSafe(|| match scope {
            Some(scope) => with_decode_scope(scope, &bytes, decode_all),
            None => decode_all(),
        }));
        if let Err(p) = decoded {
            tracing::warn!(panic = %panic_message(&*p), "a message's Deserialize panicked while the asks queued for a stopped actor were failed");
        }
    }
    left
}

/// Decodes the rest of a remote batch from `pos`, where a record with an
/// extension block (another serializer, a trace context) stopped the
/// plain loop: out of line, so that a batch of plain records costs one
/// comparison more than before blocks existed.
#[cold]
#[inline(never)]
pub(super) fn decode_ext_records<M: Send + 'static>(
    bytes: &[u8],
    mut pos: usize,
    decoders: &crate::serialization::Decoders<M>,
    traced: &mut VecDeque<(M, Option<TraceContext>)>,
    registry: &crate::registry::Registry,
    path: &crate::path::ActorPath,
    mut spent: usize,
) -> Slice {
    let mut records = 0;
    while let Some((range, ext)) = next_record_ext(bytes, &mut pos) {
        spent += decoded_cost::<M>(range.len());
        records += 1;
        let one = if ext {
            (decoders.ext)(&bytes[range])
        } else {
            (decoders.plain)(&bytes[range])
                .map(|m| (m, None))
                .map_err(decoders.why)
        };
        match one {
            Ok(m) => traced.push_back(m),
            Err(e) => undecodable::<M>(registry, path, &e),
        }
        if spent >= DECODE_SLICE_BYTES {
            return Slice {
                end: pos,
                records,
                cut: true,
            };
        }
    }
    Slice {
        end: pos,
        records,
        cut: false,
    }
}

/// The most the decoded messages of one slice of a batch may hold at
/// once, estimated by [`decoded_cost`]: 256 KiB. A batch is one read's
/// records for an actor (up to megabytes), and a record can be tiny (a
/// 6-byte run record decodes to a 40-byte value and its queue slot), so
/// decoding a batch whole once held several times its size; decoded in
/// slices, it holds at most this much more than its wire bytes.
pub(crate) const DECODE_SLICE_BYTES: usize = 256 * 1024;

/// What decoding a record of `len` bytes into an `M` is charged against
/// [`DECODE_SLICE_BYTES`]: the value's size (at least a pointer's, for
/// its queue slot) and its bytes again, for what it may own on the heap.
#[inline(always)]
pub(super) fn decoded_cost<M>(len: usize) -> usize {
    std::mem::size_of::<M>().max(8) + len
}

/// How far one slice of a batch was decoded.
pub(super) struct Slice {
    /// Where decoding stopped.
    pub(super) end: usize,
    /// Records decoded (or found undecodable).
    pub(super) records: usize,
    /// Stopped at [`DECODE_SLICE_BYTES`], not at the end or a stop.
    pub(super) cut: bool,
}
