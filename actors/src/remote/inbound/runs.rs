//! Runs: the payloads of one socket read grouped by recipient, each group
//! copied into one buffer of `[len u32 LE][payload]` records that the
//! recipient's mailbox takes whole (the actor's own task decodes them).
//! The hot path of receiving: a payload costs a lookup of its run (mostly
//! the last one used) and a copy.

use std::{collections::HashMap, sync::Arc};

use bytes::{BufMut, Bytes, BytesMut};

use super::ids::Entry;
use crate::{
    budget::Charge,
    mailbox::{RECORD_EXT, STOP_RECORD},
    registry::Target,
    remote::flow::{ParkedBatch, Windowed},
};

/// Initial size of a run buffer: a read's worth of small messages.
const RUN_BUFFER: usize = 64 * 1024;
/// Runs (recipients) whose buffers are kept between reads.
const MAX_RUNS: usize = 64;
/// A batch this small whose buffer has more room left than it fills is
/// copied into an allocation of its own ([`Run::take`]): 4 KiB, a page. A
/// copy of that much costs less than the batch's charge would for the
/// spare room it otherwise keeps alive, and a batch of a full read (the
/// throughput case) fills its buffer and is never copied.
const COPY_BATCH_BELOW: usize = 4096;

/// The records of a run envelope (`envelope::ENV_RUN`): how many there
/// are, or why they are malformed. They must be in the form a run buffer
/// keeps (`[len u32 LE][payload]`), at least one, each length below
/// [`RECORD_EXT`] (so neither an extension block's mark nor a stop marker)
/// and the last ending where the envelope does: then they are appended as
/// they are.
#[inline]
pub(in crate::remote) fn run_records(mut b: &[u8]) -> Result<usize, &'static str> {
    if b.is_empty() {
        return Err("a run envelope without records");
    }
    let mut n = 0;
    while let Some((head, rest)) = b.split_first_chunk::<4>() {
        let len = u32::from_le_bytes(*head);
        if len >= RECORD_EXT {
            return Err("a run record of 2^31 bytes or more");
        }
        let Some(next) = rest.get(len as usize..) else {
            return Err("a run record longer than its envelope");
        };
        b = next;
        n += 1;
    }
    if b.is_empty() {
        Ok(n)
    } else {
        Err("a truncated run record length")
    }
}

/// The payloads of one read for one recipient, copied into one buffer of
/// `[len u32 LE][payload]` records that the mailbox takes whole.
pub(super) struct Run {
    /// The recipient's path, to look it up again if it stopped.
    pub(super) path: Arc<str>,
    pub(super) target: Arc<dyn Target>,
    /// The recipient id it came by (`INLINE_ID` inline), and its window.
    pub(super) id: u32,
    pub(super) win: Option<Arc<Windowed>>,
    pub(super) buf: BytesMut,
    n: usize,
    /// Envelope bytes of this read's messages, credited when handed over.
    credit: u64,
    /// Took a message this read.
    used: bool,
}

impl Run {
    /// This read's batch, ready to be handed over, and the bytes it keeps
    /// alive while it waits (what its charge is for); `None` if the run
    /// took nothing this read.
    ///
    /// What a batch keeps alive is its buffer's whole allocation. A small
    /// batch in a buffer reserved for more is copied out, so that it does
    /// not hold the rest (measured: a 6-byte message alone in a read held
    /// a 4 KiB page of a 64 KiB reservation, for as long as its actor did
    /// not take it).
    #[inline]
    pub(super) fn take(&mut self) -> Option<(ParkedBatch, usize)> {
        if self.n == 0 {
            return None;
        }
        let len = self.buf.len();
        let spare = self.buf.capacity() - len;
        let (batch, held) = if spare > len && len <= COPY_BATCH_BELOW {
            let batch = Bytes::copy_from_slice(&self.buf);
            self.buf.clear();
            (batch, len)
        } else {
            (self.buf.split().freeze(), len + spare)
        };
        let b = ParkedBatch {
            n: std::mem::take(&mut self.n),
            credit: std::mem::take(&mut self.credit),
            batch,
            charge: Charge::default(),
        };
        Some((b, held))
    }
}

/// The runs of one read, found by recipient in constant time: the last
/// one used (consecutive messages mostly go to one recipient), else a map
/// from the target's address. A peer can make a read touch many
/// recipients; the cost per message stays the same, and what is reserved
/// ahead of need is bounded by what arrived (`budget`).
#[derive(Default)]
pub(super) struct Runs {
    pub(super) list: Vec<Run>,
    index: HashMap<(u32, usize), usize>,
    last: usize,
    /// Bytes reservations may still take ahead of need this read: the
    /// read's size (and one run buffer) at its start. Past it, buffers
    /// grow as messages arrive (doubling), so many recipients in one read
    /// cost about what the read carried, not a buffer each.
    budget: usize,
}

/// A target's identity as a map key.
#[inline]
fn target_key(t: &Arc<dyn Target>) -> usize {
    Arc::as_ptr(t).cast::<()>() as usize
}

