//! The SQL conditions on a loop row's holds, composed once from each backend's own
//! dialect pieces. A backend's `holds` module defines `key_provider!()` and
//! `key_account!()` (the hold key of the loop row `loops`, read from its target's JSON)
//! and `hold_end_of_loop!()` (until when that key, or for a pooled agent every account
//! of its pool, is held); these macros take that module's path (`crate::holds`) and
//! build what the due-loop queries ask: a held loop is left out, and waited for until
//! its holds end, on every runner of the store. And the channels a hold's notification
//! goes to.

use loops_core::budget::BudgetScope;
use loops_core::hold::HoldKey;
use loops_core::{notify, Loop, Notify, NotifyChannel, Provider};

/// `h` (a row of `account_holds`) is the hold of the loop row `loops`'s key.
#[macro_export]
macro_rules! hold_of_loop {
    ($($holds:ident)::+) => {
        concat!(
            "h.provider = ", $($holds)::+::key_provider!(),
            " AND h.account = ", $($holds)::+::key_account!()
        )
    };
}

/// `b` (a row of `budget_holds`) holds the loop row `loops`: its own budget's, or a
/// store-wide budget's of its provider (and account).
#[macro_export]
macro_rules! budget_of_loop {
    ($($holds:ident)::+) => {
        concat!(
            "(b.loop_id = loops.id OR (b.provider = ",
            $($holds)::+::key_provider!(),
            " AND (b.account IS NULL OR b.account = ",
            $($holds)::+::key_account!(),
            ")))"
        )
    };
}

/// The condition that neither its key's hold nor a budget holds the loop row `loops` at
/// `$at` (the backend's placeholder for now): the due-loop queries'.
#[macro_export]
macro_rules! not_held_at {
    ($($holds:ident)::+, $at:literal) => {
        concat!(
            "COALESCE(",
            $($holds)::+::hold_end_of_loop!(),
            ", 0) <= ",
            $at,
            " AND NOT EXISTS (SELECT 1 FROM budget_holds b WHERE b.held_until > ",
            $at,
            " AND ",
            $crate::budget_of_loop!($($holds)::+),
            ")"
        )
    };
}

/// The instant an active loop row `loops` waits for: its `due_at`, or the end of its
/// key's hold or of its budget holds when that is later (a held loop that is due must
/// not wake a daemon until then). `$greatest` is the backend's many-argument maximum.
#[macro_export]
macro_rules! waits_until {
    ($($holds:ident)::+, $greatest:literal) => {
        concat!(
            $greatest,
            "(due_at, COALESCE(",
            $($holds)::+::hold_end_of_loop!(),
            ", 0), COALESCE((SELECT MAX(b.held_until) FROM budget_holds b WHERE ",
            $crate::budget_of_loop!($($holds)::+),
            "), 0))"
        )
    };
}

/// The key whose other active loops a hold's notification covers besides the loop of
/// the run that met (or no longer met) its limit: a provider and an account (`None`:
/// every account of the provider); `None` for a hold of that one loop.
pub type CoveredKey<'a> = Option<(Provider, Option<&'a str>)>;

/// What an account's hold covers: the loops of its key.
pub fn hold_covers(key: &HoldKey) -> CoveredKey<'_> {
    Some((key.provider, Some(key.account.as_str())))
}

/// What a budget's hold covers: a store-wide budget's key, a loop's own budget only
/// its loop.
pub fn budget_covers(scope: &BudgetScope) -> CoveredKey<'_> {
    match scope {
        BudgetScope::Key { provider, account } => Some((*provider, account.as_deref())),
        BudgetScope::Loop(_) => None,
    }
}

/// The channels a hold's `held` / `resumed` notification goes to, each once: every
/// channel of `loops` (the loops the hold covers; each loop's settings or else the
/// store-wide `default`, whatever their `on`). A hold needs a person, once per account
/// or budget rather than once per loop.
pub fn hold_channels<'a>(
    loops: &'a [Loop],
    default: Option<&'a Notify>,
) -> Vec<(NotifyChannel, &'a str)> {
    let mut out: Vec<(NotifyChannel, &str)> = Vec::new();
    for each in loops {
        let Some(settings) = notify::effective(each.notify.as_ref(), default) else {
            continue;
        };
        for channel in notify::channels(settings) {
            if !out.contains(&channel) {
                out.push(channel);
            }
        }
    }
    out
}
