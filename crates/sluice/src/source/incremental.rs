//! What incremental (ad-hoc) snapshots share across sources: the operator's requests (the
//! signal table's rows as Debezium writes them, parsed into [`Signal`]s), the queue of tables
//! and the progress kept in the state file ([`IncrementalState`]), and the ids of the requests
//! already accepted (a signal replayed after a restart runs once).
//!
//! How a chunk is read consistently with the stream is the source's own (DBLog's watermarks,
//! written where the source's log carries them): see
//! [`crate::source::postgres::incremental`] and [`crate::source::mysql::incremental`].

use std::collections::{BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

use crate::config::parse_table_name;
use crate::runtime::status::IncrementalStatus;
pub use crate::runtime::status::Signal;

/// How many accepted request ids are remembered (a signal replayed after a restart is
/// recognised and not run twice).
const REMEMBERED_IDS: usize = 64;

/// The persisted state of incremental snapshots (part of the state file).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IncrementalState<K = Vec<String>> {
    /// Tables still to read; the first is being read.
    #[serde(default)]
    pub queue: VecDeque<TableSnapshot<K>>,
    /// The newest accepted request ids.
    #[serde(default)]
    pub accepted: VecDeque<String>,
    /// The captured tables the pipeline knows (for `snapshot_new_tables`); `None` until the
    /// first run records them.
    #[serde(default)]
    pub known_tables: Option<BTreeSet<String>>,
    /// The stream position (commit LSN, index) from which on this state holds: under exactly
    /// once, the newer of the state store's copy and the offsets topic's is resumed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<(u64, u32)>,
}

/// One table's incremental snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSnapshot<K = Vec<String>> {
    /// The request it belongs to.
    pub request: String,
    /// `schema.table`.
    pub table: String,
    /// An SQL condition on the table's rows (the request's `additional-conditions`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
    /// The primary key of the last row read (PostgreSQL: the text forms; MySQL: the values);
    /// `None` before the first chunk.
    #[serde(default)]
    pub after: Option<K>,
    /// Rows published so far.
    #[serde(default)]
    pub rows: u64,
    /// Chunks read so far.
    #[serde(default)]
    pub chunks: u64,
    /// Republication: after the last chunk, tombstones for the keys live in the table's topic
    /// that are no longer in the table (PostgreSQL only: see
    /// [`crate::source::postgres::incremental`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tombstones: bool,
}

/// Debezium's signal data: `{"data-collections": [...], "type": "incremental",
/// "additional-conditions": [{"data-collection": ..., "filter": ...}]}`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct SignalData {
    #[serde(default)]
    data_collections: Vec<String>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    additional_conditions: Vec<Condition>,
    /// sluice's own: republication with tombstones (see [`Republication`]).
    #[serde(default)]
    tombstones: bool,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Condition {
    data_collection: String,
    filter: String,
}

impl Signal {
    /// Parses a signal table row (`id`, `type`, `data`). `Ok(None)`: a signal type sluice
    /// doesn't act on.
    ///
    /// # Errors
    ///
    /// What is wrong with the row, for the log.
    pub fn parse(id: &str, kind: &str, data: &str) -> Result<Option<Self>, String> {
        let stop = match kind {
            "execute-snapshot" => false,
            "stop-snapshot" => true,
            _ => return Ok(None),
        };
        let data: SignalData = serde_json::from_str(if data.trim().is_empty() {
            "{}"
        } else {
            data
        })
        .map_err(|e| {
            format!(
                "data is not the expected JSON ({e}): expected {{\"data-collections\": [\"schema.table\"], \"additional-conditions\": [{{\"data-collection\": \"schema.table\", \"filter\": \"…\"}}]}}"
            )
        })?;
        if let Some(kind) = data.kind.as_deref()
            && !kind.eq_ignore_ascii_case("incremental")
        {
            return Err(format!(
                "snapshot type {kind:?} is not supported: expected \"incremental\""
            ));
        }
        for table in &data.data_collections {
            if parse_table_name(table).is_none() {
                return Err(format!(
                    "data-collections entry {table:?}: expected schema.table"
                ));
            }
        }
        if stop {
            return Ok(Some(Self::Stop {
                id: id.to_owned(),
                tables: data.data_collections,
            }));
        }
        if data.data_collections.is_empty() {
            return Err("data-collections is empty: name the tables to snapshot".into());
        }
        if data.tombstones && !data.additional_conditions.is_empty() {
            return Err(
                "tombstones with additional-conditions would delete the rows outside the filter \
                 from the topic: republish whole tables to have tombstones"
                    .into(),
            );
        }
        let tables = data
            .data_collections
            .iter()
            .map(|table| {
                let filter = data
                    .additional_conditions
                    .iter()
                    .find(|c| &c.data_collection == table)
                    .map(|c| c.filter.clone());
                (table.clone(), filter)
            })
            .collect();
        Ok(Some(Self::Snapshot {
            id: id.to_owned(),
            tables,
            tombstones: data.tombstones,
        }))
    }

    /// The request's id.
    pub fn id(&self) -> &str {
        match self {
            Self::Snapshot { id, .. } | Self::Stop { id, .. } => id,
        }
    }
}

impl<K> IncrementalState<K> {
    /// The newer of two copies (by [`position`](Self::position); `stored` on a tie).
    pub fn newer(stored: Option<Self>, committed: Option<Self>) -> Option<Self> {
        match (stored, committed) {
            (Some(stored), Some(committed)) => Some(if committed.position > stored.position {
                committed
            } else {
                stored
            }),
            (stored, committed) => stored.or(committed),
        }
    }

