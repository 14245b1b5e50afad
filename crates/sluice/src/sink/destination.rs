//! Where a sink writes: files under an output root, PostgreSQL tables or Iceberg tables, as the
//! intake sees them (recover a sub-partition's state, make its writer).

use std::sync::Arc;
use std::time::Duration;

use crate::error::PipelineError;
use crate::sink::config::{FilesSinkConfig, SinkPipelineConfig};
use crate::sink::files::{
    FileSettings, OutputRoot, Ownership, Recovered, RootError, SubPartitionId,
};
use crate::sink::iceberg::writer::IcebergTarget;
use crate::sink::object::ObjectTarget;
use crate::sink::postgres::apply::PgTarget;
use crate::sink::template::PathTemplate;
use crate::sink::worker::{
    DeadLetter, FailureSettings, FilesWriter, SubPartitionWriter, WorkerSettings,
};

/// The files writers' settings from the pipeline file.
pub(crate) fn worker_settings(
    config: &SinkPipelineConfig,
    files: &FilesSinkConfig,
) -> Result<WorkerSettings, PipelineError> {
    let template = PathTemplate::parse(&files.path_template)
        .map_err(|problem| PipelineError::fatal("sink.files.path_template is invalid", problem))?;
    Ok(WorkerSettings {
        files: FileSettings {
            format: files.format,
            compression: config.compression(),
            metadata: files.metadata,
            parquet_row_group_records: files.parquet_row_group_records,
            parquet_row_group_bytes: files.parquet_row_group_bytes,
        },
        template,
        roll_records: files.roll_records,
        roll_bytes: files.roll_bytes,
        roll_interval: Duration::from_millis(files.roll_interval_ms),
        skip_tombstones: files.skip_tombstones,
        typed_columns: files.parquet_columns == crate::sink::config::ParquetColumns::Typed,
    })
}

/// What every worker does with a failing record, from the pipeline file.
pub(super) fn failure_settings(config: &SinkPipelineConfig) -> FailureSettings {
    FailureSettings {
        policy: config.delivery.on_failure,
        retry_max_attempts: config.delivery.retry_max_attempts,
        retry_backoff: Duration::from_millis(config.delivery.retry_backoff_ms),
    }
}

/// Where a sink writes: the one place the runtime tells its destinations apart. Each
/// sub-partition's state is recovered from the destination (its committed files, or its row
/// in the PostgreSQL progress table) and its worker writes through a
/// [`SubPartitionWriter`] made from that state.
pub(super) enum Destination {
    /// Epochs of files under an output root.
    Files {
        root: Arc<OutputRoot>,
        settings: Arc<WorkerSettings>,
    },
    /// Tables of a PostgreSQL database.
    Postgres(Arc<PgTarget>),
    /// Apache Iceberg tables.
    Iceberg(Arc<IcebergTarget>),
}

impl Destination {
    /// The files or database, for logs.
    pub(super) fn describe(&self) -> String {
        match self {
            Self::Files { root, .. } => root.describe(),
            Self::Postgres(target) => target.describe(),
            Self::Iceberg(target) => target.describe(),
        }
    }

    /// What `id` has committed (`None`: nothing yet), and for files the claim that makes this
    /// process its owner (see [`super::files`]).
    pub(super) fn recover(
        &self,
        id: &SubPartitionId,
    ) -> Result<(Option<Recovered>, Option<Ownership>), PipelineError> {
        match self {
            Self::Files { root, .. } => root
                .recover(id)
                .map(|(recovered, ownership)| (recovered, Some(ownership)))
                .map_err(|e| {
                    PipelineError::retryable(
                        format!(
                            "cannot recover the files of {}/{} sub-partition {}",
                            id.topic, id.partition, id.sub
                        ),
                        e,
                    )
                }),
            Self::Postgres(target) => target.recover(id).map(|recovered| (recovered, None)),
            Self::Iceberg(target) => target.recover(id).map(|recovered| (recovered, None)),
        }
    }

