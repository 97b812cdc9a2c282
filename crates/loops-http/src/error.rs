//! Errors as JSON: `{"error": {"code": "…", "message": "…"}}` with the status that
//! fits, and the client's one-line message (the CLI prints the same line).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use loops_runtime::client::ClientError;
use loops_runtime::engine::EngineError;
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
        let message = e.to_string();
        match e {
            ClientError::Store(s) => s.into(),
            ClientError::Engine(EngineError::Store(s)) => s.into(),
            ClientError::Engine(EngineError::Busy { .. }) => Self::conflict(message),
            ClientError::Engine(_) => Self::failed(message),
            ClientError::NotFound(_)
            | ClientError::WorkflowNotFound(_)
            | ClientError::WorkflowRunNotFound(_)
            | ClientError::RunNotFound(_) => Self::not_found(message),
            ClientError::Ambiguous { .. } | ClientError::Refused(_) => Self::conflict(message),
            ClientError::Recover(loops_runtime::workflow::RecoverError::Store(s)) => s.into(),
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
