//! Connect schemas as JsonConverter writes them (`{"type":"struct","fields":[…],"optional":…,
//! "name":…}`), changed the way Connect's `SchemaBuilder` / `SchemaUtil` change them.

use super::json::{Members, ObjectWriter, string};

/// The schema (JSON text) of the field `name` of the struct schema `schema`, as it appears in
/// its `fields` (with its `"field"` member).
pub fn field(schema: &str, name: &str) -> Option<String> {
    let members = Members::parse(schema).ok()?;
    let fields = super::json::elements(members.get("fields")?.get())?;
    fields.into_iter().find_map(|f| {
        let m = Members::parse(f.get()).ok()?;
        let is = m
            .get("field")
            .and_then(|v| super::json::as_str(v.get()))
            .is_some_and(|n| n == name);
        is.then(|| f.get().to_owned())
    })
}

/// The names of a struct schema's fields, in order.
pub fn field_names(schema: &str) -> Vec<String> {
    let Ok(members) = Members::parse(schema) else {
        return Vec::new();
    };
    let Some(fields) = members.get("fields") else {
        return Vec::new();
    };
    let fields = super::json::elements(fields.get()).unwrap_or_default();
    fields
        .into_iter()
        .filter_map(|f| {
            let m = Members::parse(f.get()).ok()?;
            super::json::as_str(m.get("field")?.get()).map(|n| n.into_owned())
        })
        .collect()
}

/// A field's schema taken out of its struct (ExtractField): without its `"field"` member.
pub fn extracted(field_schema: &str) -> String {
    rewrite(field_schema, |name, value, out| {
        if name != "field" {
            out.member(name, value);
        }
    })
}

/// `SchemaUtil.copySchemaBasics(schema).optional()` as the field `name`: the type, name,
/// version, doc and parameters (and, for a struct, its fields), optional, no default.
pub fn optional_field(field_schema: &str, name: &str) -> String {
    let mut text = rewrite(field_schema, |member, value, out| match member {
        "field" | "default" => {}
        "optional" => out.member("optional", "true"),
        _ => out.member(member, value),
    });
    text.pop();
    text.push_str(",\"field\":");
    text.push_str(&string(name));
    text.push('}');
    text
}

/// `SchemaUtil.copySchemaBasics(struct, SchemaBuilder.struct())` with `fields` as its fields:
/// the struct's name, version, doc and parameters, required (`"optional":false`), no default.
pub fn copied_struct(schema: &str, fields: &[String]) -> String {
    rewrite(schema, |member, value, out| match member {
        "fields" => out.member("fields", &format!("[{}]", fields.join(","))),
        "optional" => out.member("optional", "false"),
        "field" | "default" => {}
        _ => out.member(member, value),
    })
}

/// The field schemas of a struct schema, each as its JSON text.
pub fn fields(schema: &str) -> Vec<String> {
    let Ok(members) = Members::parse(schema) else {
        return Vec::new();
    };
    let Some(fields) = members.get("fields") else {
        return Vec::new();
    };
    let fields = super::json::elements(fields.get()).unwrap_or_default();
    fields.into_iter().map(|f| f.get().to_owned()).collect()
}

/// A field schema renamed to `name` (its `"field"` member).
pub fn renamed(field_schema: &str, name: &str) -> String {
    rewrite(field_schema, |member, value, out| {
        if member == "field" {
            out.member("field", &string(name));
        } else {
            out.member(member, value);
        }
    })
}

/// A struct schema of `fields`, without a name (`SchemaBuilder.struct()`): required.
pub fn anonymous_struct(fields: &[String]) -> String {
    format!(
        "{{\"type\":\"struct\",\"fields\":[{}],\"optional\":false}}",
        fields.join(",")
    )
}

/// `schema` as the field `name` of a struct (`"field"` written last, as JsonConverter does).
pub fn as_field(schema: &str, name: &str) -> String {
    let mut text = rewrite(schema, |member, value, out| {
        if member != "field" {
            out.member(member, value);
        }
    });
    text.pop();
    if text.len() > 1 {
        text.push(',');
    }
    text.push_str("\"field\":");
    text.push_str(&string(name));
    text.push('}');
    text
}

