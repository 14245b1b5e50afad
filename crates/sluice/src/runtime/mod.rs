//! The runtime every pipeline runs in: its status, its metrics, its supervisor, the active role
//! among standby instances, the store of what it remembers between runs and the allocator's
//! settings for its kind.
//!
//! Sources, sinks and the supervisor write here; the admin server ([`crate::admin`]) only
//! serves what is here. Nothing in this module knows about HTTP.

pub mod active;
pub mod allocator;
pub mod metrics;
pub mod state;
pub mod status;
pub mod supervisor;
