//! What the server makes of the text of a request, apart from hyper's parsing of
//! the head: query strings, form bodies, the JSON bodies of `POST /v1/loops`, of a
//! loop's merge patch and of a workflow spec, the login form's `next`, cookies. The
//! handlers call the functions these wrap; they are public for the fuzz target
//! (`fuzz/fuzz_targets/http_request.rs`, FUZZING.md), which feeds them any bytes.
//! Errors are the one-line messages a client gets in its 400.

use loops_core::workflow::WorkflowSpec;
use loops_runtime::client::LoopDefinition;

/// A query string's pairs (`+` a space, `%XX` a byte), refusing a key not in `known`.
pub fn query(query: &str, known: &[&str]) -> Result<Vec<(String, String)>, String> {
    crate::request::Params::parse(Some(query), known)
        .map(|p| p.0)
        .map_err(|e| e.message)
}

/// An `application/x-www-form-urlencoded` body's pairs (the login form).
pub fn form(body: &str) -> Vec<(String, String)> {
    crate::request::form_pairs(body)
}

/// `s` percent-encoded for a query value (how the dashboard writes `next`).
pub fn encode(s: &str) -> String {
    crate::request::encode(s)
}

/// The body of `POST /v1/loops`: the definition, and whether it asks for a preflight.
pub fn loop_definition(body: &[u8]) -> Result<(LoopDefinition, bool), String> {
    let parsed: crate::api::loops::LoopDefinitionBody =
        crate::request::parse_json(body).map_err(|e| e.message)?;
    parsed.into_definition().map_err(|e| e.message)
}

/// The body of `PATCH /v1/loops/{key}`: a merge patch over `current`.
pub fn loop_patch(current: &LoopDefinition, body: &[u8]) -> Result<(LoopDefinition, bool), String> {
    let patch: serde_json::Value = crate::request::parse_json(body).map_err(|e| e.message)?;
    if !patch.is_object() {
        return Err("invalid JSON body: a merge patch is a JSON object".to_owned());
    }
    crate::api::loops::patched(current, &patch).map_err(|e| e.message)
}

/// The body of `POST /v1/workflows` (and `/v1/workflows/validate`): a spec, parsed and
/// validated.
pub fn workflow_spec(body: &[u8]) -> Result<WorkflowSpec, String> {
    crate::api::workflows::spec_from(body).map_err(|e| e.message)
}

/// Where the login form sends the browser: one of the dashboard's pages, else `/`.
pub fn login_next(next: Option<&str>) -> String {
    crate::web::safe_next(next)
}

/// The value of cookie `name` in the given `Cookie` header values.
pub fn cookie(values: &[&str], name: &str) -> Option<String> {
    let mut headers = axum::http::HeaderMap::new();
    for v in values {
        if let Ok(v) = axum::http::HeaderValue::from_str(v) {
            headers.append(axum::http::header::COOKIE, v);
        }
    }
    crate::web::session::cookie(&headers, name)
}
