//! Debezium's `ExtractNewRecordState` ("unwrap"): a change event's `after` row as the value,
//! deletes and tombstones handled per `delete.tombstone.handling.mode`, Debezium's metadata
//! added as fields (`add.fields`) and headers (`add.headers`). Follows Debezium 3.x's
//! `ExtractNewRecordState` and `DefaultDeleteHandlingStrategy`.

use std::borrow::Cow;
use std::sync::{Arc, RwLock};

use rustc_hash::FxHashMap;

use super::field::{Part, ReplaceField};
use super::json::{Data, Members, Schema, as_str, header_text, string};
use super::record::Record;
use super::schema;

/// The prefix of added fields and headers by default (`add.fields.prefix`,
/// `add.headers.prefix`).
pub const DEFAULT_PREFIX: &str = "__";

/// `delete.tombstone.handling.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteMode {
    /// Deletes and tombstones dropped.
    Drop,
    /// A delete becomes a null value (with the row's schema); tombstones dropped (the default).
    Tombstone,
    /// A delete becomes its `before` row with `__deleted: "true"` (`"false"` on the others);
    /// tombstones dropped.
    Rewrite,
    /// As `Rewrite`, tombstones kept.
    RewriteWithTombstone,
    /// A delete becomes a tombstone (null value, no schema); tombstones dropped.
    DeleteToTombstone,
}

impl DeleteMode {
    /// The modes by Debezium's names.
    pub const NAMES: [(&'static str, DeleteMode); 5] = [
        ("drop", DeleteMode::Drop),
        ("tombstone", DeleteMode::Tombstone),
        ("rewrite", DeleteMode::Rewrite),
        ("rewrite-with-tombstone", DeleteMode::RewriteWithTombstone),
        ("delete-to-tombstone", DeleteMode::DeleteToTombstone),
    ];

    pub(super) fn rewrites(self) -> bool {
        matches!(self, DeleteMode::Rewrite | DeleteMode::RewriteWithTombstone)
    }
}

/// A field of the change event named in `add.fields` / `add.headers`: `field`,
/// `struct.field`, either optionally `:new_name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldRef {
    /// The struct holding it (`None`: the envelope itself).
    parent: Option<String>,
    /// The field.
    field: String,
    /// The added field's or header's name.
    new_name: String,
    /// `new_name` as a JSON member's start (`"__op":`), written once here rather than per
    /// record.
    member: String,
}

impl FieldRef {
    /// Parses one entry of the list as Debezium's `FieldReference` does.
    ///
    /// # Errors
    ///
    /// More than one `:`.
    pub fn parse(prefix: &str, entry: &str) -> Result<Self, String> {
        let parts: Vec<&str> = entry.split(':').collect();
        if parts.len() > 2 {
            return Err(format!(
                "{entry:?}: expected field, struct.field, or either followed by :new_name"
            ));
        }
        let splits: Vec<&str> = parts[0].split('.').collect();
        let field = if splits.len() == 1 {
            splits[0]
        } else {
            splits[1]
        };
        let parent = if splits.len() == 1 {
            match field {
                "id" | "total_order" | "data_collection_order" => Some("transaction".to_owned()),
                "op" | "ts_ms" | "ts_us" | "ts_ns" => None,
                "updateDescription" => Some("updateDescription".to_owned()),
                _ => Some("source".to_owned()),
            }
        } else {
            Some(splits[0].to_owned())
        };
        let new_name = match parts.get(1) {
            Some(name) => format!("{prefix}{name}"),
            None if splits.len() == 1 => format!("{prefix}{field}"),
            None => format!("{prefix}{}_{field}", splits[0]),
        };
        let mut member = string(&new_name);
        member.push(':');
        Ok(Self {
            parent,
            field: field.to_owned(),
            new_name,
            member,
        })
    }

    /// The struct holding the field (`None`: the envelope itself).
    pub(super) fn parent(&self) -> Option<&str> {
        self.parent.as_deref()
    }

    /// The field's name in its struct.
    pub(super) fn field(&self) -> &str {
        &self.field
    }

    /// The added member's start: its name as JSON and `:`.
    pub(super) fn member(&self) -> &str {
        &self.member
    }

