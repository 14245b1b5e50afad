//! The importer over realistic connector configurations: the examples (kept in sync with the
//! pipeline files the command made from them), the forms of the input, and what is refused.

use super::connector::ConnectorConfig;
use super::{Outcome, import};
use crate::pipeline_file::PipelineFile;

const PG_CONNECTOR: &str = include_str!("../../../../examples/debezium/postgres-connector.json");
const PG_PIPELINE: &str = include_str!("../../../../examples/debezium/postgres-pipeline.toml");
const MY_CONNECTOR: &str = include_str!("../../../../examples/debezium/mysql-connector.properties");
const MY_PIPELINE: &str = include_str!("../../../../examples/debezium/mysql-pipeline.toml");

fn env(name: &str) -> Option<String> {
    match name {
        "KAFKA_BROKERS" => Some("127.0.0.1:9092".to_owned()),
        "MYSQL_PASSWORD" => Some("secret".to_owned()),
        _ => None,
    }
}

fn imported(text: &str) -> super::Imported {
    import(&ConnectorConfig::parse(text).unwrap()).unwrap()
}

fn outcome<'a>(imported: &'a super::Imported, setting: &str) -> &'a Outcome {
    &imported
        .findings
        .iter()
        .find(|f| f.setting == setting)
        .unwrap_or_else(|| panic!("no finding for {setting}: {:#?}", imported.findings))
        .outcome
}

/// The examples' pipeline files are what the command makes from their connector files
/// (regenerate: `sluice import debezium examples/debezium/postgres-connector.json --accept
/// heartbeat.interval.ms -o examples/debezium/postgres-pipeline.toml`, and the MySQL one
/// likewise without --accept).
#[test]
fn the_examples_are_what_the_command_makes() {
    assert_eq!(imported(PG_CONNECTOR).text, PG_PIPELINE);
    assert_eq!(imported(MY_CONNECTOR).text, MY_PIPELINE);
}

#[test]
fn imported_files_load_with_sluice_s_own_loader() {
    let pg = imported(PG_CONNECTOR);
    let Ok(PipelineFile::Postgres(config)) = PipelineFile::from_toml(&pg.text, "pg", &env) else {
        panic!("{:?}", PipelineFile::from_toml(&pg.text, "pg", &env).err());
    };
    assert_eq!(config.name, "inventory_connector");
    assert_eq!(config.source.slot.as_deref(), Some("debezium_inventory"));
    assert_eq!(config.source.publication.as_deref(), Some("dbz_inventory"));
    assert!(!config.source.create_publication);
    assert!(config.source.captures_table("public.orders"));
    assert!(!config.source.captures_table("public.audit"));
    assert_eq!(
        config.source.columns.exclude,
        ["public.customers.password_hash"]
    );
    assert_eq!(config.kafka.topic_prefix, "inventory");
    assert_eq!(config.kafka.topic_partitions, 6);
    assert!(!pg.text.contains("password\""), "no password in the file");

    let my = imported(MY_CONNECTOR);
    let Ok(PipelineFile::Mysql(config)) = PipelineFile::from_toml(&my.text, "my", &env) else {
        panic!("{:?}", PipelineFile::from_toml(&my.text, "my", &env).err());
    };
    assert_eq!(config.source.server_id, 184_054);
    assert!(config.source.captures("shop", "orders"));
    assert!(!config.source.captures("shop", "audit_log"));
    assert!(!config.source.captures("other", "orders"));
    assert!(!config.source.include_schema_changes);
    assert!(my.env.iter().any(|(v, _)| v == "MYSQL_PASSWORD"));
}

