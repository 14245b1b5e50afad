//! mimalloc's purge delay, read and set at run time.
//!
//! The `mimalloc` crate exposes no options, and its sys crate declares `mi_option_get` and
//! `mi_option_set` as raw `extern` functions without a name for the purge delay. sluice sets
//! the delay per pipeline kind at start-up (a files sink returns its freed batch
//! buffers sooner; a CDC pipeline, which reuses freed memory at once, loses rate with a short
//! delay; bench/PROFILE.md "Sink memory: the allocator's purge delay"), which
//! `MIMALLOC_PURGE_DELAY` in the environment cannot do: mimalloc reads it once for the whole
//! process, and a pipeline file's kind is known only after it is parsed.
//!
//! # Invariants
//!
//! - **Only the purge delay is touched.** The option's index is the one mimalloc reads
//!   `MIMALLOC_PURGE_DELAY` into; a test checks that in a child process started with that
//!   variable, so an upgrade that renumbers the options fails the test instead of setting
//!   another option.
//! - **No pointers cross the boundary**: both calls take and return integers, so there is no
//!   memory for the caller to get wrong. (That is also why this crate's tests do not run
//!   under AddressSanitizer as `sluice-kafka-ffi`'s do: mimalloc's `override` replaces the
//!   `malloc` ASan would interpose.)

/// `mi_option_purge_delay` in mimalloc v3's `mi_option_t` (include/mimalloc.h), the version
/// `libmimalloc-sys` 0.1.49 builds by default; the sys crate has no constant for it.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// mimalloc's purge delay in milliseconds: how long freed memory stays committed before it is
/// returned to the OS (`-1`: never; mimalloc v3's default is 1,000; arenas wait this times
/// `arena_purge_mult`, 1 by default), as set by [`set_purge_delay_ms`] or
/// `MIMALLOC_PURGE_DELAY`.
#[allow(unsafe_code)]
pub fn purge_delay_ms() -> i64 {
    // SAFETY: `mi_option_get` takes an option index and returns an integer; it checks the
    // index's range itself and initializes the option from the environment on first use. The
    // index is `mi_option_purge_delay` (see `MI_OPTION_PURGE_DELAY` and the test that checks
    // it). No memory is passed.
    let value = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
    #[allow(
        clippy::useless_conversion,
        reason = "`c_long` is 32 bits on some targets"
    )]
    i64::from(value)
}

/// Sets mimalloc's purge delay for the rest of the process, in milliseconds (`-1`: never
/// purge), and purges what is pending, so that what is freed from then on, in every thread,
/// is purged after the new delay.
///
/// The forced collection is what makes the setting take: without it the process behaved as
/// with the default delay (the files sink's JSON Lines bench case peaked at 97–100 MiB as at
/// the default, against 77–85 MiB with `MIMALLOC_PURGE_DELAY=100` from the start; with it, 77
/// and 80 MiB). Why is not established: mimalloc gives each arena a purge deadline when
/// memory is first freed into it (`now + delay`) and keeps the process-wide one while purges
/// remain, so deadlines set under the old delay may persist; the collection purges what is
/// pending.
///
/// Call it at start-up, before the threads that allocate most start: mimalloc reads the
/// option as a plain word, without synchronisation, as it does with its own updates.
#[allow(unsafe_code)]
pub fn set_purge_delay_ms(ms: i64) {
    // `long` is 64 bits on LP64 targets; clamp rather than wrap where it is 32.
    let value = std::ffi::c_long::try_from(ms).unwrap_or(std::ffi::c_long::MAX);
    // SAFETY: `mi_option_set` takes an option index and an integer and stores the integer in
    // mimalloc's static option table; the index is `mi_option_purge_delay` (checked in the
    // tests), which mimalloc reads each time it schedules a purge. No memory is passed. A
    // concurrent read by another thread sees the old or the new value (an aligned word), which
    // is mimalloc's own contract for options set at run time.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, value) };
    // SAFETY: `mi_collect` takes a flag, returns the calling thread's unused memory and
    // (forced) purges the arenas' pending ranges; mimalloc allows it at any time, from any
    // thread. No memory is passed.
    unsafe { libmimalloc_sys::mi_collect(true) };
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    /// Set in the child process of [`the_index_is_the_option_mimalloc_reads_from_the_environment`].
    const CHILD: &str = "SLUICE_ALLOC_TEST_CHILD";

    /// The index this crate uses is the one mimalloc fills from `MIMALLOC_PURGE_DELAY`: a
    /// child process of this test binary, started with the variable set, reads it back.
    #[test]
    fn the_index_is_the_option_mimalloc_reads_from_the_environment() {
        if std::env::var_os(CHILD).is_some() {
            assert_eq!(
                purge_delay_ms(),
                4321,
                "the option read is not MIMALLOC_PURGE_DELAY"
            );
            return;
        }
        let output = Command::new(std::env::current_exe().expect("the test binary's path"))
            .args([
                "--exact",
                "tests::the_index_is_the_option_mimalloc_reads_from_the_environment",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .env("MIMALLOC_PURGE_DELAY", "4321")
            .output()
            .expect("the test binary starts again");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("1 passed"),
            "the child failed or ran nothing:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// What is set is read back, and the allocator keeps working with it (allocations large
    /// enough to come from mimalloc's arenas, freed, taken again).
    #[test]
    fn a_set_delay_is_read_back() {
        if std::env::var_os(CHILD).is_some() {
            return;
        }
        let before = purge_delay_ms();
        for delay in [100, 0, -1, before] {
            set_purge_delay_ms(delay);
            assert_eq!(purge_delay_ms(), delay);
            let blocks: Vec<Vec<u8>> = (0..64).map(|i| vec![i as u8; 1 << 20]).collect();
            assert!(
                blocks
                    .iter()
                    .enumerate()
                    .all(|(i, b)| b[(1 << 20) - 1] == i as u8)
            );
        }
    }
}
