//! Agent usage roll-up (`loops usage`): tokens and cost reported by agent runs and
//! agent steps of workflow runs, added up by loop, provider or day. Pure: the caller
//! hands in one [`UsageEntry`] per run or step run.

use crate::{Instant, Usage};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// How entries are grouped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum GroupBy {
    /// By the loop that ran it (a step: the loop whose slot ran the workflow, else
    /// `workflow NAME`).
    Loop,
    /// By agent provider (`claude`, `codex`, …; `unknown` when it can no longer be
    /// told).
    Provider,
    /// By UTC day of the finish (`2026-12-01`).
    Day,
}

impl FromStr for GroupBy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let choices = [
            ("loop", GroupBy::Loop),
            ("provider", GroupBy::Provider),
            ("day", GroupBy::Day),
        ];
        crate::validate::one_of("--by", s, &choices)
    }
}

impl fmt::Display for GroupBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GroupBy::Loop => "loop",
            GroupBy::Provider => "provider",
            GroupBy::Day => "day",
        })
    }
}

/// One run's or step run's usage, attributed.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageEntry {
    pub finished_at: Instant,
    /// The loop's name, or `workflow NAME` for a workflow run no loop started.
    pub owner: String,
    /// The provider, when known.
    pub provider: Option<String>,
    /// Whether it is an agent step of a workflow run (else a loop's run).
    pub step: bool,
    pub usage: Usage,
}

/// Sums over some entries.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = UsageTotalsDocument))]
pub struct UsageTotals {
    /// Loop runs counted.
    pub runs: u64,
    /// Workflow step runs counted.
    pub steps: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// The sum of the reported costs; `None` when no entry reported one.
    pub cost_usd: Option<f64>,
    /// Entries that reported no cost (their CLI does not price usage).
    pub unpriced: u64,
}

impl UsageTotals {
    fn add(&mut self, e: &UsageEntry) {
        if e.step {
            self.steps += 1;
        } else {
            self.runs += 1;
        }
        self.input_tokens = self
            .input_tokens
            .saturating_add(e.usage.input_tokens.unwrap_or(0));
        self.output_tokens = self
            .output_tokens
            .saturating_add(e.usage.output_tokens.unwrap_or(0));
        match e.usage.cost_usd {
            Some(cost) => self.cost_usd = Some(self.cost_usd.unwrap_or(0.0) + cost),
            None => self.unpriced += 1,
        }
    }
}

/// One group of a report: its key (the loop, provider or UTC day) and totals.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = UsageGroupDocument))]
pub struct UsageGroup {
    /// The loop, provider or day.
    pub key: String,
    #[serde(flatten)]
    pub totals: UsageTotals,
}

/// What [`roll_up`] made of the entries: the document of `loops usage --json` and of
/// the HTTP API's `/v1/usage` (its OpenAPI schema, as `UsageDocument`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = UsageDocument))]
pub struct UsageReport {
    pub by: GroupBy,
    #[serde(with = "crate::timefmt")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub since: Instant,
    /// Days in order; loops and providers by cost, then tokens, then name.
    pub groups: Vec<UsageGroup>,
    pub total: UsageTotals,
    /// Every budget (the loops' own and the store-wide ones) against its spend in its
    /// current window ([`crate::budget`]; filled in by the runtime's client); left out
    /// without any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<crate::budget::BudgetStatus>,
}

