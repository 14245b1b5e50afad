//! Integration tests against the real PostgreSQL and Kafka of the dev stack.
//!
//! They read `PG_URL`, `KAFKA_BROKERS` and `S3_ENDPOINT` (see `scripts/dev-stack env`); `scripts/test` starts
//! the stack and sets them. A test that finds no server fails with a message saying how to
//! start it; none is skipped in silence. Every test uses its own schema, slot, publication and
//! topic prefix, so they run in parallel against one cluster.

mod avro;
mod cdc;
mod compaction;
mod debezium;
mod debezium_mysql;
mod doctor;
mod exactly_once;
mod failover;
mod faults;
mod filters;
mod ha;
mod hostile_filters;
mod hostile_topics;
mod incremental;
mod mysql;
mod mysql_ha;
mod mysql_incremental;
mod operate;
mod outbox;
mod partitions;
mod perf;
mod secrets;
mod silence;
mod sink;
mod sink_avro;
mod sink_iceberg;
mod sink_pg;
mod sink_pg_debezium;
mod sink_pg_reclaim;
mod sink_pg_toast;
mod sink_s3;
mod snapshot;
mod stack;
mod standby;
mod support;
mod takeover;
mod tls_admin;
mod tls_kafka;
mod tls_pg;
mod toast;
mod transforms;
mod verify;
mod versions;
mod wal_budget;
