//! Debezium's `PartitionRouting`: a change event sent to the partition a hash of some of its
//! fields gives (`partition.payload.fields`, `partition.topic.num`, `partition.hash.function`),
//! the same partition Debezium computes: the sum of the fields' Java hashes (`Object.hashCode`
//! of the Java object Connect holds, or Debezium's MurmurHash3 of it), its sign bit cleared,
//! modulo the partition count.
//!
//! The Java object is known from the field's Connect schema: an `Integer` for an int32, a
//! `Long` for an int64, a `BigDecimal` for a Decimal, a `java.util.Date` for Connect's
//! Date/Time/Timestamp, … Without schemas in the events (`schemas_enable = false`) an
//! integer is hashed as an `Integer` when it fits one, else as a `Long`, a fraction as a
//! `Double` (docs/transforms.md: a negative int64 then lands elsewhere than in Connect).

use super::json::{Members, Schema, as_str};
use super::record::Record;
use super::schema;

/// `partition.hash.function`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashFunction {
    /// `java`: `Object.hashCode()` (the default).
    Java,
    /// `murmur`: Debezium's `MurmurHash3.hash(Object)`.
    Murmur,
}

/// `PartitionRouting`.
#[derive(Debug)]
pub struct PartitionRouting {
    /// `partition.payload.fields`: each a path in the envelope (`after.id`, `source.table`,
    /// `change.id`: the `after`, or a delete's `before`).
    pub fields: Vec<Vec<String>>,
    /// `partition.topic.num`.
    pub partitions: i32,
    /// `partition.hash.function`.
    pub hash: HashFunction,
}

/// A field's value as the Java object Connect holds.
#[derive(Debug, Clone, PartialEq)]
enum JavaValue {
    /// `Byte`, `Short`, `Integer`: the value is its hash.
    Int(i32),
    /// `Long`.
    Long(i64),
    /// `Float`.
    Float(f32),
    /// `Double`.
    Double(f64),
    /// `Boolean`.
    Boolean(bool),
    /// `String`.
    Text(String),
    /// `BigDecimal`: unscaled value and scale.
    Decimal(i128, i32),
    /// `java.util.Date`: milliseconds since the epoch.
    Date(i64),
}

impl PartitionRouting {
    /// Applies the transform.
    ///
    /// # Errors
    ///
    /// A field whose Java hash is not its content (bytes, an array, a struct, a map), which
    /// sluice cannot compute.
    pub fn apply(&self, mut record: Record) -> Result<Record, String> {
        let Some(text) = record.value.value.as_deref() else {
            return Ok(record);
        };
        let Ok(envelope) = Members::parse(text) else {
            return Ok(record);
        };
        let envelope_schema = match &record.value.schema {
            Schema::Json(s) => {
                if !schema::name(s).is_some_and(|n| n.ends_with(".Envelope")) {
                    return Ok(record);
                }
                Some(s.as_str())
            }
            _ => {
                if envelope.get("op").is_none() || envelope.get("source").is_none() {
                    return Ok(record);
                }
                None
            }
        };
        let op = envelope.get("op").and_then(|o| as_str(o.get()));
        // Debezium leaves truncates and logical decoding messages as they are.
        if matches!(op.as_deref(), Some("t" | "m")) {
            return Ok(record);
        }
        let mut sum: i32 = 0;
        let mut found = false;
        for path in &self.fields {
            let Some(value) = lookup(path, &envelope, envelope_schema, op.as_deref())? else {
                continue;
            };
            found = true;
            sum = sum.wrapping_add(match self.hash {
                HashFunction::Java => java_hash(&value),
                HashFunction::Murmur => murmur_hash(&value),
            });
        }
        if !found {
            return Ok(record);
        }
        let mut normalized = sum & i32::MAX;
        if normalized == i32::MAX {
            normalized = 0;
        }
        record.partition = Some(normalized % self.partitions);
        Ok(record)
    }
}

