//! The in-flight budget: a bound in bytes and in records on what a pipeline holds between
//! reading it from the source and its acknowledgement by the destination.
//!
//! A [`tokio::sync::Semaphore`] per dimension holds the capacity (the design of vector's
//! `LimitedQueue`): admitting a record acquires its size in byte permits and one record
//! permit, and the [`InFlightPermit`] travels with the record until the destination
//! acknowledges it, when dropping it gives the capacity back. A source that cannot get a permit
//! stops reading, which is TCP backpressure to the server.
//!
//! A record larger than the whole byte budget is clamped to the full capacity: it waits until
//! nothing else is in flight and then passes alone, so it can neither deadlock nor be dropped.

use std::num::NonZeroU32;
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The in-flight budget; see the [module docs](self). Cloning shares the budget.
#[derive(Debug, Clone)]
pub struct InFlightBudget {
    bytes: Arc<Semaphore>,
    records: Arc<Semaphore>,
    max_bytes: u32,
    max_records: u32,
}

/// Capacity held by one in-flight record; dropping it returns the capacity.
#[derive(Debug)]
#[must_use = "dropping the permit releases the budget at once"]
pub struct InFlightPermit {
    _bytes: OwnedSemaphorePermit,
    _record: OwnedSemaphorePermit,
}

impl InFlightPermit {
    /// Joins another permit of the same budget into this one: a batch of records then
    /// gives its capacity back at once, when the batch is done.
    ///
    /// # Panics
    ///
    /// When `other` comes from another budget.
    pub fn merge(&mut self, other: InFlightPermit) {
        self._bytes.merge(other._bytes);
        self._record.merge(other._record);
    }
}

impl InFlightBudget {
    /// A budget of `max_bytes` bytes and `max_records` records.
    pub fn new(max_bytes: NonZeroU32, max_records: NonZeroU32) -> Self {
        Self {
            bytes: Arc::new(Semaphore::new(max_bytes.get() as usize)),
            records: Arc::new(Semaphore::new(max_records.get() as usize)),
            max_bytes: max_bytes.get(),
            max_records: max_records.get(),
        }
    }

    /// Waits until a record of `size` bytes fits, then takes its share.
    ///
    /// Cancel-safe: dropping the future gives back anything it had taken.
    pub async fn acquire(&self, size: usize) -> InFlightPermit {
        let record = Arc::clone(&self.records)
            .acquire_owned()
            .await
            .expect("the budget's semaphores are never closed");
        let bytes = Arc::clone(&self.bytes)
            .acquire_many_owned(self.clamp(size))
            .await
            .expect("the budget's semaphores are never closed");
        InFlightPermit {
            _bytes: bytes,
            _record: record,
        }
    }

    /// Takes a record's share if it fits now (see also [`InFlightPermit::merge`]).
    pub fn try_acquire(&self, size: usize) -> Option<InFlightPermit> {
        let record = Arc::clone(&self.records).try_acquire_owned().ok()?;
        let bytes = Arc::clone(&self.bytes)
            .try_acquire_many_owned(self.clamp(size))
            .ok()?;
        Some(InFlightPermit {
            _bytes: bytes,
            _record: record,
        })
    }

    /// Bytes currently in flight (as accounted: a record larger than the budget counts as the
    /// whole budget).
    pub fn in_flight_bytes(&self) -> u64 {
        u64::from(self.max_bytes) - self.bytes.available_permits() as u64
    }

    /// Records currently in flight.
    pub fn in_flight_records(&self) -> u64 {
        u64::from(self.max_records) - self.records.available_permits() as u64
    }

    /// The configured byte budget.
    pub fn max_bytes(&self) -> u32 {
        self.max_bytes
    }

    fn clamp(&self, size: usize) -> u32 {
        u32::try_from(size)
            .unwrap_or(u32::MAX)
            .clamp(1, self.max_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn budget(bytes: u32, records: u32) -> InFlightBudget {
        InFlightBudget::new(
            NonZeroU32::new(bytes).unwrap(),
            NonZeroU32::new(records).unwrap(),
        )
    }

    #[tokio::test]
    async fn bounds_bytes_and_records() {
        let budget = budget(100, 2);
        let a = budget.try_acquire(60).unwrap();
        assert!(budget.try_acquire(60).is_none(), "bytes exhausted");
        let b = budget.try_acquire(30).unwrap();
        assert!(budget.try_acquire(1).is_none(), "records exhausted");
        assert_eq!(budget.in_flight_bytes(), 90);
        assert_eq!(budget.in_flight_records(), 2);
        drop((a, b));
        assert_eq!(budget.in_flight_bytes(), 0);
        assert_eq!(budget.in_flight_records(), 0);
    }

    #[tokio::test]
    async fn oversized_record_passes_alone() {
        let budget = budget(100, 10);
        let small = budget.try_acquire(10).unwrap();
        assert!(
            budget.try_acquire(1_000).is_none(),
            "waits for the small one"
        );
        let waiter = tokio::spawn({
            let budget = budget.clone();
            async move { budget.acquire(1_000).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        drop(small);
        let big = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(budget.in_flight_bytes(), 100);
        assert!(budget.try_acquire(1).is_none(), "nothing passes beside it");
        drop(big);
        assert!(budget.try_acquire(1).is_some());
    }
}