impl Runs {
    /// A read of `bytes` begins.
    pub(super) fn new_read(&mut self, bytes: usize) {
        self.budget = bytes + RUN_BUFFER;
    }

    /// Appends one payload for `id`'s `target` (known by `path`), whose
    /// envelope was `credit` bytes; `left` is what this read still holds.
    /// `EXT`: the payload begins with an extension block. Always inlined:
    /// with two instances (`EXT` or not) it was left out of line, a call
    /// per message more (callgrind).
    #[inline(always)]
    pub(super) fn push<const EXT: bool>(
        &mut self,
        id: u32,
        entry: &Entry,
        payload: &[u8],
        credit: usize,
        left: usize,
    ) {
        let i = self.run_of(id, entry);
        let run = &mut self.list[i];
        run.credit += credit as u64;
        Self::reserve(run, &mut self.budget, 4 + payload.len(), left);
        // Small messages are far below `RECORD_EXT` (at most a frame).
        let head = payload.len() as u32 | if EXT { RECORD_EXT } else { 0 };
        run.buf.put_u32_le(head);
        run.buf.put_slice(payload);
        run.n += 1;
        run.used = true;
    }

    /// Appends `n` records for `id`'s `target` at once: the records of a
    /// run envelope (`envelope::ENV_RUN`) of `credit` bytes, checked by
    /// [`run_records`], which are in the form the run keeps.
    #[inline]
    pub(super) fn push_records(
        &mut self,
        id: u32,
        entry: &Entry,
        records: &[u8],
        n: usize,
        credit: usize,
        left: usize,
    ) {
        let i = self.run_of(id, entry);
        let run = &mut self.list[i];
        run.credit += credit as u64;
        Self::reserve(run, &mut self.budget, records.len(), left);
        run.buf.put_slice(records);
        run.n += n;
        run.used = true;
    }

    /// Makes room for `need` more bytes in `run`'s buffer, `left` being
    /// what the read still holds.
    #[inline(always)]
    fn reserve(run: &mut Run, budget: &mut usize, need: usize, left: usize) {
        let room = run.buf.capacity() - run.buf.len();
        // A run's first message of a read reserves for the rest of the read
        // while the buffer is still empty: what the last read's batch left
        // of its allocation would otherwise fill mid-read and then be
        // copied to a new one (callgrind: 7.4 M of the receiving thread's
        // 200 M instructions in that copy at 300,000 messages).
        if room < need || (run.buf.is_empty() && room < left.min(*budget)) {
            // Room for the rest of this read at once, while the read's
            // budget lasts: growing frame by frame copied every batch
            // again (perf: 12% of the receiving thread in memmove with
            // reads of 1 MiB). Past the budget, only what is needed.
            let ahead = need.max(RUN_BUFFER).max(left);
            let want = if ahead <= *budget {
                *budget -= ahead;
                ahead
            } else {
                need
            };
            run.buf.reserve(want);
        }
    }

    /// Appends a graceful stop for `id`'s target (a [`STOP_RECORD`], one
    /// record of the run), whose envelope was `credit` bytes: its mailbox
    /// gets it in order with the messages around it, parked behind them if
    /// it is full.
    #[cold]
    pub(super) fn push_stop(&mut self, id: u32, entry: &Entry, credit: usize) {
        let i = self.run_of(id, entry);
        let run = &mut self.list[i];
        run.credit += credit as u64;
        run.buf.put_u32_le(STOP_RECORD);
        run.n += 1;
        run.used = true;
    }

    /// The run of `id`'s target (which the caller checked is set).
    #[inline(always)]
    fn run_of(&mut self, id: u32, entry: &Entry) -> usize {
        let target = entry.target.as_ref().expect("checked by the caller");
        let key = (id, target_key(target));
        let i = if self
            .list
            .get(self.last)
            .is_some_and(|r| r.id == id && target_key(&r.target) == key.1)
        {
            self.last
        } else {
            self.find_or_add(key, entry)
        };
        self.last = i;
        i
    }

    #[cold]
    fn find_or_add(&mut self, key: (u32, usize), entry: &Entry) -> usize {
        if let Some(&i) = self.index.get(&key) {
            return i;
        }
        self.list.push(Run {
            path: entry.path.clone(),
            target: entry.target.clone().expect("checked by the caller"),
            id: key.0,
            win: entry.win.clone(),
            buf: BytesMut::new(),
            n: 0,
            credit: 0,
            used: false,
        });
        let i = self.list.len() - 1;
        self.index.insert(key, i);
        i
    }