/// The value of `path` in the envelope as its Java object; `None` when a struct on the path or
/// the field is missing, or the value is null (Debezium leaves it out).
fn lookup(
    path: &[String],
    envelope: &Members<'_>,
    envelope_schema: Option<&str>,
    op: Option<&str>,
) -> Result<Option<JavaValue>, String> {
    let mut text: String = envelope.render();
    let mut field_schema: Option<String> = envelope_schema.map(str::to_owned);
    for (depth, name) in path.iter().enumerate() {
        let name = if name == "change" && depth + 1 < path.len() {
            if op == Some("d") { "before" } else { "after" }
        } else {
            name.as_str()
        };
        if text == "null" {
            // A null struct on the path (`after.id` on a delete): left out, as Debezium 3.7
            // does (the probe's output).
            return Ok(None);
        }
        let Ok(members) = Members::parse(&text) else {
            // Connect's getStruct on a field that is not a struct: left out.
            return Ok(None);
        };
        let next_schema = match &field_schema {
            Some(s) => match schema::field(s, name) {
                Some(f) => Some(f),
                None => return Ok(None),
            },
            None => None,
        };
        let Some(value) = members.get(name) else {
            return Ok(None);
        };
        text = value.get().to_owned();
        field_schema = next_schema;
        if depth + 1 < path.len()
            && let Some(s) = &field_schema
            && schema::type_of(s).as_deref() != Some("struct")
        {
            return Ok(None);
        }
    }
    if text == "null" {
        return Ok(None);
    }
    java_value(&text, field_schema.as_deref(), &path.join(".")).map(Some)
}

/// The JSON `text` of a field of schema `schema` as Connect's Java object.
fn java_value(text: &str, schema: Option<&str>, path: &str) -> Result<JavaValue, String> {
    let not_hashed = |kind: &str| {
        format!(
            "{path}: a {kind} field is hashed by Connect through its Java object's identity, not its content: partition by another field"
        )
    };
    let number = |t: &str| -> Result<i64, String> {
        t.parse::<i64>()
            .map_err(|_| format!("{path}: expected an integer, found {t}"))
    };
    let float = |t: &str| -> Result<f64, String> {
        match t.trim_matches('"') {
            "NaN" => Ok(f64::NAN),
            "Infinity" => Ok(f64::INFINITY),
            "-Infinity" => Ok(f64::NEG_INFINITY),
            other => other
                .parse::<f64>()
                .map_err(|_| format!("{path}: expected a number, found {t}")),
        }
    };
    let Some(schema) = schema else {
        return Ok(match text.as_bytes().first() {
            Some(b'"') => JavaValue::Text(as_str(text).unwrap_or_default().into_owned()),
            Some(b't') => JavaValue::Boolean(true),
            Some(b'f') => JavaValue::Boolean(false),
            Some(b'{') => return Err(not_hashed("struct")),
            Some(b'[') => return Err(not_hashed("array")),
            _ => match text.parse::<i64>() {
                Ok(i) => match i32::try_from(i) {
                    Ok(i) => JavaValue::Int(i),
                    Err(_) => JavaValue::Long(i),
                },
                Err(_) => JavaValue::Double(float(text)?),
            },
        });
    };
    let name = schema::name(schema);
    Ok(
        match (schema::type_of(schema).as_deref(), name.as_deref()) {
            (_, Some("org.apache.kafka.connect.data.Date")) => {
                JavaValue::Date(number(text)?.saturating_mul(86_400_000))
            }
            (
                _,
                Some(
                    "org.apache.kafka.connect.data.Time"
                    | "org.apache.kafka.connect.data.Timestamp",
                ),
            ) => JavaValue::Date(number(text)?),
            (Some("bytes"), Some("org.apache.kafka.connect.data.Decimal")) => {
                let (unscaled, scale) = super::cast::decimal_of(schema, text)?;
                JavaValue::Decimal(unscaled, scale)
            }
            (Some("int8" | "int16" | "int32"), _) => JavaValue::Int(
                i32::try_from(number(text)?)
                    .map_err(|_| format!("{path}: out of range: {text}"))?,
            ),
            (Some("int64"), _) => JavaValue::Long(number(text)?),
            (Some("float"), _) => JavaValue::Float(float(text)? as f32),
            (Some("double"), _) => JavaValue::Double(float(text)?),
            (Some("boolean"), _) => JavaValue::Boolean(text == "true"),
            (Some("string"), _) => {
                JavaValue::Text(as_str(text).ok_or("expected a string")?.into_owned())
            }
            (Some(kind), _) => return Err(not_hashed(kind)),
            (None, _) => return Err(format!("{path}: its schema has no type")),
        },
    )
}

