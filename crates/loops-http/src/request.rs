//! What every request goes through before its handler: CORS (only for configured
//! origins), the bearer token (which also proves the connection, [`crate::conn`]), and — for handlers that take one — a bounded JSON body
//! and strictly parsed query parameters.

use crate::conn::ConnMark;
use crate::error::ApiError;
use crate::State;
use axum::extract::{FromRequest, Request};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

/// CORS for configured origins, then the token: a request under `/v1` without the
/// right `Authorization: Bearer …` — or the dashboard's session cookie, with its CSRF
/// header for a write ([`crate::web::session`]) — is a 401 whatever it asks for
/// (outputs can hold secrets; the route table itself is not shown to strangers). The
/// dashboard's pages outside `/v1` check the session themselves (and send strangers
/// to the login form).
pub(crate) async fn guard(
    axum::extract::State(state): axum::extract::State<State>,
    req: Request,
    next: Next,
) -> Response {
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| state.token.matches(t.trim()));
    // The token or a live session proves the connection: it may then stay open
    // ([`crate::conn`]); one that never proves itself is closed within seconds.
    if bearer || state.sessions.of_request(req.headers()).is_some() {
        if let Some(mark) = req.extensions().get::<ConnMark>() {
            mark.prove();
        }
    }
    if req.uri().path() != "/v1" && !req.uri().path().starts_with("/v1/") {
        return next.run(req).await;
    }
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|o| o.to_str().ok())
        .filter(|o| state.cfg.cors_origins.iter().any(|allowed| allowed == o))
        .map(str::to_owned);
    if let Some(origin) = &origin {
        if req.method() == Method::OPTIONS
            && req
                .headers()
                .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
        {
            return with_cors(StatusCode::NO_CONTENT.into_response(), origin, true);
        }
    }
    let authorized = bearer || state.sessions.authorizes(req.method(), req.headers());
    let response = if authorized {
        next.run(req).await
    } else {
        let mut r = ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong bearer token (send `Authorization: Bearer TOKEN`; `loops serve --print-token` shows it; a dashboard session writes only with its X-Loops-CSRF header)",
        )
        .into_response();
        set_static(
            r.headers_mut(),
            [
                (header::WWW_AUTHENTICATE, "Bearer realm=\"loops\""),
                // A stranger's connection is not kept alive for its next try.
                (header::CONNECTION, "close"),
            ],
        );
        r
    };
    match origin {
        Some(origin) => with_cors(response, &origin, false),
        None => response,
    }
}

fn with_cors(mut r: Response, origin: &str, preflight: bool) -> Response {
    let h = r.headers_mut();
    if let Ok(v) = HeaderValue::from_str(origin) {
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
    }
    h.insert(header::VARY, HeaderValue::from_static("Origin"));
    if preflight {
        set_static(
            h,
            [
                (
                    header::ACCESS_CONTROL_ALLOW_METHODS,
                    "GET, POST, PATCH, DELETE",
                ),
                (
                    header::ACCESS_CONTROL_ALLOW_HEADERS,
                    "authorization, content-type, last-event-id",
                ),
                (header::ACCESS_CONTROL_MAX_AGE, "600"),
            ],
        );
    }
    r
}

/// Sets each header to its fixed value: the constant headers of a refusal, a CORS
/// preflight and a dashboard page, written as one table each.
pub(crate) fn set_static<const N: usize>(
    h: &mut HeaderMap,
    headers: [(HeaderName, &'static str); N],
) {
    for (name, value) in headers {
        h.insert(name, HeaderValue::from_static(value));
    }
}

/// A JSON request body: at most the configured size (413), `application/json` when a
/// content type is given (415), and a document of `T` (400 naming the field).
pub(crate) struct JsonBody<T>(pub T);

impl<T: DeserializeOwned> FromRequest<State> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &State) -> Result<Self, ApiError> {
        let bytes = read_body(req, state).await?;
        parse_json(&bytes).map(JsonBody)
    }
}

