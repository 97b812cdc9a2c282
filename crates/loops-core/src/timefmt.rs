//! Serde for instants: RFC 3339, UTC, millisecond precision, `Z` suffix — the one
//! textual form in every JSON document (`2026-12-01T09:00:00.000Z`). Parsing accepts any
//! RFC 3339 offset.

use crate::Instant;
use serde::{Deserialize, Deserializer, Serializer};

pub fn serialize<S: Serializer>(t: &Instant, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&crate::format_instant(t))
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Instant, D::Error> {
    let text = String::deserialize(d)?;
    chrono::DateTime::parse_from_rfc3339(&text)
        .map(|t| t.with_timezone(&chrono::Utc))
        .map_err(serde::de::Error::custom)
}

/// The same for `Option<Instant>` (`null` when absent).
pub mod option {
    use super::*;

    pub fn serialize<S: Serializer>(t: &Option<Instant>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => super::serialize(t, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Instant>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|text| {
                chrono::DateTime::parse_from_rfc3339(&text)
                    .map(|t| t.with_timezone(&chrono::Utc))
                    .map_err(serde::de::Error::custom)
            })
            .transpose()
    }
}