/// A struct schema renamed to `name` (added after `optional` when it has none), with `fields`
/// as its fields when given; its other members as they are.
pub fn renamed_struct(schema: &str, name: &str, fields: Option<&[String]>) -> String {
    let has_name = Members::parse(schema).is_ok_and(|m| m.get("name").is_some());
    rewrite(schema, |member, value, out| match member {
        "name" => out.member("name", &string(name)),
        "fields" => match fields {
            Some(fields) => out.member("fields", &format!("[{}]", fields.join(","))),
            None => out.member(member, value),
        },
        "optional" if !has_name => {
            out.member(member, value);
            out.member("name", &string(name));
        }
        _ => out.member(member, value),
    })
}

/// A struct schema with `fields` as its fields (`SchemaUtil.copySchemaBasics` with the
/// struct's optionality kept), without a default.
pub fn with_fields(schema: &str, fields: &[String]) -> String {
    rewrite(schema, |member, value, out| match member {
        "fields" => out.member("fields", &format!("[{}]", fields.join(","))),
        "default" => {}
        _ => out.member(member, value),
    })
}

/// A field schema with `replacement`'s members (a schema without `field`) as its own, keeping
/// its `"field"` member last.
pub fn replaced_field(field_schema: &str, replacement: &str) -> String {
    let Some(name) = Members::parse(field_schema)
        .ok()
        .and_then(|m| m.get("field").map(|f| f.get().to_owned()))
    else {
        return replacement.to_owned();
    };
    let mut text = replacement.to_owned();
    text.pop();
    text.push_str(",\"field\":");
    text.push_str(&name);
    text.push('}');
    text
}

/// A field schema's `"optional"`.
pub fn is_optional(field_schema: &str) -> bool {
    Members::parse(field_schema)
        .ok()
        .and_then(|m| m.get("optional").map(|o| o.get() == "true"))
        .unwrap_or(false)
}

/// A field schema's `"type"`.
pub fn type_of(field_schema: &str) -> Option<String> {
    let members = Members::parse(field_schema).ok()?;
    super::json::as_str(members.get("type")?.get()).map(|n| n.into_owned())
}

/// A schema's name.
pub fn name(schema: &str) -> Option<String> {
    let members = Members::parse(schema).ok()?;
    super::json::as_str(members.get("name")?.get()).map(|n| n.into_owned())
}

/// `schema`'s members through `each` (member name, its JSON text, the output object).
fn rewrite(schema: &str, mut each: impl FnMut(&str, &str, &mut ObjectWriter)) -> String {
    let Ok(members) = Members::parse(schema) else {
        return schema.to_owned();
    };
    let mut out = ObjectWriter::new();
    for (name, value) in &members.0 {
        each(name, value.get(), &mut out);
    }
    out.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ENVELOPE: &str = r#"{"type":"struct","fields":[{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],"optional":true,"name":"p.public.t.Value","field":"before"},{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],"optional":true,"name":"p.public.t.Value","field":"after"},{"type":"string","optional":false,"field":"op"}],"optional":false,"name":"p.public.t.Envelope","version":2}"#;

    #[test]
    fn fields_are_found_extracted_and_copied_as_connect_does() {
        let after = field(ENVELOPE, "after").unwrap();
        assert_eq!(
            extracted(&after),
            r#"{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],"optional":true,"name":"p.public.t.Value"}"#
        );
        let op = field(ENVELOPE, "op").unwrap();
        assert_eq!(
            optional_field(&op, "__op"),
            r#"{"type":"string","optional":true,"field":"__op"}"#
        );
        let value = extracted(&after);
        let mut fields = super::fields(&value);
        fields.push(optional_field(&op, "__op"));
        assert_eq!(
            copied_struct(&value, &fields),
            r#"{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"},{"type":"string","optional":true,"field":"__op"}],"optional":false,"name":"p.public.t.Value"}"#
        );
        assert_eq!(field_names(ENVELOPE), ["before", "after", "op"]);
        assert_eq!(name(ENVELOPE).as_deref(), Some("p.public.t.Envelope"));
    }
}
