//! The acknowledgement tracker: commit only the contiguous acknowledged prefix.
//!
//! A source registers every record it hands downstream, in source order, with
//! [`AckTracker::push`]. Records are acknowledged in any order (Kafka delivery reports of
//! different partitions, sink workers of different sub-partitions). Some entries carry a
//! *checkpoint*: the source position that may be committed once that entry and every entry
//! before it are acknowledged. For PostgreSQL the checkpoint is the end LSN of a transaction,
//! pushed as an already-acknowledged marker after the transaction's last row; for a Kafka
//! partition it is `offset + 1` of each record.
//!
//! The **watermark** is the newest such checkpoint. It only moves forward and it never waits:
//! reading it is O(1), and acknowledging is amortized O(1), so a checkpoint writes the
//! watermark it has instead of waiting for in-flight records (the failure mode of Kafka
//! Connect's offset flush). Memory is one flag byte and one `Option<C>` per unreleased record
//! (9 bytes for a Kafka partition's `NonZeroI64` next offset, where a combined entry was 24):
//! a files sink under a backlog holds up to `roll_records` of them per partition until the
//! epoch's files commit.

use std::collections::VecDeque;

/// The sequence number [`AckTracker::push`] gives a record; acknowledge it with
/// [`AckTracker::ack`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Seq(pub u64);

/// Sequence numbers, kept as LEB128 deltas from the one before: about one byte each when they
/// are close together, instead of eight. A sink worker lists the sequences of its open epoch
/// in one of these until the epoch commits; under a backlog that is up to `roll_records` (a
/// million) per sub-partition, and its records are a partition's records spread over the
/// sub-partitions, so consecutive ones differ by about the sub-partition count.
///
/// Any order is kept (a delta wraps around), but an increasing one is what stays small. The
/// varint coding is written here rather than taken from a crate: it is a dozen lines, and the
/// crates that do it (`leb128`, `integer-encoding`) work on readers and writers or slices, not
/// on a growing list with its own iterator.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeqList {
    bytes: Vec<u8>,
    last: u64,
    len: usize,
}

impl SeqList {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `seq`.
    pub fn push(&mut self, seq: Seq) {
        let mut delta = seq.0.wrapping_sub(self.last);
        self.last = seq.0;
        self.len += 1;
        loop {
            let byte = (delta & 0x7f) as u8;
            delta >>= 7;
            if delta == 0 {
                self.bytes.push(byte);
                return;
            }
            self.bytes.push(byte | 0x80);
        }
    }

    /// How many sequences it holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes it takes (without the list's own fields).
    pub fn encoded_len(&self) -> usize {
        self.bytes.len()
    }

    /// Removes every sequence.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.last = 0;
        self.len = 0;
    }

    /// The sequences in the order they were pushed.
    pub fn iter(&self) -> SeqListIter<'_> {
        SeqListIter {
            bytes: &self.bytes,
            last: 0,
        }
    }
}

impl FromIterator<Seq> for SeqList {
    fn from_iter<I: IntoIterator<Item = Seq>>(iter: I) -> Self {
        let mut list = Self::new();
        for seq in iter {
            list.push(seq);
        }
        list
    }
}

impl<'a> IntoIterator for &'a SeqList {
    type Item = Seq;
    type IntoIter = SeqListIter<'a>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// The iterator of [`SeqList::iter`].
#[derive(Debug, Clone)]
pub struct SeqListIter<'a> {
    bytes: &'a [u8],
    last: u64,
}

impl Iterator for SeqListIter<'_> {
    type Item = Seq;

    fn next(&mut self) -> Option<Seq> {
        let mut delta = 0u64;
        let mut shift = 0;
        loop {
            let (&byte, rest) = self.bytes.split_first()?;
            self.bytes = rest;
            delta |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                break;
            }
            shift += 7;
        }
        self.last = self.last.wrapping_add(delta);
        Some(Seq(self.last))
    }
}

