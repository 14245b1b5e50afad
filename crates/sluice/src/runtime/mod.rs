//! The runtime every pipeline runs in: its status and its metrics.
//!
//! Sources, sinks and the supervisor write here; the admin server ([`crate::admin`]) only
//! serves what is here. Nothing in this module knows about HTTP.

pub mod metrics;
pub mod status;
pub mod supervisor;
