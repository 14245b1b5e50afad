//! Sources: where change events come from.

pub mod chunked;
pub mod incremental;
pub mod mysql;
pub mod postgres;
pub mod run;

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

/// `config` as a run uses it ([`crate::config::PipelineConfig::for_run`]: with `[transforms]`,
/// Avro is written by the chain from the transformed schemas).
pub fn config_for_run<S: crate::config::SourceSection + Clone>(
    config: std::sync::Arc<crate::config::PipelineConfig<S>>,
) -> std::sync::Arc<crate::config::PipelineConfig<S>> {
    if config.transforms.is_empty() || config.converted_events.is_some() {
        return config;
    }
    std::sync::Arc::new((*config).clone().for_run())
}

/// The chain of a pipeline's `[transforms]` as the run uses it; with Avro keys or values, it
/// writes them from the transformed schemas, registered through `registry` (the run's client;
/// `None`: a client of its own from `[schema_registry]`).
///
/// # Errors
///
/// Fatal, listing the problems (the file is checked on loading, so only a configuration built
/// in code gets here); Avro without a usable `[schema_registry]`.
pub fn transform_chain<S: crate::config::SourceSection>(
    config: &crate::config::PipelineConfig<S>,
    registry: Option<&std::sync::Arc<crate::registry::Registry>>,
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
    if let Some(chain) = &chain {
        let output = config.output_events();
        if output.uses_avro() {
            chain.set_avro_output(avro_output(config, output, registry)?);
        }
    }
    Ok(chain)
}

/// The chain's Avro writer: schemas registered under the record's topic's subjects (the
/// configured strategies), the registry asked in place (the chain runs on the blocking pool
/// and in the snapshot's tasks: `block_in_place`), once per distinct schema and topic.
fn avro_output<S: crate::config::SourceSection>(
    config: &crate::config::PipelineConfig<S>,
    output: &crate::event::EventOptions,
    registry: Option<&std::sync::Arc<crate::registry::Registry>>,
) -> Result<crate::transform::avro::AvroOutput, crate::error::PipelineError> {
    use crate::event::EventFormat;
    let registry = match registry {
        Some(registry) => std::sync::Arc::clone(registry),
        None => {
            let settings = config.schema_registry.clone().ok_or_else(|| {
                crate::error::PipelineError::fatal(
                    "kafka.events asks for Avro and no [schema_registry] is configured",
                    "add [schema_registry] url = \"http://registry:8081\"",
                )
            })?;
            std::sync::Arc::new(crate::registry::Registry::new(settings).map_err(|e| {
                crate::error::PipelineError::fatal(
                    e.to_string(),
                    "fix [schema_registry]'s TLS files",
                )
            })?)
        }
    };
    let handle = tokio::runtime::Handle::current();
    Ok(crate::transform::avro::AvroOutput::new(
        output.key_format() == EventFormat::Avro,
        output.value_format() == EventFormat::Avro,
        Box::new(move |topic, is_key, record, schema| {
            let subject = registry.subject(topic, is_key, record);
            tokio::task::block_in_place(|| handle.block_on(registry.id(&subject, schema)))
                .map_err(|e| format!("subject {subject}: {e}"))
        }),
    ))
}