/// A misuse of the tracker; each one is a bug in the caller, reported instead of corrupting the
/// watermark.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WatermarkError {
    /// The sequence number was never handed out.
    #[error("sequence {0} was never pushed")]
    Unknown(u64),
    /// The record was acknowledged before.
    #[error("sequence {0} was already acknowledged")]
    AlreadyAcked(u64),
    /// A checkpoint older than one pushed before it.
    #[error("checkpoint pushed out of order: it is older than the previous checkpoint")]
    CheckpointRegressed,
}

/// Tracks acknowledgements and computes the watermark; see the [module docs](self).
#[derive(Debug)]
pub struct AckTracker<C> {
    /// The sequence number of `acked[0]` and `checkpoints[0]`.
    base: u64,
    /// Per unreleased entry: acknowledged yet? Kept apart from the checkpoints, so that an entry
    /// costs no padding: `(bool, Option<NonZeroI64>)` would take 16 bytes, these two 9.
    acked: VecDeque<bool>,
    /// Per unreleased entry, the same length as `acked`.
    checkpoints: VecDeque<Option<C>>,
    /// The newest checkpoint pushed, to refuse regressions.
    last_pushed: Option<C>,
    watermark: Option<C>,
}

impl<C: Clone + PartialOrd> AckTracker<C> {
    /// An empty tracker whose watermark starts at `initial` (the position the source resumed
    /// from, if any).
    pub fn new(initial: Option<C>) -> Self {
        Self {
            base: 0,
            acked: VecDeque::new(),
            checkpoints: VecDeque::new(),
            last_pushed: initial.clone(),
            watermark: initial,
        }
    }

    /// Registers the next record in source order; `checkpoint` is the position that becomes
    /// committable once this record and all before it are acknowledged.
    ///
    /// # Errors
    ///
    /// [`WatermarkError::CheckpointRegressed`] if `checkpoint` is older than one pushed before.
    pub fn push(&mut self, checkpoint: Option<C>) -> Result<Seq, WatermarkError> {
        self.push_entry(false, checkpoint)
    }

    /// Registers a checkpoint that needs no acknowledgement of its own (for example the end of
    /// a PostgreSQL transaction, after its rows); it becomes the watermark as soon as every
    /// record before it is acknowledged.
    ///
    /// # Errors
    ///
    /// [`WatermarkError::CheckpointRegressed`] if `checkpoint` is older than one pushed before.
    pub fn push_checkpoint(&mut self, checkpoint: C) -> Result<(), WatermarkError> {
        self.push_entry(true, Some(checkpoint))?;
        self.release_prefix();
        Ok(())
    }

    /// Acknowledges a record; returns `true` if the watermark moved.
    ///
    /// # Errors
    ///
    /// [`WatermarkError::Unknown`] for a sequence number never pushed and
    /// [`WatermarkError::AlreadyAcked`] for one acknowledged before.
    pub fn ack(&mut self, seq: Seq) -> Result<bool, WatermarkError> {
        let Seq(seq) = seq;
        if seq < self.base {
            return Err(WatermarkError::AlreadyAcked(seq));
        }
        let index = usize::try_from(seq - self.base).map_err(|_| WatermarkError::Unknown(seq))?;
        let acked = self
            .acked
            .get_mut(index)
            .ok_or(WatermarkError::Unknown(seq))?;
        if *acked {
            return Err(WatermarkError::AlreadyAcked(seq));
        }
        *acked = true;
        Ok(index == 0 && self.release_prefix())
    }

    /// The newest committable checkpoint: it and everything pushed before it are acknowledged.
    pub fn watermark(&self) -> Option<&C> {
        self.watermark.as_ref()
    }

    /// How many pushed entries are not yet released (unacknowledged, or behind one that is).
    pub fn pending(&self) -> usize {
        self.acked.len()
    }

    /// The sequence number the next push will get.
    pub fn next_seq(&self) -> Seq {
        Seq(self.base + self.acked.len() as u64)
    }

