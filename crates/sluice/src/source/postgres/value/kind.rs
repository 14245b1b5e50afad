//! How each PostgreSQL type becomes JSON (`Kind`), and why a value could not (`ValueError`).

use crate::event::BinaryHandlingMode;
use crate::event::IntervalHandlingMode;
use crate::event::TemporalUnit;

/// Not a PostgreSQL type (`InvalidOid`): what sluice maps an array of an enum type to (the catalog tells
/// which arrays those are). Its elements are strings; a NULL element makes Debezium write the
/// whole array as `null`.
pub(crate) const ENUM_ARRAY_OID: u32 = 0;

/// Why a column value could not be mapped to JSON. It never holds the value itself, so it is
/// safe to log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ValueError {
    /// A value that must become a JSON string was not UTF-8.
    #[error("the value is not valid UTF-8")]
    InvalidUtf8,
    /// The text is not a value of the type, in the form the session settings produce.
    #[error("the text is not a valid {type_name} value")]
    Invalid {
        /// The PostgreSQL type.
        type_name: &'static str,
    },
    /// The value parsed but its JSON form does not fit: a 64-bit integer of microseconds or
    /// milliseconds, for the temporal types.
    #[error("the {type_name} value is out of range")]
    OutOfRange {
        /// The PostgreSQL type.
        type_name: &'static str,
    },
}

impl ValueError {
    /// The name of the type whose value failed.
    pub(crate) fn type_name(self) -> &'static str {
        match self {
            ValueError::InvalidUtf8 => "text",
            ValueError::Invalid { type_name } | ValueError::OutOfRange { type_name } => type_name,
        }
    }
}

/// How a value of a type becomes JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `bool`: `true` or `false`.
    Bool,
    /// `int2`, `int4`, `int8`, `oid`: a JSON integer.
    Integer,
    /// `float8`: a JSON number, or a string for `NaN` and the infinities.
    Float,
    /// `float4`: the same, its digits chosen as for a 32-bit float.
    Float4,
    /// `bit(n)`: `true`/`false` for `bit(1)`, otherwise as `varbit`.
    Bit,
    /// `varbit`: base64 of the bits as Java's `BitSet.toByteArray` (the last bit is bit 0,
    /// little-endian bytes, trailing zero bytes dropped), as Debezium.
    VarBit,
    /// `numeric` (`decimal.handling.mode=string`): a string of the exact decimal, Debezium's
    /// `NAN`, `POSITIVE_INFINITY`, `NEGATIVE_INFINITY` for the specials.
    Numeric,
    /// `numeric` (`precise`): base64 of the unscaled value's bytes with the column's scale, or
    /// `{"scale","value"}` without one; `null` for the specials.
    NumericPrecise,
    /// `numeric` (`double`): a JSON number, strings for the specials.
    NumericDouble,
    /// `money` (`string`): a string of the amount with this many fraction digits.
    Money(u8),
    /// `money` (`precise`): base64 of the unscaled amount's bytes at this scale.
    MoneyPrecise(u8),
    /// `money` (`double`): a JSON number.
    MoneyDouble,
    /// Text-like and unknown types: a string of the text.
    Text,
    /// `bytea`: a string in the mode's encoding.
    Bytea(BinaryHandlingMode),
    /// `json`, `jsonb`: embedded as is.
    Json,
    /// `date`: days since 1970-01-01.
    Date,
    /// `time`: microseconds or milliseconds since midnight.
    Time(TemporalUnit),
    /// `timetz`: an ISO-8601 time string in UTC.
    TimeTz,
    /// `timestamp`: microseconds or milliseconds since the epoch.
    Timestamp(TemporalUnit),
    /// `timestamptz`: an ISO-8601 timestamp string in UTC.
    TimestampTz,
    /// `interval`: microseconds, or an ISO-8601 string.
    Interval(IntervalHandlingMode),
    /// `point`: `io.debezium.data.geometry.Point`, `{"x","y","wkb","srid"}`.
    Point,
    /// `box`: `io.debezium.data.geometry.Geometry`, a polygon's `{"wkb","srid","extensions"}`.
    Box,
    /// An enum's array elements: strings, but a NULL element nulls the array.
    EnumText,
}

