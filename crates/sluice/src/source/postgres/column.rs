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
        let rules = &self.columns;
        let any = |patterns: &[String]| {
            patterns
                .iter()
                .any(|p| crate::config::glob_matches(p, qualified_column))
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
