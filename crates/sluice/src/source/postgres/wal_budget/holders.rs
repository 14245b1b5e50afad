//! What holds the slot back, where sluice can know it: the runtime's status (Kafka, delivery,
//! the pipeline's state) and the server's sessions (a long-running transaction).

use crate::config::human_bytes;

/// A writing transaction open this long is named as holding the slot back.
pub const LONG_TRANSACTION: std::time::Duration = std::time::Duration::from_secs(5);
use crate::error::{PipelineError, classify_pg};
use crate::runtime::status::{PipelineState, PipelineStatus, WalHolder};
use crate::source::postgres::slot_wait;

/// What holds the slot back, from the runtime's status: Kafka, delivery, the pipeline's state.
pub fn from_status(status: &PipelineStatus, pipeline: &str) -> Vec<WalHolder> {
    let holder = |kind: &str, detail: String| WalHolder {
        kind: kind.to_owned(),
        detail,
    };
    let mut holders = Vec::new();
    if status.kafka_brokers_down {
        holders.push(holder(
            "kafka_unreachable",
            "Kafka is unreachable (every broker down): records wait unacknowledged, so the slot's position cannot advance".to_owned(),
        ));
    }
    match status.state {
        PipelineState::Paused => holders.push(holder(
            "paused",
            format!("the pipeline is paused (resume it: POST /api/v1/pipelines/{pipeline}/resume)"),
        )),
        PipelineState::Streaming => {
            let budget_full = status.inflight_limit_bytes > 0
                && status.inflight_bytes.saturating_mul(10)
                    >= status.inflight_limit_bytes.saturating_mul(9);
            let stalled = status.slot.as_ref().is_some_and(|s| s.stalled);
            if !status.kafka_brokers_down && (budget_full || stalled) {
                holders.push(holder(
                    "delivery_stalled",
                    format!(
                        "delivery to Kafka is stalled ({} of {} in flight{}): see last_error and the producer's metrics",
                        human_bytes(i64::try_from(status.inflight_bytes).unwrap_or(i64::MAX)),
                        human_bytes(i64::try_from(status.inflight_limit_bytes).unwrap_or(i64::MAX)),
                        if stalled { ", no progress" } else { "" }
                    ),
                ));
            }
        }
        PipelineState::Snapshotting => holders.push(holder(
            "not_streaming",
            "the initial snapshot runs: the slot stays at its consistent point until it is done"
                .to_owned(),
        )),
        state => holders.push(holder(
            "not_streaming",
            format!(
                "the pipeline is not streaming (state {}){}",
                state.name(),
                status
                    .last_error
                    .as_deref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            ),
        )),
    }
    holders
}

/// The oldest transaction that holds `slot` back: one in the slot's database that has written
/// (it has an xid: decoding restarts before its first change while it is open), or a prepared
/// one, open for [`LONG_TRANSACTION`] or more.
///
/// # Errors
///
/// The query's failure.
pub async fn long_transaction(
    client: &tokio_postgres::Client,
    slot: &str,
) -> Result<Option<WalHolder>, PipelineError> {
    let found = slot_wait::holders(client, LONG_TRANSACTION, Some(slot))
        .await
        .map_err(|e| classify_pg("cannot read pg_stat_activity or pg_prepared_xacts", e))?;
    Ok(found.first().map(|holder| WalHolder {
        kind: "long_transaction".to_owned(),
        detail: format!(
            "a transaction open for {:.0} s holds the slot's restart point: {}",
            holder.open_s(),
            holder.describe()
        ),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::status::StatusBoard;

    fn status(state: PipelineState) -> PipelineStatus {
        let board = StatusBoard::new("orders", "on_failure");
        board.set_state(state);
        board.snapshot()
    }

    #[test]
    fn what_holds_the_slot_comes_from_the_runtime_s_status() {
        let kinds = |status: &PipelineStatus| {
            from_status(status, "orders")
                .into_iter()
                .map(|h| h.kind)
                .collect::<Vec<_>>()
        };
        let mut streaming = status(PipelineState::Streaming);
        assert!(kinds(&streaming).is_empty());
        streaming.kafka_brokers_down = true;
        assert_eq!(kinds(&streaming), ["kafka_unreachable"]);
        streaming.kafka_brokers_down = false;
        streaming.inflight_limit_bytes = 1000;
        streaming.inflight_bytes = 950;
        assert_eq!(kinds(&streaming), ["delivery_stalled"]);
        let paused = status(PipelineState::Paused);
        let holders = from_status(&paused, "orders");
        assert_eq!(holders[0].kind, "paused");
        assert!(
            holders[0]
                .detail
                .contains("/api/v1/pipelines/orders/resume")
        );
        let mut backoff = status(PipelineState::Backoff);
        backoff.last_error = Some("cannot connect".into());
        let holders = from_status(&backoff, "orders");
        assert_eq!(holders[0].kind, "not_streaming");
        assert!(
            holders[0].detail.contains("backoff): cannot connect"),
            "{holders:?}"
        );
    }
}