#[test]
fn transforms_are_written_in_connect_s_form() {
    let text = &imported(PG_CONNECTOR).text;
    assert!(
        text.contains("[transforms]\nchain = [\"unwrap\", \"route\"]\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "[transforms.unwrap]\ntype = \"io.debezium.transforms.ExtractNewRecordState\"\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("\"delete.tombstone.handling.mode\" = \"rewrite\""),
        "{text}"
    );
    let parsed: toml::Table = toml::from_str(text).unwrap();
    assert_eq!(
        parsed["transforms"]["route"]["replacement"].as_str(),
        Some("cdc.$3")
    );
    assert_eq!(
        parsed["transforms"]["route"]["regex"].as_str(),
        Some("([^.]+)\\.([^.]+)\\.([^.]+)")
    );
    let with_predicate = r#"{"connector.class":"io.debezium.connector.postgresql.PostgresConnector",
        "topic.prefix":"p","table.include.list":"public.orders",
        "key.converter":"org.apache.kafka.connect.json.JsonConverter","value.converter":"org.apache.kafka.connect.json.JsonConverter",
        "transforms":"route","transforms.route.type":"org.apache.kafka.connect.transforms.RegexRouter",
        "transforms.route.regex":"x","transforms.route.replacement":"y","transforms.route.predicate":"isOrders",
        "predicates":"isOrders","predicates.isOrders.type":"org.apache.kafka.connect.transforms.predicates.TopicNameMatches",
        "predicates.isOrders.pattern":".*orders"}"#;
    let parsed: toml::Table = toml::from_str(&imported(with_predicate).text).unwrap();
    assert_eq!(
        parsed["transforms"]["route"]["predicate"].as_str(),
        Some("isOrders")
    );
    assert_eq!(
        parsed["predicates"]["isOrders"]["pattern"].as_str(),
        Some(".*orders")
    );
}

#[test]
fn the_input_forms_give_the_same_file() {
    let wrapped = imported(PG_CONNECTOR);
    let value: serde_json::Value = serde_json::from_str(PG_CONNECTOR).unwrap();
    let mut bare = value["config"].clone();
    bare["name"] = value["name"].clone();
    let bare = imported(&bare.to_string());
    let mut properties = String::new();
    for (k, v) in value["config"].as_object().unwrap() {
        let v = v.as_str().unwrap().replace('\\', "\\\\");
        properties.push_str(&format!("{k}={v}\n"));
    }
    properties.push_str("name=inventory-connector\n");
    let properties = imported(&properties);
    assert_eq!(wrapped.text, bare.text);
    assert_eq!(wrapped.text, properties.text);
}

#[test]
fn what_changes_output_is_refused_unless_accepted() {
    let text = r#"{"connector.class":"io.debezium.connector.postgresql.PostgresConnector",
        "name":"c","topic.prefix":"p","database.dbname":"db",
        "table.include.list":"public\\.t[0-9]+",
        "message.key.columns":"public.t1:a",
        "column.mask.with.8.chars":"public.t1.ssn",
        "some.unknown.setting":"1"}"#;
    let result = imported(text);
    for setting in [
        "table.include.list",
        "message.key.columns",
        "column.mask.with.8.chars",
        "some.unknown.setting",
        "key.converter",
        "value.converter",
    ] {
        assert!(
            matches!(
                outcome(&result, setting),
                Outcome::Dropped {
                    changes_output: true,
                    ..
                }
            ),
            "{setting}: {:?}",
            outcome(&result, setting)
        );
    }
    assert_eq!(result.refused(&[], false).len(), 6);
    let accepted = ["message.key.columns".to_owned(), "key.converter".to_owned()];
    assert_eq!(result.refused(&accepted, false).len(), 4);
    assert!(result.refused(&[], true).is_empty());
    if let Outcome::Dropped { reason, .. } = outcome(&result, "table.include.list") {
        assert!(
            reason.contains("t[0-9]+") && reason.contains("repetition"),
            "{reason}"
        );
    }
}

