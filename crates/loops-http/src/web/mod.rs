//! The web dashboard, served by `loops serve` outside `/v1`: server-rendered pages
//! (askama templates, compiled in, escaping by default) over the same [`Client`] calls
//! and JSON documents as the API, plus our own small script (`assets/app.js`) that
//! keeps them live from `/v1/events` and the output stream. No external fonts,
//! scripts or CDNs: the CSS and the script are embedded in the binary.
//!
//! Pages: `/` (overview), `/loops/{key}`, `/runs/{id}`, `/workflows`,
//! `/workflows/{key}`, `/workflow-runs/{id}`, `/runners`; `/login` exchanges the
//! API token for a session cookie ([`session`]); `/assets/…` needs no session.
//!
//! [`Client`]: loops_runtime::Client

pub mod ansi;
mod loops;
mod overview;
mod runners;
mod runs;
pub mod session;
pub mod svg;
pub mod words;
mod workflows;

use crate::error::ApiError;
use crate::State;
use askama::Template;
use axum::extract::{RawQuery, Request};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;

pub use overview::{overview_html, strip_html, OverviewQuery, PAGE};

/// The stylesheet and the script, embedded at build time.
const APP_CSS: &str = include_str!("assets/app.css");
const APP_JS: &str = include_str!("assets/app.js");
const FAVICON: &[u8] = include_bytes!("assets/favicon.svg");

/// The dashboard's routes.
pub(crate) fn routes() -> Router<State> {
    Router::new()
        .route("/", get(overview::page))
        .route("/login", get(login_form).post(login))
        .route("/logout", axum::routing::post(logout))
        .route("/loops/{key}", get(loops::page))
        .route("/runs/{id}", get(runs::page))
        .route("/workflows", get(workflows::list))
        .route("/workflows/{key}", get(workflows::spec))
        .route("/workflow-runs/{id}", get(workflows::run))
        .route("/runners", get(runners::page))
        .route("/assets/app.css", get(css))
        .route("/assets/app.js", get(js))
        .route("/favicon.svg", get(favicon))
}

async fn css() -> Response {
    asset("text/css; charset=utf-8", APP_CSS.as_bytes())
}

async fn js() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS.as_bytes())
}

async fn favicon() -> Response {
    asset("image/svg+xml", FAVICON)
}

fn asset(content_type: &'static str, body: &'static [u8]) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// What every page carries: its title, which tab it is, and the session's CSRF token
/// (empty when the page was read with the bearer token: its buttons then do nothing).
#[derive(Debug, Clone)]
pub struct Base {
    pub title: String,
    pub nav: &'static str,
    pub csrf: String,
}

/// Who is asking: a session (with its CSRF token), or a bearer-token client.
pub(crate) struct Viewer {
    pub csrf: String,
}

/// The viewer of a page request, or the way to the login form.
pub(crate) fn viewer(
    state: &State,
    headers: &HeaderMap,
    path_and_query: &str,
) -> Result<Viewer, Redirect> {
    if let Some((_, csrf)) = state.sessions.of_request(headers) {
        return Ok(Viewer { csrf });
    }
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| state.token.matches(t.trim()));
    if bearer {
        return Ok(Viewer {
            csrf: String::new(),
        });
    }
    let next = crate::request::encode(path_and_query);
    Err(Redirect::to(&format!("/login?next={next}")))
}

/// A page, rendered; a template error is a 500 with the reason.
pub(crate) fn render(t: &impl Template) -> Response {
    match t.render() {
        Ok(html) => page_response(StatusCode::OK, html),
        Err(e) => ApiError::failed(format!("cannot render the page: {e}")).into_response(),
    }
}

fn page_response(status: StatusCode, html: String) -> Response {
    let mut r = (status, Html(html)).into_response();
    let h = r.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // Our own assets only; the inline SVG needs no script. `frame-ancestors`: no
    // framing (clickjacking of the buttons).
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; \
             connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    r
}

/// An error shown as a page (a missing loop, a bad filter).
pub(crate) fn error_page(e: ApiError, csrf: String) -> Response {
    let t = ErrorPage {
        base: Base {
            title: "Error".to_owned(),
            nav: "",
            csrf,
        },
        message: e.message,
    };
    match t.render() {
        Ok(html) => page_response(e.status, html),
        Err(err) => ApiError::failed(format!("cannot render the page: {err}")).into_response(),
    }
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage {
    base: Base,
    message: String,
}

#[derive(Template)]
#[template(path = "login.html")]
struct LoginPage {
    base: Base,
    next: String,
    failed: bool,
}

/// Where a login may send the browser back to: a path on this server only.
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n) if n.starts_with('/') && !n.starts_with("//") && !n.contains('\\') => n.to_owned(),
        _ => "/".to_owned(),
    }
}

async fn login_form(RawQuery(q): RawQuery) -> Response {
    let pairs = crate::request::form_pairs(q.as_deref().unwrap_or(""));
    let next = pairs
        .iter()
        .find(|(k, _)| k == "next")
        .map(|(_, v)| v.as_str());
    render(&LoginPage {
        base: Base {
            title: "Log in".to_owned(),
            nav: "",
            csrf: String::new(),
        },
        next: safe_next(next),
        failed: false,
    })
}

/// `POST /login` (a form: `token`, `next`): the right token opens a session.
async fn login(axum::extract::State(state): axum::extract::State<State>, req: Request) -> Response {
    let body = match axum::body::to_bytes(req.into_body(), 16 << 10).await {
        Ok(b) => b,
        Err(_) => return ApiError::invalid("the login form is larger than 16 KiB").into_response(),
    };
    let pairs = crate::request::form_pairs(&String::from_utf8_lossy(&body));
    let field = |name: &str| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.trim());
    let next = safe_next(field("next"));
    let ok = field("token").is_some_and(|t| state.token.matches(t));
    if !ok {
        let t = LoginPage {
            base: Base {
                title: "Log in".to_owned(),
                nav: "",
                csrf: String::new(),
            },
            next,
            failed: true,
        };
        return match t.render() {
            Ok(html) => page_response(StatusCode::UNAUTHORIZED, html),
            Err(e) => ApiError::failed(format!("cannot render the page: {e}")).into_response(),
        };
    }
    let id = state.sessions.open();
    let mut r = Redirect::to(&next).into_response();
    if let Ok(v) = HeaderValue::from_str(&session::set_cookie(&id)) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

/// `POST /logout`: ends the session (a form with the CSRF token, or our script's
/// header).
async fn logout(
    axum::extract::State(state): axum::extract::State<State>,
    req: Request,
) -> Response {
    let headers = req.headers().clone();
    let Some((id, csrf)) = state.sessions.of_request(&headers) else {
        return Redirect::to("/login").into_response();
    };
    let body = axum::body::to_bytes(req.into_body(), 16 << 10)
        .await
        .unwrap_or_default();
    let pairs = crate::request::form_pairs(&String::from_utf8_lossy(&body));
    let sent = pairs
        .iter()
        .find(|(k, _)| k == "csrf")
        .map(|(_, v)| v.clone())
        .or_else(|| {
            headers
                .get(session::CSRF_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        });
    if sent.as_deref() != Some(csrf.as_str()) {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "the logout form's CSRF token does not match the session",
        )
        .into_response();
    }
    state.sessions.close(&id);
    let mut r = Redirect::to("/login").into_response();
    if let Ok(v) = HeaderValue::from_str(&session::clear_cookie()) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

/// The path and query of a request (where the login form sends the browser back).
pub(crate) fn here(uri: &axum::http::Uri) -> String {
    uri.path_and_query()
        .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned())
}