impl Kind {
    /// The type's name, for errors.
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Bool => "boolean",
            Kind::Integer => "integer",
            Kind::Float | Kind::Float4 => "floating-point",
            Kind::Bit | Kind::VarBit => "bit",
            Kind::Numeric | Kind::NumericPrecise | Kind::NumericDouble => "numeric",
            Kind::Money(_) | Kind::MoneyPrecise(_) | Kind::MoneyDouble => "money",
            Kind::Text => "text",
            Kind::Bytea(_) => "bytea",
            Kind::Json => "json",
            Kind::Date => "date",
            Kind::Time(_) => "time",
            Kind::TimeTz => "timetz",
            Kind::Timestamp(_) => "timestamp",
            Kind::TimestampTz => "timestamptz",
            Kind::Interval(_) => "interval",
            Kind::Point => "point",
            Kind::Box => "box",
            Kind::EnumText => "enum",
        }
    }

    /// The error for text that is not a value of this kind.
    pub(super) fn invalid(self) -> ValueError {
        ValueError::Invalid {
            type_name: self.name(),
        }
    }

    /// The error for a value of this kind whose JSON form does not fit.
    pub(super) fn out_of_range(self) -> ValueError {
        ValueError::OutOfRange {
            type_name: self.name(),
        }
    }

    /// Whether values of this kind become JSON strings of their (unescaped) text.
    pub(super) fn is_text(self) -> bool {
        matches!(self, Kind::Text | Kind::EnumText)
    }
}

/// The kind of a non-array type; unknown types are text.
pub(super) fn scalar_kind(type_oid: u32) -> Kind {
    match type_oid {
        16 => Kind::Bool,
        // int8, int2, int4, oid.
        20 | 21 | 23 | 26 => Kind::Integer,
        700 => Kind::Float4,
        701 => Kind::Float,
        1560 => Kind::Bit,
        1562 => Kind::VarBit,
        1700 => Kind::Numeric,
        790 => Kind::Money(2),
        17 => Kind::Bytea(BinaryHandlingMode::Bytes),
        // json, jsonb.
        114 | 3802 => Kind::Json,
        1082 => Kind::Date,
        1083 => Kind::Time(TemporalUnit::Micros),
        1266 => Kind::TimeTz,
        1114 => Kind::Timestamp(TemporalUnit::Micros),
        1184 => Kind::TimestampTz,
        1186 => Kind::Interval(IntervalHandlingMode::Numeric),
        600 => Kind::Point,
        603 => Kind::Box,
        // text, varchar, bpchar, name, "char", xml, money, inet, cidr, macaddr, uuid, enums,
        // and everything else.
        _ => Kind::Text,
    }
}

/// The element kind of an array type sluice maps element by element; `None` for other types,
/// including arrays of unknown element types, which become a string of the whole literal.
pub(super) fn array_element_kind(type_oid: u32) -> Option<Kind> {
    Some(match type_oid {
        1000 => Kind::Bool,
        // _int2, _int4, _int8, _oid.
        1005 | 1007 | 1016 | 1028 => Kind::Integer,
        1021 => Kind::Float4,
        1022 => Kind::Float,
        1231 => Kind::Numeric,
        // _text, _varchar, _bpchar, _uuid, _char, _inet, _cidr, _macaddr, _macaddr8.
        1009 | 1015 | 1014 | 2951 | 1002 | 1041 | 651 | 1040 | 775 => Kind::Text,
        // _json, _jsonb.
        199 | 3807 => Kind::Json,
        1001 => Kind::Bytea(BinaryHandlingMode::Bytes),
        1182 => Kind::Date,
        1183 => Kind::Time(TemporalUnit::Micros),
        1270 => Kind::TimeTz,
        1115 => Kind::Timestamp(TemporalUnit::Micros),
        1185 => Kind::TimestampTz,
        1187 => Kind::Interval(IntervalHandlingMode::Numeric),
        ENUM_ARRAY_OID => Kind::EnumText,
        _ => return None,
    })
}