#[test]
fn avro_through_the_confluent_converter_carries_the_registry() {
    let text = r#"{"connector.class":"io.debezium.connector.postgresql.PostgresConnector",
        "name":"c","topic.prefix":"p","schema.include.list":"sales",
        "key.converter":"io.confluent.connect.avro.AvroConverter",
        "key.converter.schema.registry.url":"http://registry:8081",
        "value.converter":"io.confluent.connect.avro.AvroConverter",
        "value.converter.schema.registry.url":"http://registry:8081",
        "value.converter.basic.auth.credentials.source":"USER_INFO",
        "value.converter.basic.auth.user.info":"svc:hunter2",
        "value.converter.value.subject.name.strategy":"io.confluent.kafka.serializers.subject.TopicRecordNameStrategy"}"#;
    let result = imported(text);
    assert!(
        result.refused(&[], false).is_empty(),
        "{:#?}",
        result.findings
    );
    assert!(!result.text.contains("hunter2"));
    let parsed: toml::Table = toml::from_str(&result.text).unwrap();
    assert_eq!(parsed["kafka"]["events"]["format"].as_str(), Some("avro"));
    assert_eq!(
        parsed["schema_registry"]["url"].as_str(),
        Some("http://registry:8081")
    );
    assert_eq!(
        parsed["schema_registry"]["basic.auth.user.info"].as_str(),
        Some("${SCHEMA_REGISTRY_USER_INFO}")
    );
    assert_eq!(
        parsed["schema_registry"]["value.subject.name.strategy"].as_str(),
        Some("TopicRecordNameStrategy")
    );
    assert_eq!(
        parsed["source"]["postgres"]["schemas"][0].as_str(),
        Some("sales")
    );
    let env = |n: &str| match n {
        "KAFKA_BROKERS" => Some("k:9092".to_owned()),
        "SCHEMA_REGISTRY_USER_INFO" => Some("svc:x".to_owned()),
        _ => None,
    };
    PipelineFile::from_toml(&result.text, "avro", &env).unwrap();
}

#[test]
fn json_converter_without_schemas_enable_has_schemas() {
    let text = r#"{"connector.class":"io.debezium.connector.postgresql.PostgresConnector","name":"m",
        "topic.prefix":"p","schema.include.list":"public",
        "key.converter":"org.apache.kafka.connect.json.JsonConverter",
        "value.converter":"org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable":"false"}"#;
    let parsed: toml::Table = toml::from_str(&imported(text).text).unwrap();
    assert_eq!(
        parsed["kafka"]["events"]["key_format"].as_str(),
        Some("json_with_schemas")
    );
    assert_eq!(
        parsed["kafka"]["events"]["value_format"].as_str(),
        Some("json")
    );
    // The MySQL source writes JSON with schemas too: carried over, and the file loads.
    let mysql = text
        .replace(
            "io.debezium.connector.postgresql.PostgresConnector",
            "io.debezium.connector.mysql.MySqlConnector",
        )
        .replace(
            "\"schema.include.list\":\"public\"",
            "\"database.server.id\":\"7\"",
        );
    let result = imported(&mysql);
    let parsed: toml::Table = toml::from_str(&result.text).unwrap();
    assert_eq!(
        parsed["kafka"]["events"]["key_format"].as_str(),
        Some("json_with_schemas")
    );
    assert!(!matches!(
        outcome(&result, "key.converter"),
        Outcome::Dropped { .. }
    ));
    PipelineFile::from_toml(&result.text, "my", &env).unwrap();
}

#[test]
fn partitions_follow_the_publication_s_publish_via_partition_root() {
    let text = r#"{"connector.class":"io.debezium.connector.postgresql.PostgresConnector","name":"c",
        "topic.prefix":"p","schema.include.list":"public"VIA}"#;
    let partitions = |extra: &str| {
        let result = imported(&text.replace("VIA", extra));
        let Ok(PipelineFile::Postgres(config)) = PipelineFile::from_toml(&result.text, "pg", &env)
        else {
            panic!("{}", result.text);
        };
        (config.source.partitions, result)
    };
    use crate::source::postgres::config::PartitionMode;
    let (mode, result) = partitions("");
    assert_eq!(mode, Some(PartitionMode::Leaves), "Debezium's default");
    assert!(matches!(
        outcome(&result, "publish.via.partition.root"),
        Outcome::Noted(note) if note.contains("partitions = \"leaves\"")
    ));
    let (mode, _) = partitions(r#","publish.via.partition.root":"true""#);
    assert_eq!(mode, Some(PartitionMode::Root));
    let (mode, _) = partitions(r#","publish.via.partition.root":"false""#);
    assert_eq!(mode, Some(PartitionMode::Leaves));
}

#[test]
fn snapshot_modes_and_provider_references() {
    let text = r#"{"connector.class":"io.debezium.connector.postgresql.PostgresConnector","name":"c",
        "topic.prefix":"p","snapshot.mode":"always","database.hostname":"${env:PG_HOST}",
        "key.converter":"org.apache.kafka.connect.json.JsonConverter","value.converter":"org.apache.kafka.connect.json.JsonConverter"}"#;
    let result = imported(text);
    assert!(matches!(
        outcome(&result, "snapshot.mode"),
        Outcome::Dropped {
            changes_output: true,
            ..
        }
    ));
    let Outcome::Dropped { reason, .. } = outcome(&result, "database.hostname") else {
        panic!()
    };
    assert!(reason.contains("${env:PG_HOST}"), "{reason}");
}

