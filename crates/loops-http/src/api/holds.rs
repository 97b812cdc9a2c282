//! `/v1/holds`: the accounts a usage limit holds (`loops holds`), and releasing them
//! (`loops holds clear`). The API's one token may do both, as it may pause a loop.

use super::blocking;
use crate::error::{ApiError, ErrorBody};
use crate::request::Params;
use crate::State;
use axum::extract::{Path, RawQuery};
use axum::Json;
use loops_core::hold::AccountHold;
use loops_core::Provider;

/// Every account hold (`loops holds --json`): active ones, and those past their
/// instant that no run on their account released yet.
#[utoipa::path(get, path = "/v1/holds", tag = "status",
    responses((status = 200, description = "`loops holds --json`.", body = [AccountHold])))]
pub(crate) async fn list(
    axum::extract::State(state): axum::extract::State<State>,
    RawQuery(q): RawQuery,
) -> Result<Json<Vec<AccountHold>>, ApiError> {
    Params::parse(q.as_deref(), &[])?;
    let holds = blocking(&state, move |c| Ok(c.holds()?)).await?;
    Ok(Json(holds))
}

/// Releases the holds of a provider, on one account or all of them (`loops holds clear
/// PROVIDER [--account A]`): the account's loops are due again at once. Returns what
/// was released (empty when nothing was held).
#[utoipa::path(delete, path = "/v1/holds/{provider}", tag = "status",
    params(
        ("provider" = String, Path, description = "The agent CLI: claude, codex, …"),
        ("account" = Option<String>, Query, description = "The account profile (`default` for agents without one); every account of the provider when left out."),
    ),
    responses(
        (status = 200, description = "The holds released.", body = [AccountHold]),
        (status = 400, description = "Not a provider.", body = ErrorBody),
    ))]
pub(crate) async fn clear(
    axum::extract::State(state): axum::extract::State<State>,
    Path(provider): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Json<Vec<AccountHold>>, ApiError> {
    let p = Params::parse(q.as_deref(), &["account"])?;
    let provider: Provider = provider.parse().map_err(ApiError::invalid)?;
    let account = p.get("account").map(str::to_owned);
    let released = blocking(&state, move |c| {
        Ok(c.clear_holds(provider, account.as_deref())?)
    })
    .await?;
    Ok(Json(released))
}
