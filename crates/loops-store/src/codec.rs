//! Stored values as every backend writes and reads them: instants as milliseconds, ids, JSON columns, and typed column reads that name the column a corrupt row failed on.

use crate::{DefinitionJson, StoreError};
use loops_core::{Instant, Usage};
use std::str::FromStr;

/// Result of a column read or an encoding.
pub type Result<T> = std::result::Result<T, StoreError>;

/// New ids are retried on the (astronomically unlikely) collision of 48 random bits.
pub const ID_ATTEMPTS: usize = 8;

/// 12 lowercase hex characters (48 random bits): short enough to type.
pub fn new_id() -> String {
    format!("{:012x}", rand::random::<u64>() >> 16)
}

/// An instant as stored: milliseconds since the epoch.
pub fn ms(t: &Instant) -> i64 {
    t.timestamp_millis()
}

/// [`ms`] of an optional instant.
pub fn opt_ms(t: Option<&Instant>) -> Option<i64> {
    t.map(ms)
}

/// `u64` quantities (durations, tokens, start times) saturate at `i64::MAX` in storage.
pub fn sat_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The exclusive upper bound of the ids starting with `prefix` under a binary ("C")
/// collation: the prefix with U+10FFFF appended, so `id >= prefix AND id < upper` is a
/// primary-key range scan.
pub fn id_prefix_upper(prefix: &str) -> String {
    format!("{prefix}\u{10FFFF}")
}

/// The rows of an id range scan ([`id_prefix_upper`]) whose id starts with `prefix`: the
/// range bounds the scan, this keeps the result exact for any input.
pub fn keep_id_prefix<T>(rows: Vec<T>, prefix: &str, id: fn(&T) -> &str) -> Vec<T> {
    rows.into_iter()
        .filter(|t| id(t).starts_with(prefix))
        .collect()
}

/// [`StoreError::Decode`] naming the column: `column {col}: {why}`.
pub fn corrupt(col: &str, why: impl std::fmt::Display) -> StoreError {
    StoreError::Decode(format!("column {col}: {why}"))
}

/// A stored instant (milliseconds since the epoch) of column `col`.
pub fn instant_from_ms(v: i64, col: &str) -> Result<Instant> {
    chrono::DateTime::from_timestamp_millis(v)
        .ok_or_else(|| corrupt(col, format_args!("instant {v} out of range")))
}

/// A stored enum (its text form) of column `col`.
pub fn parse_enum<T: FromStr<Err = String>>(text: &str, col: &str) -> Result<T> {
    text.parse().map_err(|e| corrupt(col, e))
}

/// A stored JSON text of column `col`.
pub fn parse_json<T: serde::de::DeserializeOwned>(text: &str, col: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|e| corrupt(col, e))
}

/// A stored integer of column `col` that must fit a `u32`.
pub fn to_u32(v: i64, col: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| corrupt(col, format_args!("{v} out of range")))
}

/// A stored integer of column `col` that must fit an `i32`.
pub fn to_i32(v: i64, col: &str) -> Result<i32> {
    i32::try_from(v).map_err(|_| corrupt(col, format_args!("{v} out of range")))
}

/// A stored integer of column `col` that must not be negative.
pub fn to_u64(v: i64, col: &str) -> Result<u64> {
    u64::try_from(v).map_err(|_| corrupt(col, format_args!("{v} is negative")))
}

/// Implements [`StoredRow`] for a backend's row wrapper `$ty` (a tuple struct around the
/// driver's row) whose driver method `$get(idx)` reads a column as any of the five types
/// the trait asks for; a failed read names its column ([`corrupt`]).
#[macro_export]
macro_rules! stored_row_by {
    ($ty:ty, $get:ident) => {
        impl $crate::codec::StoredRow for $ty {
            fn text(&self, idx: usize, col: &str) -> $crate::codec::Result<String> {
                self.0.$get(idx).map_err(|e| $crate::codec::corrupt(col, e))
            }
            fn opt_text(&self, idx: usize, col: &str) -> $crate::codec::Result<Option<String>> {
                self.0.$get(idx).map_err(|e| $crate::codec::corrupt(col, e))
            }
            fn int(&self, idx: usize, col: &str) -> $crate::codec::Result<i64> {
                self.0.$get(idx).map_err(|e| $crate::codec::corrupt(col, e))
            }
            fn opt_int(&self, idx: usize, col: &str) -> $crate::codec::Result<Option<i64>> {
                self.0.$get(idx).map_err(|e| $crate::codec::corrupt(col, e))
            }
            fn flag(&self, idx: usize, col: &str) -> $crate::codec::Result<bool> {
                self.0.$get(idx).map_err(|e| $crate::codec::corrupt(col, e))
            }
        }
    };
}