#[test]
fn other_connectors_are_refused_by_name() {
    let error = import(
        &ConnectorConfig::parse(
            r#"{"connector.class":"io.debezium.connector.oracle.OracleConnector"}"#,
        )
        .unwrap(),
    )
    .unwrap_err();
    assert!(error.to_string().contains("OracleConnector"), "{error}");
}

/// A sharded connector's ByLogicalTableRouter, TimestampConverter, InsertField and MaskField
/// are carried over and load.
#[test]
fn the_logical_router_and_field_transforms_are_carried_over() {
    let connector = r#"{"connector.class":"io.debezium.connector.postgresql.PostgresConnector",
        "name":"shards","topic.prefix":"p","table.include.list":"public.orders_.*",
        "transforms":"unwrap,shards,ts,insert,mask",
        "transforms.unwrap.type":"io.debezium.transforms.ExtractNewRecordState",
        "transforms.shards.type":"io.debezium.transforms.ByLogicalTableRouter",
        "transforms.shards.topic.regex":"p\\.public\\.orders_(.*)","transforms.shards.topic.replacement":"p.orders",
        "transforms.shards.key.field.name":"shard",
        "transforms.ts.type":"org.apache.kafka.connect.transforms.TimestampConverter$Value",
        "transforms.ts.field":"created","transforms.ts.target.type":"string",
        "transforms.ts.format":"yyyy-MM-dd'T'HH:mm:ss.SSSX","transforms.ts.unix.precision":"microseconds",
        "transforms.insert.type":"org.apache.kafka.connect.transforms.InsertField$Value",
        "transforms.insert.static.field":"origin","transforms.insert.static.value":"pg",
        "transforms.mask.type":"org.apache.kafka.connect.transforms.MaskField$Value",
        "transforms.mask.fields":"email","transforms.mask.replacement":"***"}"#;
    let imported = imported(connector);
    let parsed: toml::Table = toml::from_str(&imported.text).unwrap();
    assert_eq!(
        parsed["transforms"]["shards"]["key.field.name"].as_str(),
        Some("shard")
    );
    assert_eq!(
        parsed["transforms"]["ts"]["format"].as_str(),
        Some("yyyy-MM-dd'T'HH:mm:ss.SSSX")
    );
    let Ok(PipelineFile::Postgres(config)) = PipelineFile::from_toml(&imported.text, "pg", &env)
    else {
        panic!(
            "{:?}",
            PipelineFile::from_toml(&imported.text, "pg", &env).err()
        );
    };
    assert_eq!(config.name, "shards");
}