    /// The field's value (JSON text) in `envelope`, `None` when the event has no such field;
    /// `Some("null")` when it has one holding null. `parents` keeps the structs read so far
    /// for this event, so that `source` is read once however many of its fields are added.
    fn value<'a>(&self, envelope: &Members<'a>, parents: &mut Parents<'a>) -> Option<&'a str> {
        if let Some(parent) = &self.parent
            && let Some(holder) = envelope.get(parent)
        {
            if holder.get() == "null" {
                // Debezium's schema has the field; the struct is absent (e.g. `transaction`
                // while the transaction metadata is off).
                return Some("null");
            }
            if let Some(members) = parents.get(holder.get())
                && let Some(value) = members.get(&self.field)
            {
                return Some(value.get());
            }
        }
        // A field another transform added to the event itself.
        envelope.get(&self.field).map(|v| v.get())
    }

    /// The field's schema in the envelope's schema, as the added field
    /// (`copySchemaBasics(…).optional()`).
    fn schema(&self, envelope_schema: &str) -> Option<String> {
        let found = self.field_schema(envelope_schema)?;
        Some(schema::optional_field(&found, &self.new_name))
    }

    /// The field's schema in the envelope's schema as it is there (with its `"field"`).
    fn field_schema(&self, envelope_schema: &str) -> Option<String> {
        // (Also the source of `schema`.)
        self.parent
            .as_deref()
            .and_then(|parent| schema::field(envelope_schema, parent))
            .and_then(|holder| schema::field(&holder, &self.field))
            .or_else(|| schema::field(envelope_schema, &self.field))
    }
}

/// The structs of one event (`source`, `transaction`…) that `add.fields` / `add.headers` read,
/// each read once: its text in the envelope and its members (`None`: not an object).
#[derive(Default)]
struct Parents<'a>(Vec<(&'a str, Option<Members<'a>>)>);

impl<'a> Parents<'a> {
    /// The members of the struct whose text (a member's value in the envelope) is `text`.
    fn get(&mut self, text: &'a str) -> Option<&Members<'a>> {
        // The same member of the same envelope: the same text at the same place.
        let at = match self.0.iter().position(|(t, _)| std::ptr::eq(*t, text)) {
            Some(at) => at,
            None => {
                self.0.push((text, Members::parse(text).ok()));
                self.0.len() - 1
            }
        };
        self.0[at].1.as_ref()
    }
}

/// `ExtractNewRecordState`.
#[derive(Debug)]
pub struct Unwrap {
    /// `delete.tombstone.handling.mode`.
    pub mode: DeleteMode,
    /// `add.fields`.
    pub add_fields: Vec<FieldRef>,
    /// `add.headers`.
    pub add_headers: Vec<FieldRef>,
    /// `route.by.field`: the row's field whose (string) value becomes the topic.
    pub route_by_field: Option<String>,
    /// `drop.fields.header.name`, `drop.fields.from.key`, `drop.fields.keep.schema.compatible`.
    pub drop_fields: Option<DropFields>,
    /// What each envelope schema gives (JSON with schemas), computed once per schema.
    pub schemas: SchemaCache,
}

/// The schemas [`Unwrap`] derives from an envelope schema, by the envelope schema's text: every
/// record of a table carries the same one, and deriving them read the whole schema text
/// several times per record. Bounded: cleared when [`SCHEMA_CACHE`] schemas are held.
#[derive(Debug, Default)]
pub struct SchemaCache(RwLock<FxHashMap<Box<str>, Arc<Derived>>>);

/// The most envelope schemas [`SchemaCache`] holds (a pipeline has one per table and version).
const SCHEMA_CACHE: usize = 1024;

/// What one envelope schema gives.
#[derive(Debug)]
pub struct Derived {
    /// Its name ends with `.Envelope`.
    is_envelope: bool,
    /// The `after` field's schema taken out of the envelope.
    after: Schema,
    /// The `before` field's.
    before: Schema,
    /// The schema of an unwrapped `after` row (with `__deleted` when rewriting, and the
    /// `add.fields`).
    after_out: Schema,
    /// The schema of a rewritten delete's `before` row (`__deleted`, `add.fields`).
    before_out: Schema,
    /// Per `add.fields` entry: whether the envelope's schema has it.
    present: Vec<bool>,
    /// Per `add.headers` entry: its header's schema.
    header_schemas: Vec<Option<String>>,
    /// `route.by.field`'s type in `after` and in `before` (`None`: no route, or no schema).
    route_types: [Option<RouteType>; 2],
}

/// A field's type in a struct schema: `None` when the struct has no such field.
type RouteType = Option<Option<String>>;

/// `drop.fields.*`: the fields a header lists (a JSON array of names, as Connect's
/// `SimpleHeaderConverter` writes a list) removed from the row, and from the key.
#[derive(Debug)]
pub struct DropFields {
    /// `drop.fields.header.name`.
    pub header: String,
    /// `drop.fields.from.key`.
    pub from_key: bool,
    /// `drop.fields.keep.schema.compatible`: only the optional fields are removed.
    pub keep_schema_compatible: bool,
}

impl DropFields {
    /// The record without the fields the header lists (Debezium's `dropFields`).
    fn apply(&self, mut record: Record) -> Result<Record, String> {
        let Some((_, text)) = record.headers.iter().find(|(n, _)| *n == self.header) else {
            return Ok(record);
        };
        let names: Vec<String> = serde_json::from_str(text).map_err(|_| {
            format!(
                "the header {:?} holds {text:?}: expected a list of field names (a JSON array of strings)",
                self.header
            )
        })?;
        if names.is_empty() {
            return Ok(record);
        }
        if self.from_key && record.key.value.is_some() {
            let fields = self.droppable(&record.key.schema, &names);
            if !fields.is_empty() {
                record = ReplaceField::excluding(Part::Key, fields).apply(record)?;
            }
        }
        let fields = self.droppable(&record.value.schema, &names);
        if !fields.is_empty() && record.value.value.is_some() {
            record = ReplaceField::excluding(Part::Value, fields).apply(record)?;
        }
        Ok(record)
    }