/// `Object.hashCode()` of the Java object.
fn java_hash(value: &JavaValue) -> i32 {
    let long = |v: i64| (v ^ ((v as u64) >> 32) as i64) as i32;
    match value {
        JavaValue::Int(i) => *i,
        JavaValue::Long(l) | JavaValue::Date(l) => long(*l),
        // floatToIntBits / doubleToLongBits: NaN canonical.
        JavaValue::Float(f) => {
            if f.is_nan() {
                0x7fc0_0000
            } else {
                f.to_bits() as i32
            }
        }
        JavaValue::Double(d) => {
            let bits = if d.is_nan() {
                0x7ff8_0000_0000_0000
            } else {
                d.to_bits() as i64
            };
            long(bits)
        }
        JavaValue::Boolean(b) => {
            if *b {
                1231
            } else {
                1237
            }
        }
        JavaValue::Text(s) => {
            let mut h: i32 = 0;
            for unit in s.encode_utf16() {
                h = h.wrapping_mul(31).wrapping_add(i32::from(unit));
            }
            h
        }
        JavaValue::Decimal(unscaled, scale) => {
            // 31 * BigInteger.hashCode() + scale; BigInteger's: over the magnitude's 32-bit
            // words, most significant first, times the sign.
            let magnitude = unscaled.unsigned_abs();
            let mut h: i32 = 0;
            let mut started = false;
            for shift in (0..4).rev() {
                let word = (magnitude >> (shift * 32)) as u32;
                if word == 0 && !started {
                    continue;
                }
                started = true;
                h = h.wrapping_mul(31).wrapping_add(word as i32);
            }
            let signum = unscaled.signum() as i32;
            h.wrapping_mul(signum).wrapping_mul(31).wrapping_add(*scale)
        }
    }
}

/// Debezium's `MurmurHash3.hash(Object)` (Infinispan's MurmurHash3, x64 variant, seed 9001):
/// a string by its UTF-8 bytes, anything else by its `hashCode()`. Ported here, sign
/// extensions included, because no crate implements this variant (its multipliers change
/// with every block, unlike the reference MurmurHash3).
fn murmur_hash(value: &JavaValue) -> i32 {
    match value {
        JavaValue::Text(s) => (murmur_string(s) >> 32) as i32,
        other => murmur_int(java_hash(other)),
    }
}

struct State {
    h1: i64,
    h2: i64,
    k1: i64,
    k2: i64,
    c1: i64,
    c2: i64,
}

impl State {
    fn new(seed: i64) -> Self {
        State {
            h1: 0x9368_e53c_2f6a_f274_u64 as i64 ^ seed,
            h2: 0x586d_cd20_8f7c_d3fd_u64 as i64 ^ seed,
            k1: 0,
            k2: 0,
            c1: 0x87c3_7b91_1142_53d5_u64 as i64,
            c2: 0x4cf5_ad43_2745_937f_u64 as i64,
        }
    }

