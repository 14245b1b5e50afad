//! One column of a captured table, and what the pipeline's column rules do with its values.

/// One column.
#[derive(Debug)]
pub struct ColumnInfo {
    /// `"name":` with the name escaped.
    pub json_label: Vec<u8>,
    /// The name.
    pub name: String,
    /// Type OID.
    pub type_oid: u32,
    /// Type modifier (`atttypmod`).
    pub type_modifier: i32,
    /// The type its values are mapped as: `type_oid` unless the catalog resolved it (a
    /// domain's base type, `value::ENUM_ARRAY_OID` for an enum's array).
    pub value_type: u32,
    /// The type modifier its values are mapped with (a domain's when the column has none).
    pub value_modifier: i32,
    /// Debezium leaves the column out of its events (a composite type, an array it does not
    /// map): so does sluice.
    pub left_out: bool,
    /// What the pipeline's column rules do with its values (keys are never changed).
    pub treatment: ColumnTreatment,
    /// Whether the type is the `hstore` extension's (its OID differs per database), written as
    /// `hstore_handling_mode` says.
    pub is_hstore: bool,
    /// `NOT NULL` (from the catalog, [`RelationInfo::mark_not_null`](super::relation::RelationInfo::mark_not_null)): where sluice has no
    /// value for it (a delete's old key under REPLICA IDENTITY DEFAULT or USING INDEX, a value
    /// Debezium does not map), Debezium writes its type's zero, not null (Connect's required
    /// fields cannot hold null), and so does sluice.
    pub not_null: bool,
}

/// A column rule's effect on a column's values in `before`/`after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ColumnTreatment {
    /// As is.
    #[default]
    Keep,
    /// Left out.
    Exclude,
    /// Replaced by `"****"` (NULL stays null).
    Mask,
    /// Replaced by the hex SHA-256 of its text form (NULL stays null): joinable, not readable.
    Hash,
}

/// PostgreSQL's first OID for objects created after `initdb` (`FirstNormalObjectId`).
pub const FIRST_USER_OID: u32 = 16384;

impl super::config::PostgresSourceConfig {
    /// The treatment of `schema.table.column`.
    pub fn column_treatment(&self, qualified_column: &str) -> ColumnTreatment {
        self.treatment_of(&[qualified_column.to_owned()])
    }

    /// The treatment of `column` of a table by its rule names (`schema.table`, then under
    /// `partitions = "leaves"` the partitioned tables above it): a rule naming a partitioned
    /// table's column covers its partitions'.
    pub fn column_treatment_of(&self, tables: &[String], column: &str) -> ColumnTreatment {
        let names: Vec<String> = tables.iter().map(|t| format!("{t}.{column}")).collect();
        self.treatment_of(&names)
    }

    /// The first rule, in the order exclude, hash, mask, that matches one of `names`
    /// (`schema.table.column` each).
    fn treatment_of(&self, names: &[String]) -> ColumnTreatment {
        let rules = &self.columns;
        let any = |patterns: &[String]| {
            patterns
                .iter()
                .any(|p| names.iter().any(|n| crate::config::glob_matches(p, n)))
        };
        if any(&rules.exclude) {
            ColumnTreatment::Exclude
        } else if any(&rules.hash) {
            ColumnTreatment::Hash
        } else if any(&rules.mask) {
            ColumnTreatment::Mask
        } else {
            ColumnTreatment::Keep
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
        name = "orders"
        [source.postgres]
        url = "postgres://postgres@127.0.0.1:5432/postgres"
        schemas = ["public"]
        [kafka]
        brokers = "127.0.0.1:9092"
    "#;

    #[test]
    fn rules_naming_a_partitioned_table_cover_its_partitions() {
        let text = MINIMAL.replace(
            "schemas = [\"public\"]",
            "schemas = [\"public\"]\npartitions = \"leaves\"\n\
             exclude_tables = [\"public.archive\"]\n\
             row_filters = { \"public.events\" = \"v > 0\", \"public.events_01\" = \"v < 9\" }\n\
             columns = { mask = [\"public.events.secret\"], hash = [\"public.events_01.email\"] }",
        );
        let config =
            super::super::config::PgPipelineConfig::from_toml(&text, "test.toml", &|_| None)
                .unwrap();
        let pg = &config.source;
        // A leaf of a two-level tree, named with its partitioned tables, nearest first.
        let names = |leaf: &str, above: &[&str]| -> Vec<String> {
            std::iter::once(leaf)
                .chain(above.iter().copied())
                .map(str::to_owned)
                .collect()
        };
        let leaf = names("public.events_01", &["public.events"]);
        let deep = names("public.events_03_a", &["public.events_03", "public.events"]);
        let plain = names("public.other", &[]);
        assert_eq!(
            pg.column_treatment_of(&leaf, "secret"),
            ColumnTreatment::Mask
        );
        assert_eq!(
            pg.column_treatment_of(&deep, "secret"),
            ColumnTreatment::Mask
        );
        assert_eq!(
            pg.column_treatment_of(&plain, "secret"),
            ColumnTreatment::Keep
        );
        // A rule naming the leaf still applies (hash comes before mask).
        assert_eq!(
            pg.column_treatment_of(&leaf, "email"),
            ColumnTreatment::Hash
        );
        assert_eq!(
            pg.column_treatment_of(&deep, "email"),
            ColumnTreatment::Keep
        );
        // Both row filters hold for the leaf that has its own.
        assert_eq!(
            pg.row_filter_of(&leaf).as_deref(),
            Some("(v < 9) AND (v > 0)")
        );
        assert_eq!(pg.row_filter_of(&deep).as_deref(), Some("v > 0"));
        assert_eq!(pg.row_filter_of(&plain), None);
        assert!(pg.excludes_any(&names("public.archive_2024", &["public.archive"])));
        assert!(!pg.excludes_any(&leaf));
    }
}
