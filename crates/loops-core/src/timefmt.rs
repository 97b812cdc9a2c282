//! Serde for instants: RFC 3339, UTC, millisecond precision, `Z` suffix — the one
//! textual form in every JSON document (`2026-12-01T09:00:00.000Z`). Parsing accepts any
//! RFC 3339 offset and drops what is finer than a millisecond ([`parse_instant`]), so an
//! instant read from JSON is the one a store keeps and JSON shows: export → import
//! gives back the same loop.

use crate::Instant;
use chrono::SubsecRound;
use serde::{Deserialize, Deserializer, Serializer};

pub fn serialize<S: Serializer>(t: &Instant, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&crate::format_instant(t))
}

/// An RFC 3339 instant (any offset) in UTC, truncated to whole milliseconds.
pub fn parse_instant(text: &str) -> Result<Instant, chrono::ParseError> {
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&chrono::Utc).trunc_subsecs(3))
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Instant, D::Error> {
    let text = String::deserialize(d)?;
    parse_instant(&text).map_err(serde::de::Error::custom)
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
            .map(|text| parse_instant(&text).map_err(serde::de::Error::custom))
            .transpose()
    }
}
