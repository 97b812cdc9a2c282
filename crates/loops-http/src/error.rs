//! Errors as JSON: `{"error": {"code": "…", "message": "…"}}` with the status that
//! fits, and the client's one-line message (the CLI prints the same line).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use loops_runtime::client::ClientError;
use loops_store::StoreError;

/// An error response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    /// A stable word for programs: `invalid`, `not_found`, `conflict`, `unauthorized`,
    /// `too_large`, `unsupported_media_type`, `unavailable`, `failed`.
    pub code: &'static str,
    pub message: String,
}

/// The error document (also the OpenAPI schema of every error response).
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    /// `invalid`, `not_found`, `conflict`, `unauthorized`, `too_large`,
    /// `unsupported_media_type`, `unavailable` or `failed`.
    pub code: String,
    /// One line, as the CLI would print it.
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }
    /// 400: the request cannot be carried out as asked.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid", message)
    }
    /// 404.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }
    /// 409: refused in the store's current state.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", message)
    }
    /// 500.
    pub fn failed(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "failed", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_owned(),
                message: self.message,
            },
        };
        (self.status, axum::Json(body)).into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        Self::of_store(&e)
    }
}

impl ApiError {
    /// A store error: corrupt or unreachable is 503, a missing record 404, a
    /// duplicate or a run no longer running 409, a bad argument 400.
    fn of_store(e: &StoreError) -> Self {
        use StoreError as E;
        let message = e.to_string();
        if e.is_corrupt() {
            return Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message);
        }
        match e {
            E::LoopNotFound(_)
            | E::WorkflowNotFound(_)
            | E::RunNotFound(_)
            | E::WorkflowRunNotFound(_) => Self::not_found(message),
            E::DuplicateName(_) | E::DuplicateWorkflow(_) | E::NotRunning(_) => {
                Self::conflict(message)
            }
            E::InvalidArgument(_) => Self::invalid(message),
            E::LeaseLost => Self::failed(message),
            _ => Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message),
        }
    }
}

impl From<ClientError> for ApiError {
    fn from(e: ClientError) -> Self {
        if let Some(store) = e.store_error() {
            return Self::of_store(store);
        }
        let message = e.to_string();
        match e {
            ClientError::NotFound(_)
            | ClientError::WorkflowNotFound(_)
            | ClientError::WorkflowRunNotFound(_)
            | ClientError::RunNotFound(_) => Self::not_found(message),
            ClientError::Ambiguous { .. } => Self::conflict(message),
            _ if e.is_refused() => Self::conflict(message),
            _ if e.is_failure() => Self::failed(message),
            _ => Self::invalid(message),
        }
    }
}

/// The fallback of the router: a JSON 404 naming what was asked for.
pub(crate) async fn not_found(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!(
        "no route {method} {} (the API's routes are listed at /v1/openapi.json)",
        uri.path()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use loops_runtime::engine::EngineError;
    use loops_runtime::workflow::RecoverError;

    /// Every route to a client error lands on the status its kind documents, however
    /// deep its store error sits (the engine's, a recovery's).
    #[test]
    fn client_errors_map_to_their_status() {
        let corrupt = || StoreError::Corrupt {
            path: String::new(),
            kind: loops_store::CorruptKind::Damaged,
            source: "database disk image is malformed".into(),
        };
        let busy = EngineError::Busy {
            name: "n".into(),
            run: loops_core::RunId::new("r".to_owned()),
            since: "now".into(),
        };
        let cases: Vec<(ClientError, u16)> = vec![
            (ClientError::Store(corrupt()), 503),
            (ClientError::Engine(EngineError::Store(corrupt())), 503),
            (ClientError::Recover(RecoverError::Store(corrupt())), 503),
            (
                ClientError::Recover(RecoverError::Store(StoreError::WorkflowRunNotFound(
                    "w".into(),
                ))),
                404,
            ),
            (ClientError::Engine(busy), 409),
            (ClientError::Engine(EngineError::LeaseLost), 500),
            (ClientError::Refused("no".into()), 409),
            (
                ClientError::Ambiguous {
                    kind: loops_runtime::client::RecordKind::Loop,
                    key: "a".into(),
                    matches: vec![],
                },
                409,
            ),
            (ClientError::NotFound("x".into()), 404),
            (ClientError::Recover(RecoverError::Alive("a".into())), 400),
            (ClientError::Invalid("bad".into()), 400),
        ];
        for (error, status) in cases {
            let shown = format!("{error:?}");
            assert_eq!(ApiError::from(error).status.as_u16(), status, "{shown}");
        }
    }
}