    /// The fields of `names` to remove from a struct of schema `schema`: those its schema has
    /// as optional when the schema is to stay compatible, else all of them.
    fn droppable(&self, schema: &Schema, names: &[String]) -> Vec<String> {
        match schema {
            Schema::Json(s) if self.keep_schema_compatible => schema::fields(s)
                .iter()
                .zip(schema::field_names(s))
                .filter(|(f, n)| schema::is_optional(f) && names.contains(n))
                .map(|(_, n)| n)
                .collect(),
            _ => names.to_vec(),
        }
    }
}

impl Unwrap {
    /// Applies the transform; `Ok(None)` drops the record.
    pub fn apply(&self, mut record: Record) -> Result<Option<Record>, String> {
        let Some(text) = record.value.value.take() else {
            if !self.add_headers.is_empty() {
                for field in self.add_headers.iter().filter(|f| f.field == "op") {
                    record
                        .headers
                        .push((Cow::Owned(field.new_name.clone()), "d".to_owned()));
                }
            }
            return Ok((self.mode == DeleteMode::RewriteWithTombstone).then_some(record));
        };
        let envelope = Members::parse(&text)?;
        let derived = match &record.value.schema {
            Schema::Json(text) => Some(self.derived(text)),
            _ => None,
        };
        let is_envelope = match &derived {
            Some(d) => d.is_envelope,
            None => envelope.get("op").is_some() && envelope.get("source").is_some(),
        };
        if !is_envelope {
            record.value.value = Some(text.clone());
            return Ok(Some(record));
        }
        let mut parents = Parents::default();
        for (n, field) in self.add_headers.iter().enumerate() {
            if let Some(value) = field.value(&envelope, &mut parents) {
                // A null header value cannot be written through sluice's text headers: left
                // out (docs/transforms.md).
                if let Some(text) = header_text(value) {
                    // Debezium's header carries the field's schema made optional.
                    if let Some(found) = derived.as_ref().and_then(|d| d.header_schemas[n].as_ref())
                    {
                        record
                            .header_schemas
                            .push((field.new_name.clone(), found.clone()));
                    }
                    record
                        .headers
                        .push((Cow::Owned(field.new_name.clone()), text));
                }
            }
        }
        let row_schema = |before: bool| -> Schema {
            match &derived {
                Some(d) if before => d.before.clone(),
                Some(d) => d.after.clone(),
                None => Schema::Opaque,
            }
        };
        let route_type = |before: bool| {
            derived
                .as_ref()
                .and_then(|d| d.route_types[usize::from(before)].as_ref())
        };
        let after = envelope.get("after").filter(|v| v.get() != "null");
        let before = envelope.get("before").filter(|v| v.get() != "null");
        let (row, is_before, deleted) = match (after, before) {
            // A truncate (Debezium drops it).
            (None, None) => return Ok(None),
            (None, Some(before)) => match self.mode {
                DeleteMode::Drop => return Ok(None),
                DeleteMode::Tombstone | DeleteMode::DeleteToTombstone => {
                    self.route(&mut record, before.get(), route_type(true))?;
                    record.value = if self.mode == DeleteMode::Tombstone {
                        Data::null_with(row_schema(false))
                    } else {
                        Data::null_with(Schema::None)
                    };
                    return self.dropped(record).map(Some);
                }
                DeleteMode::Rewrite | DeleteMode::RewriteWithTombstone => {
                    (before, true, Some("true"))
                }
            },
            (Some(after), _) => (after, false, self.mode.rewrites().then_some("false")),
        };
        self.route(&mut record, row.get(), route_type(is_before))?;
        let envelope_schema = match &record.value.schema {
            Schema::Json(text) => Some(text.clone()),
            _ => None,
        };
        let envelope_schema = envelope_schema.as_deref();
        if deleted == Some("true") && self.drop_fields.is_some() {
            // Debezium drops the fields of a rewritten delete before adding its metadata.
            let record = self.unwrapped(
                record,
                row.get(),
                (row_schema(is_before), None),
                deleted,
                &[],
                (&envelope, None, &mut parents),
            )?;
            let mut record = self.dropped(record)?;
            let row = record.value.value.take().unwrap_or_default();
            let row_schema = record.value.schema.clone();
            let record = self.unwrapped(
                record,
                &row,
                (row_schema, None),
                None,
                &self.add_fields,
                (&envelope, envelope_schema, &mut parents),
            )?;
            return Ok(Some(record));
        }
        let out = derived.as_ref().map(|d| {
            if is_before {
                (&d.before_out, d.present.as_slice())
            } else {
                (&d.after_out, d.present.as_slice())
            }
        });
        let record = self.unwrapped(
            record,
            row.get(),
            (row_schema(is_before), out),
            deleted,
            &self.add_fields,
            (&envelope, envelope_schema, &mut parents),
        )?;
        self.dropped(record).map(Some)
    }