    /// The writer of `id`, from its recovered state.
    pub(super) fn writer(
        &self,
        id: SubPartitionId,
        recovered: &Recovered,
        ownership: Option<Ownership>,
        failure: FailureSettings,
        dead_letter: Option<Arc<DeadLetter>>,
    ) -> Result<Box<dyn SubPartitionWriter>, PipelineError> {
        Ok(match self {
            Self::Files { root, settings } => Box::new(FilesWriter::new(
                id,
                recovered.epoch,
                recovered.skipped.clone(),
                ownership.ok_or_else(|| {
                    PipelineError::fatal(
                        "a files writer without a claim on its sub-partition",
                        "this is a bug in sluice: please report it with the log",
                    )
                })?,
                Arc::clone(root),
                Arc::clone(settings),
            )),
            Self::Postgres(target) => {
                Box::new(target.writer(id, recovered.last_offset, failure, dead_letter))
            }
            Self::Iceberg(target) => Box::new(target.writer(id, recovered.last_offset)),
        })
    }

    /// Closes what the run holds open on the destination itself (the workers' sessions are
    /// theirs).
    pub(super) fn close(&self) {
        if let Self::Postgres(target) = self {
            target.close();
        }
    }

    /// Records that `offset` of `id` went to the dead-letter topic (after a timeout), so that
    /// the next run skips it.
    pub(super) fn add_skipped(
        &self,
        id: &SubPartitionId,
        offset: i64,
    ) -> Result<(), PipelineError> {
        match self {
            Self::Files { root, .. } => root.add_skipped(id, offset).map_err(|e| {
                PipelineError::retryable(
                    format!(
                        "cannot record that {}/{} offset {offset} was dead-lettered (it may be dead-lettered again)",
                        id.topic, id.partition
                    ),
                    e,
                )
            }),
            Self::Postgres(_) => Err(PipelineError::fatal(
                format!(
                    "record {}/{} offset {offset} timed out and was dead-lettered, but the PostgreSQL sink cannot record a skipped offset yet",
                    id.topic, id.partition
                ),
                "find out why the record hangs, or raise delivery.processing_timeout_ms",
            )),
            Self::Iceberg(_) => Err(PipelineError::fatal(
                format!(
                    "record {}/{} offset {offset} timed out and was dead-lettered, but the Iceberg sink cannot record a skipped offset yet",
                    id.topic, id.partition
                ),
                "find out why the record hangs, or raise delivery.processing_timeout_ms",
            )),
        }
    }
}

/// Opens the pipeline's destination.
pub(super) fn open_destination(
    config: &SinkPipelineConfig,
    runtime: &tokio::runtime::Handle,
) -> Result<Destination, PipelineError> {
    if let Some(postgres) = config.postgres() {
        let target = PgTarget::open(config, postgres, runtime.clone())?;
        return Ok(Destination::Postgres(Arc::new(target)));
    }
    if let Some(iceberg) = config.iceberg() {
        let target = IcebergTarget::open(config, iceberg, runtime.clone())?;
        return Ok(Destination::Iceberg(Arc::new(target)));
    }
    let Some(files) = config.files() else {
        return Err(PipelineError::fatal(
            "the pipeline has no sink",
            "add [sink.files], [sink.postgres] or [sink.iceberg]",
        ));
    };
    let opened = match &files.url {
        None => OutputRoot::open(&files.path, files.sub_partitions),
        Some(url) => {
            let objects = ObjectTarget::s3(url, &files.s3, runtime.clone()).map_err(|e| {
                PipelineError::fatal_with(
                    "cannot configure the S3 client",
                    "check sink.files.url and [sink.files.s3]",
                    e,
                )
            })?;
            OutputRoot::open_objects(&files.path, objects, files.sub_partitions)
        }
    };
    let root = opened.map_err(|error| match error {
        RootError::SubPartitionsChanged { .. } => PipelineError::fatal_with(
            "the output root was written with another number of sub-partitions",
            "keep sink.files.sub_partitions as it was for this root, or write to a new sink.files.path",
            error,
        ),
        RootError::Io { .. } => PipelineError::retryable("cannot prepare the output root", error),
    })?;
    Ok(Destination::Files {
        root: Arc::new(root),
        settings: Arc::new(worker_settings(config, files)?),
    })
}