    fn bmix(&mut self) {
        self.k1 = self.k1.wrapping_mul(self.c1);
        self.k1 = self.k1.rotate_left(23);
        self.k1 = self.k1.wrapping_mul(self.c2);
        self.h1 ^= self.k1;
        self.h1 = self.h1.wrapping_add(self.h2);
        self.h2 = self.h2.rotate_left(41);
        self.k2 = self.k2.wrapping_mul(self.c2);
        self.k2 = self.k2.rotate_left(23);
        self.k2 = self.k2.wrapping_mul(self.c1);
        self.h2 ^= self.k2;
        self.h2 = self.h2.wrapping_add(self.h1);
        self.h1 = self.h1.wrapping_mul(3).wrapping_add(0x52dc_e729);
        self.h2 = self.h2.wrapping_mul(3).wrapping_add(0x3849_5ab5);
        self.c1 = self.c1.wrapping_mul(5).wrapping_add(0x7b7d_159c);
        self.c2 = self.c2.wrapping_mul(5).wrapping_add(0x6bce_6396);
    }

    fn finish(&mut self, length: i64) -> i64 {
        self.h2 ^= length;
        self.h1 = self.h1.wrapping_add(self.h2);
        self.h2 = self.h2.wrapping_add(self.h1);
        self.h1 = fmix(self.h1);
        self.h2 = fmix(self.h2);
        self.h1 = self.h1.wrapping_add(self.h2);
        self.h1
    }
}

fn fmix(mut k: i64) -> i64 {
    k ^= ((k as u64) >> 33) as i64;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd_u64 as i64);
    k ^= ((k as u64) >> 33) as i64;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53_u64 as i64);
    k ^= ((k as u64) >> 33) as i64;
    k
}

/// `MurmurHash3.hash(int)`: the four bytes of a hash code, low first.
fn murmur_int(hashcode: i32) -> i32 {
    let byte = |shift: u32| i64::from((hashcode >> shift) as i8);
    let mut state = State::new(9001);
    // `(long) b3 << 24` etc.: Java sign-extends each byte.
    state.k1 ^= byte(24) << 24;
    state.k1 ^= byte(16) << 16;
    state.k1 ^= byte(8) << 8;
    state.k1 ^= byte(0);
    state.bmix();
    ((state.finish(4) as u64) >> 32) as i32
}