    /// What the envelope schema `text` gives, computed on its first record.
    fn derived(&self, text: &str) -> Arc<Derived> {
        let cache = &self.schemas.0;
        if let Some(found) = cache.read().unwrap_or_else(|e| e.into_inner()).get(text) {
            return Arc::clone(found);
        }
        let row = |name: &str| {
            schema::field(text, name)
                .map_or(Schema::Opaque, |f| Schema::Json(schema::extracted(&f)))
        };
        let (after, before) = (row("after"), row("before"));
        let present: Vec<bool> = self
            .add_fields
            .iter()
            .map(|f| f.schema(text).is_some())
            .collect();
        let out = |row_schema: &Schema, deleted: Option<&str>| {
            self.value_schema(row_schema.clone(), deleted, &self.add_fields, Some(text))
        };
        let route_type = |row_schema: &Schema| {
            let field = self.route_by_field.as_deref()?;
            match row_schema {
                Schema::Json(s) => Some(schema::field(s, field).map(|f| schema::type_of(&f))),
                _ => None,
            }
        };
        let derived = Arc::new(Derived {
            is_envelope: schema::name(text).is_some_and(|n| n.ends_with(".Envelope")),
            after_out: out(&after, self.mode.rewrites().then_some("false")),
            before_out: out(&before, Some("true")),
            present,
            header_schemas: self
                .add_headers
                .iter()
                .map(|f| f.schema(text).map(|found| schema::extracted(&found)))
                .collect(),
            route_types: [route_type(&after), route_type(&before)],
            after,
            before,
        });
        let mut cache = cache.write().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= SCHEMA_CACHE {
            cache.clear();
        }
        cache.insert(text.into(), Arc::clone(&derived));
        derived
    }

