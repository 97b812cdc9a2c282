//! The OpenAPI 3.1 document, generated from the handlers' annotations and the domain's
//! types (`utoipa`); served at `/v1/openapi.json` and checked in as
//! `crates/loops-http/openapi.json` (a test fails when they differ).

use crate::api::{holds, loops, runs, status, workflows};
use crate::error::{ErrorBody, ErrorDetail};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "loops HTTP API",
        description = "The HTTP API of loops (`loops serve`): every request needs `Authorization: Bearer TOKEN` (the token is in the data dir's `http.token`). JSON bodies are the CLI's `--json` documents; secrets (prompts, env values, run output, webhook paths) are redacted unless `showOutput=true`. Errors are `{\"error\": {\"code\", \"message\"}}` with the CLI's message.",
        license(name = "MIT")
    ),
    paths(
        loops::list, loops::show, loops::create, loops::edit, loops::remove,
        loops::pause, loops::resume, loops::stop, loops::archive, loops::unarchive,
        loops::run_now,
        runs::list, runs::show, runs::output,
        workflows::list, workflows::show, workflows::validate, workflows::create,
        workflows::run, workflows::runs_of, workflows::runs, workflows::inspect,
        workflows::cancel,
        status::daemon, status::runners, status::health, status::usage,
        holds::list, holds::clear,
        status::budgets, status::set_budget, status::clear_budget,
        crate::events::stream,
        document,
    ),
    components(schemas(ErrorBody, ErrorDetail, loops_core::event::EventBody)),
    modifiers(&Bearer, &CommonAnswers),
    security(("bearer" = [])),
    tags(
        (name = "loops", description = "Loops: define, inspect, control."),
        (name = "runs", description = "Runs and their output."),
        (name = "workflows", description = "Workflow specs and their runs."),
        (name = "status", description = "The daemon, health and agent usage."),
        (name = "events", description = "Live events (Server-Sent Events)."),
        (name = "meta", description = "This document."),
    )
)]
struct ApiDoc;

struct Bearer;

impl Modify for Bearer {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        if let Some(components) = openapi.components.as_mut() {
            components.add_security_scheme(
                "bearer",
                SecurityScheme::Http(
                    HttpBuilder::new()
                        .scheme(HttpAuthScheme::Bearer)
                        .description(Some("The token in the data dir's http.token."))
                        .build(),
                ),
            );
        }
    }
}

/// Every operation can answer 400 (a bad parameter: unknown ones are refused too) and
/// 401 (no or a wrong token); each says so once here rather than in every handler.
struct CommonAnswers;

impl Modify for CommonAnswers {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
        let error = |text: &str| {
            ResponseBuilder::new()
                .description(text)
                .content(
                    "application/json",
                    ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("ErrorBody")))
                        .build(),
                )
                .build()
        };
        for item in openapi.paths.paths.values_mut() {
            for op in [
                item.get.as_mut(),
                item.post.as_mut(),
                item.put.as_mut(),
                item.patch.as_mut(),
                item.delete.as_mut(),
            ]
            .into_iter()
            .flatten()
            {
                let answers = &mut op.responses.responses;
                answers.entry("400".to_owned()).or_insert_with(|| {
                    error("A bad parameter or body (the message says which).").into()
                });
                answers
                    .entry("401".to_owned())
                    .or_insert_with(|| error("No or a wrong bearer token.").into());
            }
        }
    }
}

/// The document as pretty JSON (what `/v1/openapi.json` serves), with a final newline.
///
/// One rewrite after generation: `additionalProperties: false` (from the records'
/// `deny_unknown_fields`) is dropped, because the internally tagged targets and
/// schedules are an `allOf` of the record and its `type` tag, which that keyword would
/// make unsatisfiable; the server still refuses unknown fields (a 400 naming them).
pub fn openapi_json() -> String {
    let doc = ApiDoc::openapi();
    let mut value = serde_json::to_value(&doc).unwrap_or_default();
    strip_closed_objects(&mut value);
    let mut text = serde_json::to_string_pretty(&value)
        .unwrap_or_else(|e| format!("{{\"error\": \"cannot encode the document: {e}\"}}"));
    text.push('\n');
    text
}

fn strip_closed_objects(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(map) => {
            if map.get("additionalProperties") == Some(&serde_json::Value::Bool(false)) {
                map.remove("additionalProperties");
            }
            map.values_mut().for_each(strip_closed_objects);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(strip_closed_objects),
        _ => {}
    }
}

/// This document.
#[utoipa::path(get, path = "/v1/openapi.json", tag = "meta",
    responses(
        (status = 200, description = "The OpenAPI 3.1 document of this API.", content_type = "application/json", body = Object),
        (status = 401, description = "No or a wrong token.", body = ErrorBody),
    ))]
pub(crate) async fn document() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], openapi_json()).into_response()
}
