//! The I/O-free core of sluice.
//!
//! Everything that decides *what may be acknowledged to a source* lives here, apart from the
//! network and C libraries, so that it can be tested exhaustively and fast:
//!
//! - [`position`]: position newtypes ([`Lsn`]).
//! - [`watermark`]: the acknowledgement tracker. Records are registered in source order and
//!   acknowledged in any order; the watermark is the newest checkpoint such that it and every
//!   record before it are acknowledged. It is the only thing ever committed to a source
//!   (PostgreSQL's confirmed flush LSN, Kafka's committed offsets).
//! - [`budget`]: the in-flight budget in bytes and in records that bounds memory; a source
//!   stops reading when it is exhausted.
//!
//! Invariants kept here: nothing is committed before it is acknowledged; commits only move
//! forward; a record larger than the whole byte budget still passes, alone.

pub mod budget;
pub mod position;
pub mod watermark;

pub use budget::{InFlightBudget, InFlightPermit};
pub use position::Lsn;
pub use watermark::{AckTracker, Seq, SeqList, SeqListIter, WatermarkError};