    /// `route.by.field`: the record sent to the topic the row's field names (when it is not
    /// null or blank).
    /// `schema_type`: the field's type in the row's schema (with schemas).
    fn route(
        &self,
        record: &mut Record,
        row: &str,
        schema_type: Option<&RouteType>,
    ) -> Result<(), String> {
        let Some(field) = &self.route_by_field else {
            return Ok(());
        };
        let members = Members::parse(row)?;
        let value = members.get(field).map(|v| v.get());
        // Connect's `Struct.getString`: a field the row lacks, or one not a string, fails.
        let known = match schema_type {
            Some(known) => known.clone(),
            _ => value.map(|v| (v == "null" || v.starts_with('"')).then(|| "string".into())),
        };
        match known {
            None => {
                return Err(format!(
                    "{field} is not a valid field name (route.by.field)"
                ));
            }
            Some(Some(kind)) if kind == "string" => {}
            Some(_) => {
                return Err(format!(
                    "Field '{field}' is not of type STRING (route.by.field needs a text column)"
                ));
            }
        }
        if let Some(topic) = value.and_then(as_str)
            && !topic.trim_matches(|c: char| c <= ' ').is_empty()
        {
            record.topic = std::sync::Arc::from(topic.as_ref());
        }
        Ok(())
    }

    /// `drop.fields.*` applied (when configured).
    fn dropped(&self, record: Record) -> Result<Record, String> {
        match &self.drop_fields {
            Some(drop) => drop.apply(record),
            None => Ok(record),
        }
    }

    /// The record with `row` (of schema `row_schema`) as its value, with `__deleted` (when
    /// rewriting) and the `add_fields`; `cached`: the value's schema and which `add_fields`
    /// the envelope schema has, when [`Unwrap::derived`] computed them.
    fn unwrapped<'a>(
        &self,
        mut record: Record,
        row: &str,
        (row_schema, cached): (Schema, Option<(&Schema, &[bool])>),
        deleted: Option<&str>,
        add_fields: &[FieldRef],
        (envelope, envelope_schema, parents): (&Members<'a>, Option<&str>, &mut Parents<'a>),
    ) -> Result<Record, String> {
        let schema = match cached {
            Some((schema, _)) => schema.clone(),
            None => self.value_schema(row_schema, deleted, add_fields, envelope_schema),
        };
        if deleted.is_none() && add_fields.is_empty() {
            record.value = Data {
                schema,
                value: Some(row.to_owned()),
            };
            return Ok(record);
        }
        // The row's members are copied as one piece of text and the added ones appended: the
        // row is what the encoder (or a transform before this one) wrote, compact, so reading
        // it member by member to write it again gave the same text at several times the cost.
        let mut value = ObjectText::of(row, 24 * (add_fields.len() + 1))?;
        if let Some(deleted) = deleted {
            value.member("\"__deleted\":", &string(deleted));
        }
        for (n, field) in add_fields.iter().enumerate() {
            match envelope_schema {
                Some(s) => {
                    let present = match cached {
                        Some((_, present)) => present[n],
                        None => field.schema(s).is_some(),
                    };
                    if present {
                        let v = field.value(envelope, parents);
                        value.member(&field.member, v.unwrap_or("null"));
                    }
                }
                None => {
                    if let Some(v) = field.value(envelope, parents) {
                        value.member(&field.member, v);
                    }
                }
            }
        }
        record.value = Data {
            schema,
            value: Some(value.finish()),
        };
        Ok(record)
    }