/// Debezium's scripting Filter and ContentBasedRouter are carried over when their expressions
/// are sluice's language; one beyond it (a Groovy statement) is left out of the file, with
/// the reason, as a setting that changes what consumers see, and the file still loads.
#[test]
fn scripting_transforms_are_carried_over_or_left_out_with_the_reason() {
    let connector = r#"{"connector.class":"io.debezium.connector.postgresql.PostgresConnector",
        "name":"scripts","topic.prefix":"p",
        "transforms":"keep,split",
        "transforms.keep.type":"io.debezium.transforms.Filter","transforms.keep.language":"jsr223.groovy",
        "transforms.keep.condition":"value.op != 'd' && value.after.status != 'draft'",
        "transforms.split.type":"io.debezium.transforms.ContentBasedRouter","transforms.split.language":"jsr223.groovy",
        "transforms.split.topic.expression":"if (value.op == 'd') { return topic + '.deletes' }; null"}"#;
    let imported = imported(connector);
    let parsed: toml::Table = toml::from_str(&imported.text).unwrap();
    assert_eq!(
        parsed["transforms"]["chain"].as_array().unwrap().len(),
        1,
        "{}",
        imported.text
    );
    assert_eq!(
        parsed["transforms"]["keep"]["condition"].as_str(),
        Some("value.op != 'd' && value.after.status != 'draft'")
    );
    assert!(parsed["transforms"].get("split").is_none());
    let Outcome::Dropped {
        reason,
        changes_output: true,
    } = outcome(&imported, "transforms.split.topic.expression")
    else {
        panic!(
            "{:?}",
            outcome(&imported, "transforms.split.topic.expression")
        );
    };
    assert!(reason.contains("statements are not supported"), "{reason}");
    assert!(
        PipelineFile::from_toml(&imported.text, "pg", &env).is_ok(),
        "{:?}",
        PipelineFile::from_toml(&imported.text, "pg", &env).err()
    );
}

/// Cast, Flatten, HeaderToValue, SchemaChangeEventFilter, PartitionRouting and
/// ExtractNewRecordState's route.by.field / drop.fields.* are carried over and load; a
/// transform sluice does not apply to this source (the outbox EventRouter: a PostgreSQL
/// source's) is left out with the reason, as a setting that changes what consumers see.
#[test]
fn cast_flatten_header_and_routing_transforms_are_carried_over() {
    let connector = r#"{"connector.class":"io.debezium.connector.mysql.MySqlConnector",
        "name":"shop","topic.prefix":"shop","database.hostname":"db","database.user":"u",
        "database.server.id":"7","database.include.list":"shop",
        "transforms":"ddl,unwrap,flat,cast,tovalue,parts,outbox",
        "transforms.outbox.type":"io.debezium.transforms.outbox.EventRouter",
        "transforms.ddl.type":"io.debezium.transforms.SchemaChangeEventFilter",
        "transforms.ddl.schema.change.event.exclude.list":"DROP,DATABASE",
        "transforms.unwrap.type":"io.debezium.transforms.ExtractNewRecordState",
        "transforms.unwrap.route.by.field":"tenant","transforms.unwrap.add.headers":"op",
        "transforms.unwrap.drop.fields.header.name":"unchanged",
        "transforms.unwrap.drop.fields.keep.schema.compatible":"false",
        "transforms.flat.type":"org.apache.kafka.connect.transforms.Flatten$Value",
        "transforms.flat.delimiter":"_",
        "transforms.cast.type":"org.apache.kafka.connect.transforms.Cast$Value",
        "transforms.cast.spec":"id:string,price:float64",
        "transforms.tovalue.type":"io.debezium.transforms.HeaderToValue",
        "transforms.tovalue.headers":"__op","transforms.tovalue.fields":"op",
        "transforms.tovalue.operation":"copy",
        "transforms.parts.type":"io.debezium.transforms.partitions.PartitionRouting",
        "transforms.parts.partition.payload.fields":"change.tenant",
        "transforms.parts.partition.topic.num":"4"}"#;
    let imported = imported(connector);
    let parsed: toml::Table = toml::from_str(&imported.text).unwrap();
    let chain: Vec<&str> = parsed["transforms"]["chain"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(toml::Value::as_str)
        .collect();
    assert_eq!(
        chain,
        ["ddl", "unwrap", "flat", "cast", "tovalue", "parts"],
        "{}",
        imported.text
    );
    assert_eq!(
        parsed["transforms"]["parts"]["partition.topic.num"].as_str(),
        Some("4")
    );
    assert_eq!(
        parsed["transforms"]["unwrap"]["route.by.field"].as_str(),
        Some("tenant")
    );
    assert_eq!(
        parsed["transforms"]["cast"]["spec"].as_str(),
        Some("id:string,price:float64")
    );
    assert!(matches!(
        outcome(&imported, "transforms.outbox.type"),
        Outcome::Dropped {
            changes_output: true,
            ..
        }
    ));
    assert!(
        PipelineFile::from_toml(&imported.text, "my", &env).is_ok(),
        "{:?}",
        PipelineFile::from_toml(&imported.text, "my", &env).err()
    );
}