    fn push_entry(&mut self, acked: bool, checkpoint: Option<C>) -> Result<Seq, WatermarkError> {
        if let Some(new) = &checkpoint {
            if self.last_pushed.as_ref().is_some_and(|last| new < last) {
                return Err(WatermarkError::CheckpointRegressed);
            }
            self.last_pushed = Some(new.clone());
        }
        let seq = self.next_seq();
        self.acked.push_back(acked);
        self.checkpoints.push_back(checkpoint);
        Ok(seq)
    }

    /// Pops the acknowledged prefix; returns `true` if the watermark moved.
    fn release_prefix(&mut self) -> bool {
        let mut moved = false;
        let base = self.base;
        while self.acked.front().is_some_and(|acked| *acked) {
            self.acked.pop_front();
            let Some(checkpoint) = self.checkpoints.pop_front() else {
                break;
            };
            self.base += 1;
            if let Some(checkpoint) = checkpoint {
                self.watermark = Some(checkpoint);
                moved = true;
            }
        }
        if self.base != base {
            self.shrink_if_sparse();
        }
        moved
    }

    /// Gives most of the deques' memory back once they are less than a quarter full. A files
    /// epoch under a backlog grows them to `roll_records` entries (9 MiB at a million); without
    /// this every partition would keep that capacity after its epochs commit, and a process
    /// with many partitions assigned would hold it for each. Shrinking to twice the length
    /// keeps the copies amortized O(1) per entry.
    fn shrink_if_sparse(&mut self) {
        let capacity = self.checkpoints.capacity();
        let len = self.checkpoints.len();
        if capacity > KEPT_CAPACITY && len < capacity / 4 {
            let target = (len * 2).max(KEPT_CAPACITY);
            self.acked.shrink_to(target);
            self.checkpoints.shrink_to(target);
        }
    }
}