    /// After a read is delivered: the buffers of at most `MAX_RUNS`
    /// recipients of this read are kept for the next.
    pub(super) fn end_read(&mut self) {
        let mut kept = 0;
        self.list.retain_mut(|r| {
            let keep = r.used && kept < MAX_RUNS;
            kept += usize::from(keep);
            r.used = false;
            keep
        });
        self.index.clear();
        for (i, r) in self.list.iter().enumerate() {
            self.index.insert((r.id, target_key(&r.target)), i);
        }
        self.last = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote::inbound::tests::FakeTarget;

    /// Records as a run keeps them: `[len u32 LE][payload]`.
    fn records(payloads: &[&[u8]]) -> Vec<u8> {
        let mut b = Vec::new();
        for p in payloads {
            b.extend_from_slice(&(p.len() as u32).to_le_bytes());
            b.extend_from_slice(p);
        }
        b
    }

    fn entry(path: &str) -> Entry {
        Entry::new(path.into(), Some(Arc::new(FakeTarget::default())), None)
    }

    #[test]
    fn run_records_are_counted_only_in_the_form_a_run_keeps() {
        assert_eq!(run_records(&records(&[b"a", b"", b"bc"])), Ok(3));
        assert_eq!(run_records(&[]), Err("a run envelope without records"));
        let mut long = records(&[b"abc"]);
        long.pop();
        assert_eq!(
            run_records(&long),
            Err("a run record longer than its envelope")
        );
        let mut cut = records(&[b"a"]);
        cut.extend_from_slice(&[1, 0]);
        assert_eq!(run_records(&cut), Err("a truncated run record length"));
        // An extension mark (or a stop marker) is the mailbox's, not the
        // peer's, to set.
        let mut marked = records(&[b"a"]);
        marked[3] |= 0x80;
        assert_eq!(
            run_records(&marked),
            Err("a run record of 2^31 bytes or more")
        );
        assert_eq!(
            run_records(&STOP_RECORD.to_le_bytes()),
            Err("a run record of 2^31 bytes or more")
        );
    }

    #[test]
    fn payloads_are_grouped_by_recipient_in_order() {
        let (a, b) = (entry("/user/a"), entry("/user/b"));
        let mut runs = Runs::default();
        runs.new_read(1 << 16);
        runs.push::<false>(1, &a, b"a1", 10, 1_000);
        runs.push::<false>(2, &b, b"b1", 10, 1_000);
        runs.push::<true>(1, &a, b"a2", 10, 1_000);
        runs.push_records(2, &b, &records(&[b"b2", b"b3"]), 2, 20, 1_000);
        runs.push_stop(1, &a, 5);
        assert_eq!(runs.list.len(), 2);
        let (ra, _) = runs.list[0].take().expect("a took messages");
        assert_eq!((ra.n, ra.credit), (3, 25));
        let mut want = records(&[b"a1"]);
        want.extend_from_slice(&(2 | RECORD_EXT).to_le_bytes());
        want.extend_from_slice(b"a2");
        want.extend_from_slice(&STOP_RECORD.to_le_bytes());
        assert_eq!(&ra.batch[..], &want[..]);
        let (rb, _) = runs.list[1].take().expect("b took messages");
        assert_eq!((rb.n, rb.credit), (3, 30));
        assert_eq!(&rb.batch[..], &records(&[b"b1", b"b2", b"b3"])[..]);
        assert!(runs.list[0].take().is_none(), "taken");
    }

    #[test]
    fn the_same_path_under_another_id_is_another_run() {
        let a = entry("/user/a");
        let mut runs = Runs::default();
        runs.new_read(1 << 16);
        runs.push::<false>(1, &a, b"x", 5, 100);
        runs.push::<false>(2, &a, b"y", 5, 100);
        assert_eq!(runs.list.len(), 2, "each id has its own window");
    }

    #[test]
    fn a_small_batch_is_copied_out_of_a_large_buffer_and_a_full_one_is_not() {
        let a = entry("/user/a");
        let mut runs = Runs::default();
        // A read of 64 KiB with one small message: its buffer reserves for
        // the read, the batch is copied out, and the buffer is kept.
        runs.new_read(1 << 16);
        runs.push::<false>(1, &a, b"small", 9, 1 << 16);
        let (b, held) = runs.list[0].take().expect("a batch");
        assert_eq!((b.batch.len(), held), (9, 9));
        assert!(
            runs.list[0].buf.capacity() >= 1 << 16,
            "kept for the next read"
        );
        // A full read: the batch takes the buffer as it is.
        let payload = vec![1u8; COPY_BATCH_BELOW];
        runs.new_read(0);
        runs.push::<false>(1, &a, &payload, 0, 0);
        let cap = runs.list[0].buf.capacity();
        let (b, held) = runs.list[0].take().expect("a batch");
        assert_eq!(b.batch.len(), 4 + COPY_BATCH_BELOW);
        assert_eq!(held, cap, "its whole allocation");
    }

    #[test]
    fn a_read_keeps_the_buffers_of_at_most_max_runs_recipients() {
        let entries: Vec<Entry> = (0..MAX_RUNS + 10)
            .map(|i| entry(&format!("/user/{i}")))
            .collect();
        let mut runs = Runs::default();
        runs.new_read(1 << 16);
        for (i, e) in entries.iter().enumerate() {
            runs.push::<false>(i as u32 + 1, e, b"x", 5, 100);
        }
        runs.end_read();
        assert_eq!(runs.list.len(), MAX_RUNS);
        // One recipient in the next read: the others' buffers go.
        runs.new_read(1 << 16);
        runs.push::<false>(5, &entries[4], b"x", 5, 100);
        runs.end_read();
        assert_eq!(runs.list.len(), 1);
        assert_eq!(runs.list[0].id, 5);
    }
}
