//! The allocator's settings per pipeline kind.
//!
//! sluice's allocator is mimalloc for the whole process (src/main.rs). mimalloc keeps freed
//! memory committed for its purge delay (1,000 ms in v3) before returning it to the OS. A
//! pipeline whose configuration asks for another delay (a files sink, JSON Lines or Parquet:
//! `sink::config::ALLOCATOR_PURGE_DELAY_MS`) gets it here, at start-up.
//!
//! `MIMALLOC_PURGE_DELAY` in the environment always wins: mimalloc reads it at start-up, and
//! sluice then leaves the option alone (as it does with `MIMALLOC_ALLOW_THP`).

use std::ffi::OsStr;

/// The environment variable mimalloc reads its purge delay from.
const PURGE_DELAY_VARIABLE: &str = "MIMALLOC_PURGE_DELAY";

/// The purge delay to set for a pipeline that wants `wanted` ms, given the environment's
/// `MIMALLOC_PURGE_DELAY`: none when the variable is set (the operator's value stands).
fn purge_delay_to_set(wanted: i64, variable: Option<&OsStr>) -> Option<i64> {
    match variable {
        Some(_) => None,
        None => Some(wanted),
    }
}

/// Sets the allocator's purge delay to `wanted` ms unless `MIMALLOC_PURGE_DELAY` is set, and
/// says what the delay is now (for the start-up log). Call it before the pipeline's threads
/// start.
pub fn set_purge_delay(wanted: i64) -> String {
    let variable = std::env::var_os(PURGE_DELAY_VARIABLE);
    apply(purge_delay_to_set(wanted, variable.as_deref()))
}

#[cfg(feature = "mimalloc")]
fn apply(delay: Option<i64>) -> String {
    match delay {
        Some(ms) => {
            sluice_alloc::set_purge_delay_ms(ms);
            format!("{ms} ms")
        }
        None => format!(
            "{} ms (from {PURGE_DELAY_VARIABLE})",
            sluice_alloc::purge_delay_ms()
        ),
    }
}

#[cfg(not(feature = "mimalloc"))]
fn apply(_delay: Option<i64>) -> String {
    "not mimalloc: unchanged".to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_wins_over_the_pipeline_default() {
        assert_eq!(purge_delay_to_set(100, None), Some(100));
        assert_eq!(purge_delay_to_set(100, Some(OsStr::new("1000"))), None);
        assert_eq!(purge_delay_to_set(100, Some(OsStr::new(""))), None);
    }

    /// The setting reaches mimalloc: what the process's allocator holds afterwards is the
    /// pipeline's delay (unless the environment sets one).
    #[cfg(feature = "mimalloc")]
    #[test]
    fn the_delay_reaches_the_allocator() {
        let said = set_purge_delay(100);
        if std::env::var_os(PURGE_DELAY_VARIABLE).is_some() {
            assert!(said.contains(PURGE_DELAY_VARIABLE), "{said}");
        } else {
            assert_eq!(sluice_alloc::purge_delay_ms(), 100);
            assert_eq!(said, "100 ms");
        }
    }
}
