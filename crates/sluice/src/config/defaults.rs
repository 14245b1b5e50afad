//! Every default of the shared sections, in one place: the `DEFAULT_*` constants and the functions
//! serde calls for them.

/// Default `delivery.memory_limit`: the memory a pipeline's queues are sized for.
pub const DEFAULT_MEMORY_LIMIT: u64 = 128 * 1024 * 1024;
/// The share of `delivery.memory_limit` given to the in-flight byte budget when
/// `delivery.max_in_flight_bytes` is not set: the budget's bytes are held about 2.5 times
/// (the admitted changes, librdkafka's copy of each record, its batches and their compressed
/// requests) on top of a fixed part (runtime, buffers, allocator) that measured ~70 MiB
/// during a backlog (bench/PROFILE.md, "Memory").
pub const IN_FLIGHT_SHARE_OF_MEMORY_LIMIT: u64 = 8;
/// The in-flight byte budget at the default memory limit (16 MiB).
pub const DEFAULT_MAX_IN_FLIGHT_BYTES: u32 =
    (DEFAULT_MEMORY_LIMIT / IN_FLIGHT_SHARE_OF_MEMORY_LIMIT) as u32;
/// Default in-flight record budget.
pub const DEFAULT_MAX_IN_FLIGHT_RECORDS: u32 = 100_000;
/// Default topic prefix.
pub const DEFAULT_TOPIC_PREFIX: &str = "sluice";
/// Default partition count of topics sluice creates.
pub const DEFAULT_TOPIC_PARTITIONS: u32 = 1;
/// Default admin server address.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:8089";
/// Default first delay before reconnecting after a retryable failure.
pub const DEFAULT_RESTART_INITIAL_BACKOFF_MS: u64 = 500;
/// Default cap of the reconnect delay.
pub const DEFAULT_RESTART_MAX_BACKOFF_MS: u64 = 30_000;
/// Default cap on the value bytes copied into a dead-letter record.
pub const DEFAULT_DEAD_LETTER_MAX_VALUE_BYTES: u32 = 900_000;
/// Default longest time an exactly-once Kafka transaction stays open before it commits.
pub const DEFAULT_TRANSACTION_INTERVAL_MS: u64 = 100;
/// Default bytes of records after which an exactly-once Kafka transaction commits early.
pub const DEFAULT_TRANSACTION_MAX_BYTES: u64 = 16 * 1024 * 1024;

/// The default `state_topic`.
pub const DEFAULT_STATE_TOPIC: &str = "_sluice_state";

pub(super) fn default_failover_timeout_ms() -> u64 {
    10_000
}

pub(super) fn default_standby_poll_ms() -> u64 {
    500
}

pub(super) const fn default_true() -> bool {
    true
}
pub(super) fn default_topic_prefix() -> String {
    DEFAULT_TOPIC_PREFIX.to_owned()
}
pub(super) const fn default_topic_partitions() -> u32 {
    DEFAULT_TOPIC_PARTITIONS
}
pub(super) const fn default_memory_limit() -> u64 {
    DEFAULT_MEMORY_LIMIT
}
pub(super) const fn default_max_in_flight_records() -> u32 {
    DEFAULT_MAX_IN_FLIGHT_RECORDS
}
pub(super) const fn default_transaction_interval_ms() -> u64 {
    DEFAULT_TRANSACTION_INTERVAL_MS
}

pub(super) const fn default_transaction_max_bytes() -> u64 {
    DEFAULT_TRANSACTION_MAX_BYTES
}

pub(super) const fn default_dead_letter_max_value_bytes() -> u32 {
    DEFAULT_DEAD_LETTER_MAX_VALUE_BYTES
}
pub(super) fn default_admin_listen() -> String {
    DEFAULT_ADMIN_LISTEN.to_owned()
}
pub(super) const fn default_initial_backoff_ms() -> u64 {
    DEFAULT_RESTART_INITIAL_BACKOFF_MS
}
pub(super) const fn default_max_backoff_ms() -> u64 {
    DEFAULT_RESTART_MAX_BACKOFF_MS
}