    /// The schema of an unwrapped row of schema `row_schema` (see [`Unwrap::unwrapped`]).
    fn value_schema(
        &self,
        row_schema: Schema,
        deleted: Option<&str>,
        add_fields: &[FieldRef],
        envelope_schema: Option<&str>,
    ) -> Schema {
        let Schema::Json(row_schema) = row_schema else {
            return row_schema;
        };
        // Debezium rebuilds the row's schema as a required struct (`copySchemaBasics`): the
        // envelope's `after` field is optional, the unwrapped row is not.
        let mut fields = schema::fields(&row_schema);
        if deleted.is_some() {
            fields.push(r#"{"type":"string","optional":true,"field":"__deleted"}"#.into());
        }
        if let Some(s) = envelope_schema {
            fields.extend(add_fields.iter().filter_map(|f| f.schema(s)));
        }
        Schema::Json(schema::copied_struct(&row_schema, &fields))
    }
}

/// An object's text with members appended: the object's own members as they are written, then
/// each added one.
struct ObjectText {
    out: String,
    empty: bool,
}

impl ObjectText {
    /// The object `text`, with room for `more` bytes of added members.
    ///
    /// # Errors
    ///
    /// `text` is not a JSON object.
    fn of(text: &str, more: usize) -> Result<Self, String> {
        let inner = text
            .trim()
            .strip_prefix('{')
            .and_then(|t| t.strip_suffix('}'))
            .map(str::trim)
            .ok_or_else(|| Members::parse(text).err().unwrap_or_default())?;
        let mut out = String::with_capacity(text.len() + more);
        out.push('{');
        out.push_str(inner);
        Ok(Self {
            out,
            empty: inner.is_empty(),
        })
    }

    /// Appends a member: `start` is its name as JSON followed by `:`, `value` its JSON text.
    fn member(&mut self, start: &str, value: &str) {
        if !self.empty {
            self.out.push(',');
        }
        self.empty = false;
        self.out.push_str(start);
        self.out.push_str(value);
    }