/// One row of a query, read by column: a backend implements the five plain reads on
/// its own row type (its errors as [`corrupt`] of the column), and gets the typed reads.
pub trait StoredRow {
    /// A TEXT column.
    fn text(&self, idx: usize, col: &str) -> Result<String>;
    /// A TEXT column that may be NULL.
    fn opt_text(&self, idx: usize, col: &str) -> Result<Option<String>>;
    /// An integer column.
    fn int(&self, idx: usize, col: &str) -> Result<i64>;
    /// An integer column that may be NULL.
    fn opt_int(&self, idx: usize, col: &str) -> Result<Option<i64>>;
    /// A boolean column.
    fn flag(&self, idx: usize, col: &str) -> Result<bool>;

    /// An instant column.
    fn instant(&self, idx: usize, col: &str) -> Result<Instant> {
        instant_from_ms(self.int(idx, col)?, col)
    }

    /// An instant column that may be NULL.
    fn opt_instant(&self, idx: usize, col: &str) -> Result<Option<Instant>> {
        self.opt_int(idx, col)?
            .map(|v| instant_from_ms(v, col))
            .transpose()
    }

    /// An enum stored as its text.
    fn parsed<T: FromStr<Err = String>>(&self, idx: usize, col: &str) -> Result<T> {
        parse_enum(&self.text(idx, col)?, col)
    }

    /// An enum stored as its text, or NULL.
    fn opt_parsed<T: FromStr<Err = String>>(&self, idx: usize, col: &str) -> Result<Option<T>> {
        self.opt_text(idx, col)?
            .map(|text| parse_enum(&text, col))
            .transpose()
    }

    /// A JSON column.
    fn json<T: serde::de::DeserializeOwned>(&self, idx: usize, col: &str) -> Result<T> {
        parse_json(&self.text(idx, col)?, col)
    }

    /// A JSON column that may be NULL.
    fn opt_json<T: serde::de::DeserializeOwned>(&self, idx: usize, col: &str) -> Result<Option<T>> {
        self.opt_text(idx, col)?
            .map(|text| parse_json(&text, col))
            .transpose()
    }

    /// An integer column that must fit a `u32`.
    fn u32(&self, idx: usize, col: &str) -> Result<u32> {
        to_u32(self.int(idx, col)?, col)
    }

    /// An integer column that must fit a `u32`, or NULL.
    fn opt_u32(&self, idx: usize, col: &str) -> Result<Option<u32>> {
        self.opt_int(idx, col)?.map(|v| to_u32(v, col)).transpose()
    }

    /// An integer column that must fit an `i32`, or NULL.
    fn opt_i32(&self, idx: usize, col: &str) -> Result<Option<i32>> {
        self.opt_int(idx, col)?.map(|v| to_i32(v, col)).transpose()
    }

    /// A non-negative integer column.
    fn u64(&self, idx: usize, col: &str) -> Result<u64> {
        to_u64(self.int(idx, col)?, col)
    }

    /// A non-negative integer column, or NULL.
    fn opt_u64(&self, idx: usize, col: &str) -> Result<Option<u64>> {
        self.opt_int(idx, col)?.map(|v| to_u64(v, col)).transpose()
    }

    /// The `usage_json` column of a run or step run.
    fn usage(&self, idx: usize) -> Result<Option<Usage>> {
        self.opt_json(idx, "usage_json")
    }
}

/// The `usage_json` column of a run or step run.
pub fn encode_usage(usage: Option<&Usage>) -> Result<Option<String>> {
    usage
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| StoreError::InvalidArgument(format!("usage: {e}")))
}

impl DefinitionJson {
    /// The columns of a new or edited definition.
    pub fn of_new(def: &loops_core::NewLoop) -> Result<Self> {
        Self::encode(
            &def.schedule,
            &def.target,
            &def.labels,
            &def.policy.runs_on,
            def.notify.as_ref(),
            &def.policy.ops,
        )
    }