/// `MurmurHash3_x64_64_String(s, 9001)`: over the string's UTF-8 bytes (an unpaired surrogate
/// as `?`).
fn murmur_string(s: &str) -> i64 {
    let mut state = State::new(9001);
    let mut length: i64 = 0;
    let add = |state: &mut State, b: u8, len: i64| {
        let shift = (len & 7) * 8;
        let bb = i64::from(b) << shift;
        if len & 8 == 0 {
            state.k1 |= bb;
        } else {
            state.k2 |= bb;
            if len & 0xf == 0xf {
                state.bmix();
                state.k1 = 0;
                state.k2 = 0;
            }
        }
    };
    // A Rust string has no unpaired surrogates: its UTF-8 is Java's encoding here.
    for b in s.bytes() {
        add(&mut state, b, length);
        length += 1;
    }
    let (saved1, saved2) = (state.k1, state.k2);
    state.k1 = 0;
    state.k2 = 0;
    // Java's switch falls through from `length & 15` down to 1, each byte sign-extended.
    let byte = |v: i64, shift: u32| i64::from((v >> shift) as i8);
    let tail = length & 15;
    for n in (1..=tail).rev() {
        match n {
            9..=15 => {
                let shift = ((n - 9) * 8) as u32;
                state.k2 ^= byte(saved2, shift) << shift;
            }
            _ => {
                let shift = ((n - 1) * 8) as u32;
                state.k1 ^= byte(saved1, shift) << shift;
            }
        }
    }
    if tail > 0 {
        state.bmix();
    }
    state.finish(length)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transform::json::Data;

    const ROW: &str = r#"{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"},{"type":"string","optional":true,"field":"name"},{"type":"int64","optional":true,"field":"big"},{"type":"int16","optional":true,"field":"small"},{"type":"float","optional":true,"field":"f"},{"type":"double","optional":true,"field":"d"},{"type":"boolean","optional":true,"field":"flag"},{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"2"},"field":"price"},{"type":"int64","optional":true,"name":"org.apache.kafka.connect.data.Timestamp","version":1,"field":"at"}],"optional":true,"name":"p.public.t.Value"}"#;

    /// The rows of scripts/debezium/PartitionRoutingProbe.java, as JsonConverter writes them.
    const ROWS: [&str; 4] = [
        r#"{"id":1,"name":"alice","big":5,"small":3,"f":1.5,"d":2.25,"flag":true,"price":"BNI=","at":1700000000123}"#,
        r#"{"id":-7,"name":"Ünïcödé 😀","big":-1,"small":-2,"f":-0.1,"d":-1.0E-7,"flag":false,"price":"+w==","at":-1}"#,
        r#"{"id":2147483647,"name":"","big":9000000000,"small":null,"f":"NaN","d":"NaN","flag":null,"price":"J+QbMka+ybFuOYEV","at":null}"#,
        r#"{"id":42,"name":null,"big":null,"small":null,"f":null,"d":null,"flag":null,"price":null,"at":null}"#,
    ];

    fn event(row: usize, op: &str) -> Record {
        let row_field = |name: &str| super::super::schema::as_field(ROW, name);
        let schema = format!(
            r#"{{"type":"struct","fields":[{},{},{{"type":"struct","fields":[{{"type":"string","optional":false,"field":"table"}}],"optional":false,"name":"io.debezium.connector.postgresql.Source","field":"source"}},{{"type":"string","optional":false,"field":"op"}}],"optional":false,"name":"p.public.t.Envelope","version":2}}"#,
            row_field("before"),
            row_field("after")
        );
        let (before, after) = if op == "d" {
            (ROWS[row], "null")
        } else {
            ("null", ROWS[row])
        };
        Record {
            topic: "p.public.t".into(),
            key: Data::null_with(Schema::None),
            value: Data {
                schema: Schema::Json(schema),
                value: Some(format!(
                    r#"{{"before":{before},"after":{after},"source":{{"table":"t"}},"op":"{op}"}}"#
                )),
            },
            headers: Vec::new(),
            header_schemas: Vec::new(),
            partition: None,
        }
    }

    /// Every line of the probe's output (Debezium 3.7's PartitionRouting on the same events):
    /// sluice computes the same partition, leaves the same records alone and fails the same.
    #[test]
    fn partitions_are_debeziums() {
        let expected = include_str!("partition_probe.txt");
        let mut lines = 0;
        for line in expected.lines().filter(|l| !l.starts_with('#')) {
            let parts: Vec<&str> = line.split(' ').collect();
            let [hash, spec, n, op, row, want] = parts.as_slice() else {
                panic!("{line}");
            };
            let routing = PartitionRouting {
                fields: spec
                    .split(',')
                    .map(|f| f.split('.').map(str::to_owned).collect())
                    .collect(),
                partitions: n.parse().unwrap(),
                hash: if *hash == "java" {
                    HashFunction::Java
                } else {
                    HashFunction::Murmur
                },
            };
            let got = match routing.apply(event(row.parse().unwrap(), op)) {
                Ok(r) => r.partition.map_or("kept".to_owned(), |p| p.to_string()),
                Err(_) => "error".to_owned(),
            };
            assert_eq!(&got, want, "{line}");
            lines += 1;
        }
        assert_eq!(lines, 416);
    }

    #[test]
    fn java_and_murmur_hashes_are_javas() {
        // "alice".hashCode(), Long.hashCode(-1), a NaN float.
        assert_eq!(java_hash(&JavaValue::Text("alice".into())), 92_903_040);
        assert_eq!(java_hash(&JavaValue::Long(-1)), 0);
        assert_eq!(java_hash(&JavaValue::Float(f32::NAN)), 0x7fc0_0000);
        // new BigDecimal("12.34").hashCode() = 31 * 1234 + 2.
        assert_eq!(java_hash(&JavaValue::Decimal(1234, 2)), 38_256);
        assert_eq!(java_hash(&JavaValue::Decimal(-5, 2)), -153);
    }
}