    /// For `/health`: the running table's progress and the queue's length.
    pub fn status(&self) -> Option<IncrementalStatus> {
        let current = self.queue.front()?;
        Some(IncrementalStatus {
            request: current.request.clone(),
            table: current.table.clone(),
            rows: current.rows,
            chunks: current.chunks,
            tables_queued: self.queue.len(),
        })
    }

    /// Applies a signal; returns whether the state changed. Tables that are not `captured`
    /// are refused with a warning.
    pub fn accept(&mut self, signal: &Signal, captured: &dyn Fn(&str) -> bool) -> bool {
        if self.accepted.iter().any(|id| id == signal.id()) {
            tracing::debug!(id = signal.id(), "signal seen before; ignored");
            return false;
        }
        self.accepted.push_back(signal.id().to_owned());
        while self.accepted.len() > REMEMBERED_IDS {
            self.accepted.pop_front();
        }
        match signal {
            Signal::Snapshot {
                id,
                tables,
                tombstones,
            } => {
                for (table, filter) in tables {
                    if !captured(table) {
                        tracing::warn!(
                            id,
                            table,
                            "incremental snapshot: {table} is not captured by this pipeline; skipped"
                        );
                        continue;
                    }
                    tracing::info!(
                        id,
                        table,
                        filter = filter.as_deref().unwrap_or(""),
                        tombstones,
                        "incremental snapshot: queued"
                    );
                    self.queue.push_back(TableSnapshot {
                        request: id.clone(),
                        table: table.clone(),
                        filter: filter.clone(),
                        after: None,
                        rows: 0,
                        chunks: 0,
                        tombstones: *tombstones && filter.is_none(),
                    });
                }
            }
            Signal::Stop { id, tables } => {
                let before = self.queue.len();
                self.queue
                    .retain(|t| !tables.is_empty() && !tables.contains(&t.table));
                tracing::info!(
                    id,
                    stopped = before - self.queue.len(),
                    "incremental snapshot: stop requested"
                );
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_debezium_signals() {
        let signal = Signal::parse(
            "s1",
            "execute-snapshot",
            r#"{"data-collections": ["public.a", "public.b"], "type": "incremental",
                "additional-conditions": [{"data-collection": "public.b", "filter": "id > 10"}]}"#,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            signal,
            Signal::Snapshot {
                id: "s1".into(),
                tables: vec![
                    ("public.a".into(), None),
                    ("public.b".into(), Some("id > 10".into()))
                ],
                tombstones: false,
            }
        );
        assert_eq!(
            Signal::parse("s2", "stop-snapshot", "").unwrap().unwrap(),
            Signal::Stop {
                id: "s2".into(),
                tables: vec![]
            }
        );
        assert_eq!(Signal::parse("s3", "log", "{}").unwrap(), None);
        let error =
            Signal::parse("s4", "execute-snapshot", r#"{"data-collections": ["a"]}"#).unwrap_err();
        assert!(error.contains("expected schema.table"), "{error}");
        let error = Signal::parse(
            "s5",
            "execute-snapshot",
            r#"{"data-collections": ["public.a"], "type": "blocking"}"#,
        )
        .unwrap_err();
        assert!(error.contains("\"blocking\" is not supported"), "{error}");
        assert!(
            Signal::parse("s6", "execute-snapshot", "not json")
                .unwrap_err()
                .contains("expected {")
        );
        assert_eq!(
            Signal::parse(
                "s7",
                "execute-snapshot",
                r#"{"data-collections": ["public.a"], "tombstones": true}"#
            )
            .unwrap()
            .unwrap(),
            Signal::Snapshot {
                id: "s7".into(),
                tables: vec![("public.a".into(), None)],
                tombstones: true,
            }
        );
        let error = Signal::parse(
            "s8",
            "execute-snapshot",
            r#"{"data-collections": ["public.a"], "tombstones": true,
                "additional-conditions": [{"data-collection": "public.a", "filter": "id > 1"}]}"#,
        )
        .unwrap_err();
        assert!(
            error.contains("tombstones with additional-conditions"),
            "{error}"
        );
    }

    #[test]
    fn accepts_each_request_once_and_stops_by_table() {
        let mut state: IncrementalState = IncrementalState::default();
        let captured = |t: &str| t != "public.other";
        let request = Signal::Snapshot {
            id: "r1".into(),
            tables: vec![
                ("public.a".into(), None),
                ("public.b".into(), None),
                ("public.other".into(), None),
            ],
            tombstones: false,
        };
        assert!(state.accept(&request, &captured));
        assert_eq!(state.queue.len(), 2, "the uncaptured table is skipped");
        assert!(
            !state.accept(&request, &captured),
            "a replayed id is ignored"
        );
        assert_eq!(state.queue.len(), 2);
        let stop = Signal::Stop {
            id: "r2".into(),
            tables: vec!["public.a".into()],
        };
        assert!(state.accept(&stop, &captured));
        assert_eq!(
            state
                .queue
                .iter()
                .map(|t| t.table.as_str())
                .collect::<Vec<_>>(),
            ["public.b"]
        );
        let stop_all = Signal::Stop {
            id: "r3".into(),
            tables: vec![],
        };
        state.accept(&stop_all, &captured);
        assert!(state.queue.is_empty());
        for n in 0..100 {
            state.accept(
                &Signal::Stop {
                    id: format!("x{n}"),
                    tables: vec![],
                },
                &captured,
            );
        }
        assert_eq!(state.accepted.len(), REMEMBERED_IDS, "ids are bounded");
    }
}