    /// The columns of a loop as stored (what a copy writes again).
    pub fn of_loop(lp: &loops_core::Loop) -> Result<Self> {
        Self::encode(
            &lp.schedule,
            &lp.target,
            &lp.labels,
            &lp.runs_on,
            lp.notify.as_ref(),
            &lp.ops,
        )
    }

    fn encode(
        schedule: &loops_core::Schedule,
        target: &loops_core::Target,
        labels: &[String],
        runs_on: &[String],
        notify: Option<&loops_core::Notify>,
        ops: &loops_core::LoopOps,
    ) -> Result<Self> {
        let json =
            |what: &str, e: serde_json::Error| StoreError::InvalidArgument(format!("{what}: {e}"));
        Ok(DefinitionJson {
            schedule: serde_json::to_string(schedule).map_err(|e| json("schedule", e))?,
            target: serde_json::to_string(target).map_err(|e| json("target", e))?,
            labels: serde_json::to_string(labels).map_err(|e| json("labels", e))?,
            runs_on: serde_json::to_string(runs_on).map_err(|e| json("runs_on", e))?,
            notify: notify
                .map(serde_json::to_string)
                .transpose()
                .map_err(|e| json("notify", e))?,
            ops: encode_ops(ops)?,
        })
    }
}

/// A loop's `ops_json`: NULL for the default settings.
pub fn encode_ops(ops: &loops_core::LoopOps) -> Result<Option<String>> {
    if *ops == loops_core::LoopOps::default() {
        return Ok(None);
    }
    serde_json::to_string(ops)
        .map(Some)
        .map_err(|e| StoreError::InvalidArgument(format!("settings: {e}")))
}

/// A loop's `ops_state_json`: NULL for a fresh state.
pub fn encode_state(state: &loops_core::LoopState) -> Result<Option<String>> {
    if state.is_fresh() {
        return Ok(None);
    }
    serde_json::to_string(state)
        .map(Some)
        .map_err(|e| StoreError::InvalidArgument(format!("state: {e}")))
}

/// The `meta` key of the store-wide notification default (its JSON).
pub const META_NOTIFY_DEFAULT: &str = "notify_default";

/// The store-wide notification default as its `meta` value (`None`: no row).
pub fn encode_notify_default(notify: Option<&loops_core::Notify>) -> Result<Option<String>> {
    notify
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| StoreError::InvalidArgument(format!("notify settings: {e}")))
}

/// The store-wide notification default read from its `meta` value.
pub fn decode_notify_default(text: &str) -> Result<loops_core::Notify> {
    serde_json::from_str(text)
        .map_err(|e| StoreError::Decode(format!("meta {META_NOTIFY_DEFAULT}: {e}")))
}

/// A workflow run's `params_json`: NULL when it has none.
pub fn encode_params(params: &loops_core::workflow_params::ParamValues) -> Result<Option<String>> {
    if params.is_empty() {
        return Ok(None);
    }
    serde_json::to_string(params)
        .map(Some)
        .map_err(|e| StoreError::InvalidArgument(format!("workflow run params: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_12_lowercase_hex() {
        for _ in 0..100 {
            let id = new_id();
            assert_eq!(id.len(), 12);
            assert!(id.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')));
        }
    }

    #[test]
    fn corrupt_values_name_their_column() {
        let msg = |e: StoreError| e.to_string();
        assert_eq!(
            msg(to_u32(-1, "attempt").unwrap_err()),
            "invalid stored data: column attempt: -1 out of range"
        );
        assert_eq!(
            msg(to_u64(-1, "lease_ms").unwrap_err()),
            "invalid stored data: column lease_ms: -1 is negative"
        );
        assert_eq!(
            msg(instant_from_ms(i64::MAX, "due_at").unwrap_err()),
            format!(
                "invalid stored data: column due_at: instant {} out of range",
                i64::MAX
            )
        );
        assert!(
            msg(parse_enum::<loops_core::RunStatus>("sometimes", "status").unwrap_err())
                .starts_with("invalid stored data: column status: ")
        );
        assert_eq!(sat_i64(u64::MAX), i64::MAX);
    }
}
