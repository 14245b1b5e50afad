//! The schema registry's checks (pipelines writing Avro): reachable with the pipeline's
//! settings, and no subject of the pipeline under compatibility `NONE`, which lets a breaking
//! change (a dropped or retyped column) through to every consumer.

use super::finding::{Finding, Severity, finding};
use crate::registry::{Registry, RegistryConfig};

/// Adds the registry's findings for the subjects of the pipeline's topics (`topics`: the
/// captured tables' topics; `key`/`value`: which of them are Avro).
pub(super) async fn checks(
    config: &RegistryConfig,
    topics: &[String],
    (key, value): (bool, bool),
    findings: &mut Vec<Finding>,
) {
    let urls = config.url.shown();
    let registry = match Registry::new(config.clone()) {
        Ok(registry) => registry,
        Err(error) => {
            findings.push(finding(
                "registry.config",
                Severity::Critical,
                error.to_string(),
                &[],
                "fix [schema_registry]'s TLS files",
            ));
            return;
        }
    };
    let global = match registry.probe().await {
        Ok(level) => level,
        Err(error) => {
            findings.push(finding(
                "registry.unreachable",
                Severity::Critical,
                format!("the schema registry does not answer: {error}"),
                &[("url", urls.into())],
                "check schema_registry.url, the credentials and that the registry is up and reachable from here; the pipeline writes nothing that needs a new schema until it answers",
            ));
            return;
        }
    };
    let mut open = Vec::new();
    let mut count = 0;
    for topic in topics {
        let parts = [(true, key, "Key"), (false, value, "Envelope")];
        for (is_key, _, record) in parts.into_iter().filter(|(_, avro, _)| *avro) {
            let subject = registry.subject(topic, is_key, &format!("{topic}.{record}"));
            if !matches!(registry.versions(&subject).await, Ok(n) if n > 0) {
                continue;
            }
            count += 1;
            if registry.compatibility(&subject).await == "NONE" {
                open.push(subject);
            }
        }
    }
    if open.is_empty() {
        findings.push(finding(
            "registry.compatibility",
            Severity::Ok,
            format!("the schema registry answers; {count} subject(s) of the pipeline, none under compatibility NONE"),
            &[("url", urls.into()), ("global_compatibility", global.into())],
            "",
        ));
    } else {
        findings.push(finding(
            "registry.compatibility_none",
            Severity::Warning,
            format!(
                "{} subject(s) of the pipeline are under compatibility NONE: a dropped or retyped column reaches every consumer unchecked",
                open.len()
            ),
            &[
                ("subjects", open.clone().into()),
                ("global_compatibility", global.into()),
            ],
            format!(
                "set BACKWARD (or FULL) on them: curl -X PUT -H 'Content-Type: application/vnd.schemaregistry.v1+json' -d '{{\"compatibility\":\"BACKWARD\"}}' {}/config/<subject>",
                config.url.first_shown()
            ),
        ));
    }
}