/// The body's bytes, bounded; a wrong content type is refused.
pub(crate) async fn read_body(req: Request, state: &State) -> Result<Vec<u8>, ApiError> {
    if let Some(ct) = req.headers().get(header::CONTENT_TYPE) {
        let ct = ct.to_str().unwrap_or("");
        let essence = ct.split(';').next().unwrap_or("").trim();
        if !essence.eq_ignore_ascii_case("application/json") {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                format!("the request body must be application/json, not {ct:?}"),
            ));
        }
    }
    let limit = state.cfg.max_body_bytes;
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("the request body is larger than {limit} bytes"),
        )
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    match axum::body::to_bytes(req.into_body(), limit).await {
        Ok(b) => Ok(b.to_vec()),
        Err(e) => {
            let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
            while let Some(s) = source {
                if s.to_string().contains("length limit") {
                    return Err(too_large());
                }
                source = s.source();
            }
            Err(ApiError::invalid(format!(
                "cannot read the request body: {e}"
            )))
        }
    }
}

/// Whether a request body is empty (or white space only): no JSON document.
fn is_blank(bytes: &[u8]) -> bool {
    bytes.iter().all(u8::is_ascii_whitespace)
}

/// An optional JSON document of `T`: `None` for an empty (or blank) body, else as
/// [`parse_json`].
pub(crate) fn optional_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<Option<T>, ApiError> {
    if is_blank(bytes) {
        return Ok(None);
    }
    parse_json(bytes).map(Some)
}

/// A JSON document of `T`; errors name the field (`target.command: missing field`).
pub(crate) fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if is_blank(bytes) {
        return Err(ApiError::invalid(
            "the request body is empty; send a JSON document",
        ));
    }
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." || path.is_empty() {
            ApiError::invalid(format!("invalid JSON body: {inner}"))
        } else {
            ApiError::invalid(format!("invalid JSON body: {path}: {inner}"))
        }
    })
}

/// Query parameters as pairs, refusing any not in `known` (a typo is an error, not a
/// silently ignored filter).
pub(crate) struct Params(pub Vec<(String, String)>);

impl Params {
    pub fn parse(query: Option<&str>, known: &[&str]) -> Result<Self, ApiError> {
        let pairs: Vec<(String, String)> = form_pairs(query.unwrap_or(""));
        for (k, _) in &pairs {
            if !known.contains(&k.as_str()) {
                return Err(ApiError::invalid(if known.is_empty() {
                    format!("unknown query parameter {k:?}: this route takes none")
                } else {
                    format!(
                        "unknown query parameter {k:?}: expected one of {}",
                        known.join(", ")
                    )
                }));
            }
        }
        Ok(Self(pairs))
    }

    /// The last value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `key`, repeated (`label=a&label=b`) or comma-separated.
    pub fn all(&self, key: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|(k, _)| k == key)
            .flat_map(|(_, v)| v.split(','))
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
            .collect()
    }

    /// `true`/`false`/`1`/`0` (absent: `default`).
    pub fn flag(&self, key: &str, default: bool) -> Result<bool, ApiError> {
        match self.get(key) {
            None => Ok(default),
            Some("true" | "1") => Ok(true),
            Some("false" | "0") => Ok(false),
            Some(other) => Err(ApiError::invalid(format!(
                "invalid {key} {other:?}: expected true or false"
            ))),
        }
    }

    /// A non-negative count.
    pub fn count(&self, key: &str) -> Result<Option<usize>, ApiError> {
        self.get(key)
            .map(|v| {
                v.parse::<usize>().map_err(|_| {
                    ApiError::invalid(format!("invalid {key} {v:?}: expected a whole number"))
                })
            })
            .transpose()
    }
}

/// Percent-encodes `s` for a query value (unreserved characters and `/` kept).
pub(crate) fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `application/x-www-form-urlencoded` pairs (`+` is a space, `%XX` a byte).
pub(crate) fn form_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_pairs_decode_and_repeat() {
        let p = Params::parse(
            Some("label=a&label=b,c&status=active&x=%41+b"),
            &["label", "status", "x"],
        )
        .map_err(|e| e.message)
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.all("label"), ["a", "b", "c"]);
        assert_eq!(p.get("status"), Some("active"));
        assert_eq!(p.get("x"), Some("A b"));
        assert_eq!(decode("100%"), "100%");
        assert_eq!(decode("%zz"), "%zz");
        let err = Params::parse(Some("lable=a"), &["label"])
            .err()
            .map(|e| e.message);
        assert_eq!(
            err.as_deref(),
            Some("unknown query parameter \"lable\": expected one of label")
        );
    }
}