/// Adds `entries` up by `by`.
pub fn roll_up(entries: &[UsageEntry], by: GroupBy, since: Instant) -> UsageReport {
    let mut groups: BTreeMap<String, UsageTotals> = BTreeMap::new();
    let mut total = UsageTotals::default();
    for e in entries {
        let key = match by {
            GroupBy::Loop => e.owner.clone(),
            GroupBy::Provider => e.provider.clone().unwrap_or_else(|| "unknown".into()),
            GroupBy::Day => e.finished_at.format("%Y-%m-%d").to_string(),
        };
        groups.entry(key).or_default().add(e);
        total.add(e);
    }
    let mut groups: Vec<UsageGroup> = groups
        .into_iter()
        .map(|(key, totals)| UsageGroup { key, totals })
        .collect();
    if by != GroupBy::Day {
        groups.sort_by(|a, b| {
            let cost = |g: &UsageGroup| g.totals.cost_usd.unwrap_or(0.0);
            let tokens = |g: &UsageGroup| g.totals.input_tokens + g.totals.output_tokens;
            cost(b)
                .total_cmp(&cost(a))
                .then(tokens(b).cmp(&tokens(a)))
                .then(a.key.cmp(&b.key))
        });
    }
    UsageReport {
        by,
        since,
        groups,
        total,
        budgets: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn entry(
        at: &str,
        owner: &str,
        provider: Option<&str>,
        step: bool,
        usage: (u64, u64, Option<f64>),
    ) -> UsageEntry {
        UsageEntry {
            finished_at: at.parse().unwrap(),
            owner: owner.into(),
            provider: provider.map(Into::into),
            step,
            usage: Usage {
                input_tokens: Some(usage.0),
                output_tokens: Some(usage.1),
                cost_usd: usage.2,
            },
        }
    }

    #[test]
    fn groups_and_totals() {
        let since = "2026-12-01T00:00:00Z".parse().unwrap();
        let entries = [
            entry(
                "2026-12-01T10:00:00Z",
                "review",
                Some("claude"),
                false,
                (100, 10, Some(0.5)),
            ),
            entry(
                "2026-12-01T23:59:59Z",
                "review",
                Some("claude"),
                false,
                (200, 20, Some(0.25)),
            ),
            entry(
                "2026-12-02T00:00:00Z",
                "triage",
                Some("codex"),
                false,
                (1_000, 5, None),
            ),
            entry(
                "2026-12-02T08:00:00Z",
                "nightly",
                Some("claude"),
                true,
                (50, 5, Some(1.0)),
            ),
            entry(
                "2026-12-03T08:00:00Z",
                "workflow notes",
                None,
                true,
                (1, 1, None),
            ),
        ];
        let by_loop = roll_up(&entries, GroupBy::Loop, since);
        let keys: Vec<&str> = by_loop.groups.iter().map(|g| g.key.as_str()).collect();
        // By cost, then tokens, then name.
        assert_eq!(keys, ["nightly", "review", "triage", "workflow notes"]);
        let review = &by_loop.groups[1].totals;
        assert_eq!(
            (
                review.runs,
                review.steps,
                review.input_tokens,
                review.output_tokens
            ),
            (2, 0, 300, 30)
        );
        assert_eq!(review.cost_usd, Some(0.75));
        assert_eq!(by_loop.groups[2].totals.cost_usd, None);
        assert_eq!(by_loop.groups[2].totals.unpriced, 1);
        let t = &by_loop.total;
        assert_eq!(
            (t.runs, t.steps, t.input_tokens, t.output_tokens, t.unpriced),
            (3, 2, 1_351, 41, 2)
        );
        assert_eq!(t.cost_usd, Some(1.75));

        let by_day = roll_up(&entries, GroupBy::Day, since);
        let days: Vec<(&str, u64)> = by_day
            .groups
            .iter()
            .map(|g| (g.key.as_str(), g.totals.runs + g.totals.steps))
            .collect();
        assert_eq!(
            days,
            [("2026-12-01", 2), ("2026-12-02", 2), ("2026-12-03", 1)]
        );
        let by_provider = roll_up(&entries, GroupBy::Provider, since);
        let keys: Vec<&str> = by_provider.groups.iter().map(|g| g.key.as_str()).collect();
        assert_eq!(keys, ["claude", "codex", "unknown"]);
        assert_eq!(
            roll_up(&[], GroupBy::Loop, since).total,
            UsageTotals::default()
        );
        assert!("week"
            .parse::<GroupBy>()
            .unwrap_err()
            .contains("loop, provider, day"));
    }
}