    /// The object's text.
    fn finish(mut self) -> String {
        self.out.push('}');
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_references_are_named_as_debezium_names_them() {
        let r = FieldRef::parse("__", "op").unwrap();
        assert_eq!((r.parent.as_deref(), r.new_name.as_str()), (None, "__op"));
        let r = FieldRef::parse("__", "lsn").unwrap();
        assert_eq!(
            (r.parent.as_deref(), r.new_name.as_str()),
            (Some("source"), "__lsn")
        );
        let r = FieldRef::parse("__", "source.ts_ms").unwrap();
        assert_eq!(r.new_name, "__source_ts_ms");
        let r = FieldRef::parse("x_", "source.ts_ms:src").unwrap();
        assert_eq!(r.new_name, "x_src");
        let r = FieldRef::parse("__", "id").unwrap();
        assert_eq!(r.parent.as_deref(), Some("transaction"));
        assert!(FieldRef::parse("__", "a:b:c").is_err());
    }

    const ENVELOPE_SCHEMA: &str = r#"{"type":"struct","fields":[{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"},{"type":"string","optional":true,"field":"dest"},{"type":"string","optional":true,"field":"note"}],"optional":true,"name":"p.public.t.Value","field":"before"},{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"},{"type":"string","optional":true,"field":"dest"},{"type":"string","optional":true,"field":"note"}],"optional":true,"name":"p.public.t.Value","field":"after"},{"type":"struct","fields":[{"type":"string","optional":false,"field":"table"}],"optional":false,"name":"io.debezium.connector.postgresql.Source","field":"source"},{"type":"string","optional":false,"field":"op"}],"optional":false,"name":"p.public.t.Envelope","version":2}"#;

    fn event(value: &str) -> Record {
        Record {
            topic: "p.public.t".into(),
            key: Data {
                schema: Schema::Json(
                    r#"{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"},{"type":"string","optional":true,"field":"note"}],"optional":false,"name":"p.public.t.Key"}"#.into(),
                ),
                value: Some(r#"{"id":1,"note":"k"}"#.into()),
            },
            value: Data {
                schema: Schema::Json(ENVELOPE_SCHEMA.into()),
                value: Some(value.into()),
            },
            headers: Vec::new(),
            header_schemas: Vec::new(),
            partition: None,
        }
    }

    fn unwrap(mode: DeleteMode) -> Unwrap {
        Unwrap {
            mode,
            add_fields: Vec::new(),
            add_headers: vec![FieldRef::parse("__", "op").unwrap()],
            route_by_field: Some("dest".into()),
            drop_fields: None,
            schemas: Default::default(),
        }
    }

    #[test]
    fn route_by_field_sends_rows_to_their_fields_topic() {
        let insert = r#"{"before":null,"after":{"id":1,"dest":"orders_eu","note":"n"},"source":{"table":"t"},"op":"c"}"#;
        let out = unwrap(DeleteMode::Tombstone)
            .apply(event(insert))
            .unwrap()
            .unwrap();
        assert_eq!(&*out.topic, "orders_eu");
        // The header's schema is the envelope field's, optional (for HeaderToValue).
        assert_eq!(
            out.header_schema("__op"),
            r#"{"type":"string","optional":true}"#
        );
        // A delete goes where its before image says, even as a tombstone-mode null value.
        let delete = r#"{"before":{"id":1,"dest":"orders_us","note":null},"after":null,"source":{"table":"t"},"op":"d"}"#;
        let out = unwrap(DeleteMode::Tombstone)
            .apply(event(delete))
            .unwrap()
            .unwrap();
        assert_eq!(
            (&*out.topic, out.value.value.as_deref()),
            ("orders_us", None)
        );
        // Null and blank: not routed; a field the row lacks or not a string: Connect's error.
        let blank = r#"{"before":null,"after":{"id":1,"dest":"  ","note":"n"},"source":{"table":"t"},"op":"c"}"#;
        let out = unwrap(DeleteMode::Tombstone)
            .apply(event(blank))
            .unwrap()
            .unwrap();
        assert_eq!(&*out.topic, "p.public.t");
        let mut missing = unwrap(DeleteMode::Tombstone);
        missing.route_by_field = Some("nope".into());
        assert!(
            missing
                .apply(event(insert))
                .unwrap_err()
                .contains("nope is not a valid field name")
        );
        let mut not_text = unwrap(DeleteMode::Tombstone);
        not_text.route_by_field = Some("id".into());
        assert!(
            not_text
                .apply(event(insert))
                .unwrap_err()
                .contains("not of type STRING")
        );
    }

    #[test]
    fn drop_fields_removes_the_headers_fields_as_debezium_does() {
        let update = r#"{"before":null,"after":{"id":1,"dest":null,"note":"n"},"source":{"table":"t"},"op":"u"}"#;
        let mut t = unwrap(DeleteMode::Rewrite);
        t.route_by_field = None;
        t.add_fields = vec![FieldRef::parse("__", "op").unwrap()];
        t.drop_fields = Some(DropFields {
            header: "unchanged".into(),
            from_key: true,
            keep_schema_compatible: true,
        });
        let mut record = event(update);
        record
            .headers
            .push(("unchanged".into(), r#"["id","note","__op"]"#.into()));
        let out = t.apply(record).unwrap().unwrap();
        // Schema-compatible: only the optional fields go (id is required); the metadata is
        // added before the drop on an update, so __op (optional) goes too.
        assert_eq!(
            out.value.value.as_deref(),
            Some(r#"{"id":1,"dest":null,"__deleted":"false"}"#)
        );
        assert_eq!(out.key.value.as_deref(), Some(r#"{"id":1}"#));
        // Not schema-compatible: every listed field; a rewritten delete gets its metadata
        // after the drop.
        t.drop_fields.as_mut().unwrap().keep_schema_compatible = false;
        t.drop_fields.as_mut().unwrap().from_key = false;
        let delete = r#"{"before":{"id":1,"dest":"x","note":"n"},"after":null,"source":{"table":"t"},"op":"d"}"#;
        let mut record = event(delete);
        record
            .headers
            .push(("unchanged".into(), r#"["id","note","__op"]"#.into()));
        let out = t.apply(record).unwrap().unwrap();
        assert_eq!(
            out.value.value.as_deref(),
            Some(r#"{"dest":"x","__deleted":"true","__op":"d"}"#)
        );
        assert_eq!(out.key.value.as_deref(), Some(r#"{"id":1,"note":"k"}"#));
        // A header that is not a list fails the record, as Connect's cast does.
        let mut record = event(update);
        record.headers.push(("unchanged".into(), "note".into()));
        assert!(t.apply(record).unwrap_err().contains("expected a list"));
    }
}