/// Debezium's outbox `EventRouter` on a PostgreSQL connector is carried over in Connect's form
/// (its `${routedByValue}` kept from the file's variables) and loads as the source's outbox
/// router; one key sluice's router cannot do the same with leaves it out, named.
#[test]
fn the_outbox_event_router_is_carried_over_as_the_outbox_router() {
    let connector = r#"{"connector.class":"io.debezium.connector.postgresql.PostgresConnector",
        "name":"shop","topic.prefix":"shop","database.hostname":"db","database.user":"u",
        "database.dbname":"shop","table.include.list":"public.outbox,public.orders",
        "transforms":"outbox,route",
        "transforms.outbox.type":"io.debezium.transforms.outbox.EventRouter",
        "transforms.outbox.route.topic.replacement":"events.${routedByValue}",
        "transforms.outbox.table.fields.additional.placement":"type:header:eventType",
        "transforms.outbox.predicate":"isOutbox",
        "transforms.route.type":"org.apache.kafka.connect.transforms.RegexRouter",
        "transforms.route.regex":"shop\\.public\\.(.*)",
        "transforms.route.replacement":"shop.$1",
        "predicates":"isOutbox",
        "predicates.isOutbox.type":"org.apache.kafka.connect.transforms.predicates.TopicNameMatches",
        "predicates.isOutbox.pattern":"shop\\.public\\.outbox",
        "key.converter":"org.apache.kafka.connect.json.JsonConverter",
        "value.converter":"org.apache.kafka.connect.json.JsonConverter",
        "key.converter.schemas.enable":"false","value.converter.schemas.enable":"false"}"#;
    let imported = imported(connector);
    assert!(
        matches!(outcome(&imported, "transforms.outbox.type"), Outcome::Noted(n) if n.contains("outbox router")),
        "{:#?}",
        imported.findings
    );
    assert!(
        imported.refused(&[], false).is_empty(),
        "{:#?}",
        imported.refused(&[], false)
    );
    assert!(
        imported
            .text
            .contains("\"route.topic.replacement\" = \"events.$${routedByValue}\""),
        "{}",
        imported.text
    );
    let Ok(PipelineFile::Postgres(config)) = PipelineFile::from_toml(&imported.text, "pg", &env)
    else {
        panic!(
            "{:?}",
            PipelineFile::from_toml(&imported.text, "pg", &env).err()
        );
    };
    let outbox = config.source.outbox.as_ref().expect("the outbox router");
    assert_eq!(outbox.table, "public.outbox");
    assert_eq!(outbox.topic, "events.{aggregate_type}");
    assert_eq!(
        outbox.headers.as_deref(),
        Some(&["id:id".to_owned(), "type:eventType".to_owned()][..])
    );
    assert_eq!(config.source.tables, ["public.orders"]);
    // The rest of the chain stays a transform.
    let chain = config.transform_chain().unwrap().unwrap();
    assert_eq!(chain.topics_of("shop.public.orders"), ["shop.orders"]);

    // An envelope placement has no equivalent: the router is left out, named.
    let envelope = connector.replace("type:header:eventType", "type:envelope");
    let imported = super::tests::imported(&envelope);
    assert!(matches!(
        outcome(
            &imported,
            "transforms.outbox.table.fields.additional.placement"
        ),
        Outcome::Dropped {
            changes_output: true,
            ..
        }
    ));
    assert!(!imported.text.contains("EventRouter"), "{}", imported.text);
}
