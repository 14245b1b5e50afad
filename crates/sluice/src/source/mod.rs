//! Sources: where change events come from.

pub mod chunked;
pub mod incremental;
pub mod mysql;
pub mod postgres;

/// The pipeline's registry client when `events` has Avro keys or values and `[schema_registry]`
/// is set; its failures and recoveries are shown on `board` (`/health`'s
/// `schema_registry_error`).
///
/// # Errors
///
/// The registry's TLS files cannot be read.
pub fn registry_for_pipeline(
    config: Option<&crate::registry::RegistryConfig>,
    events: &crate::event::EventOptions,
    board: &std::sync::Arc<crate::runtime::status::StatusBoard>,
) -> Result<Option<std::sync::Arc<crate::registry::Registry>>, crate::error::PipelineError> {
    let Some(config) = config.filter(|_| events.uses_avro()) else {
        return Ok(None);
    };
    let board = std::sync::Arc::clone(board);
    let registry = crate::registry::Registry::new(config.clone())
        .map_err(|e| {
            crate::error::PipelineError::fatal(e.to_string(), "fix [schema_registry]'s TLS files")
        })?
        .with_observer(Box::new(move |error| {
            board.update(|s| s.schema_registry_error = error);
        }));
    Ok(Some(std::sync::Arc::new(registry)))
}

/// The chain of a pipeline's `[transforms]` as the run uses it.
///
/// # Errors
///
/// Fatal, listing the problems (the file is checked on loading, so only a configuration built
/// in code gets here).
pub fn transform_chain<S: crate::config::SourceSection>(
    config: &crate::config::PipelineConfig<S>,
) -> Result<Option<std::sync::Arc<crate::transform::Chain>>, crate::error::PipelineError> {
    let chain = config.transform_chain().map_err(|issues| {
        crate::error::PipelineError::fatal(
            format!(
                "invalid [transforms]: {}",
                issues
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            "fix [transforms] and [predicates] (docs/transforms.md)",
        )
    })?;
    if let Some(chain) = &chain
        && config.kafka.create_topics
        && chain.computes_topics()
    {
        // A ContentBasedRouter's computed topics are created as its records reach them (as
        // Connect's topic.creation does): the chain runs on the blocking pool (and in the
        // snapshot's tasks: block_in_place), so the admin request is awaited in place.
        let kafka = config.kafka.clone();
        let handle = tokio::runtime::Handle::current();
        chain.set_new_topic_hook(Box::new(move |topic| {
            let topics = [topic.to_owned()];
            tokio::task::block_in_place(|| {
                handle.block_on(crate::kafka::ensure_topics(
                    &kafka,
                    &topics,
                    kafka.topic_partitions,
                ))
            })
            .map_err(|e| e.to_string())
        }));
    }
    Ok(chain)
}