/// The entries a tracker keeps room for however few it holds (~1.1 MiB): below this, giving
/// memory back is not worth a reallocation. It is above the CDC pipeline's default in-flight
/// budget (100,000 records), whose tracker therefore never shrinks and grows again at every
/// swing of its in-flight count; a files epoch of up to `roll_records` is what it is for.
const KEPT_CAPACITY: usize = 1 << 17;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn watermark_waits_for_the_gap() {
        let mut tracker = AckTracker::new(Some(10u64));
        let a = tracker.push(None).unwrap();
        let b = tracker.push(None).unwrap();
        tracker.push_checkpoint(20).unwrap();
        let c = tracker.push(Some(30)).unwrap();
        assert_eq!(tracker.watermark(), Some(&10));
        assert!(!tracker.ack(b).unwrap());
        assert!(!tracker.ack(c).unwrap());
        assert_eq!(tracker.watermark(), Some(&10));
        assert!(tracker.ack(a).unwrap());
        assert_eq!(tracker.watermark(), Some(&30));
        assert_eq!(tracker.pending(), 0);
    }

    #[test]
    fn a_drained_tracker_gives_its_memory_back() {
        let mut tracker = AckTracker::new(None);
        // An epoch of a million records, then the first record of the next one.
        let epoch: Vec<Seq> = (1..=1_000_000u64)
            .map(|offset| tracker.push(Some(offset)).unwrap())
            .collect();
        let next = tracker.push(Some(1_000_001)).unwrap();
        assert!(tracker.checkpoints.capacity() > 1_000_000);
        for seq in epoch {
            tracker.ack(seq).unwrap();
        }
        assert_eq!(tracker.watermark(), Some(&1_000_000));
        assert_eq!(tracker.pending(), 1);
        assert!(
            tracker.checkpoints.capacity() <= 2 * KEPT_CAPACITY
                && tracker.acked.capacity() <= 2 * KEPT_CAPACITY,
            "capacity {} / {} after the epoch was released",
            tracker.checkpoints.capacity(),
            tracker.acked.capacity()
        );
        tracker.ack(next).unwrap();
        assert_eq!(tracker.watermark(), Some(&1_000_001));
    }

    #[test]
    fn misuse_is_reported() {
        let mut tracker = AckTracker::new(None);
        let a = tracker.push(Some(5u64)).unwrap();
        assert_eq!(tracker.ack(Seq(7)), Err(WatermarkError::Unknown(7)));
        tracker.ack(a).unwrap();
        assert_eq!(tracker.ack(a), Err(WatermarkError::AlreadyAcked(0)));
        assert_eq!(
            tracker.push(Some(4)),
            Err(WatermarkError::CheckpointRegressed)
        );
    }

    /// One step of a random scenario: push a record (maybe with a checkpoint), push an
    /// acknowledged checkpoint marker, or acknowledge the n-th outstanding record.
    #[derive(Debug, Clone)]
    enum Op {
        Push(bool),
        Marker,
        Ack(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            any::<bool>().prop_map(Op::Push),
            Just(Op::Marker),
            any::<usize>().prop_map(Op::Ack),
        ]
    }

    #[test]
    fn a_seq_list_of_close_sequences_takes_about_a_byte_each() {
        // A partition's records spread over two sub-partitions: one worker's sequences.
        let seqs: Vec<Seq> = (1_000_000..1_200_000).step_by(2).map(Seq).collect();
        let list: SeqList = seqs.iter().copied().collect();
        assert_eq!(list.len(), seqs.len());
        assert_eq!(list.iter().collect::<Vec<_>>(), seqs);
        // The first delta takes 3 bytes, every later one (2) takes 1.
        assert_eq!(list.encoded_len(), seqs.len() + 2);
        let mut list = list;
        list.clear();
        assert!(list.is_empty());
        list.push(Seq(7));
        assert_eq!(list.iter().collect::<Vec<_>>(), [Seq(7)]);
    }

    proptest! {
        /// A list gives back what was pushed, in order, whatever the order.
        #[test]
        fn a_seq_list_gives_back_what_was_pushed(seqs in proptest::collection::vec(any::<u64>(), 0..200)) {
            let list: SeqList = seqs.iter().copied().map(Seq).collect();
            prop_assert_eq!(list.len(), seqs.len());
            let back: Vec<u64> = list.iter().map(|seq| seq.0).collect();
            prop_assert_eq!(back, seqs);
        }

        /// The tracker agrees with a direct model: the watermark is the checkpoint of the
        /// newest entry whose whole prefix is acknowledged.
        #[test]
        fn agrees_with_model(ops in proptest::collection::vec(op(), 0..400)) {
            let mut tracker = AckTracker::new(None);
            // Model: every entry ever pushed, as (acked, checkpoint).
            let mut model: Vec<(bool, Option<u64>)> = Vec::new();
            let mut outstanding: Vec<Seq> = Vec::new();
            let mut next_checkpoint = 0u64;
            for op in ops {
                match op {
                    Op::Push(with_checkpoint) => {
                        let checkpoint = with_checkpoint.then(|| { next_checkpoint += 1; next_checkpoint });
                        let seq = tracker.push(checkpoint).unwrap();
                        prop_assert_eq!(seq.0 as usize, model.len());
                        model.push((false, checkpoint));
                        outstanding.push(seq);
                    }
                    Op::Marker => {
                        next_checkpoint += 1;
                        tracker.push_checkpoint(next_checkpoint).unwrap();
                        model.push((true, Some(next_checkpoint)));
                    }
                    Op::Ack(n) => {
                        if outstanding.is_empty() { continue; }
                        let seq = outstanding.swap_remove(n % outstanding.len());
                        tracker.ack(seq).unwrap();
                        model[seq.0 as usize].0 = true;
                        prop_assert_eq!(tracker.ack(seq), Err(WatermarkError::AlreadyAcked(seq.0)));
                    }
                }
                let expected = model
                    .iter()
                    .take_while(|(acked, _)| *acked)
                    .filter_map(|(_, checkpoint)| *checkpoint)
                    .last();
                prop_assert_eq!(tracker.watermark().copied(), expected);
                let released = model.iter().take_while(|(acked, _)| *acked).count();
                prop_assert_eq!(tracker.pending(), model.len() - released);
            }
        }
    }
}
