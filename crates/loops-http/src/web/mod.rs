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

/// The dashboard's pages: where a login may send the browser back to ([`safe_next`]).
/// A `{…}` part is one path segment.
const PAGES: [&str; 7] = [
    "/",
    "/loops/{key}",
    "/runs/{id}",
    "/workflows",
    "/workflows/{key}",
    "/workflow-runs/{id}",
    "/runners",
];

/// The dashboard's routes.
pub(crate) fn routes() -> Router<State> {
    let pages: [axum::routing::MethodRouter<State>; PAGES.len()] = [
        get(overview::page),
        get(loops::page),
        get(runs::page),
        get(workflows::list),
        get(workflows::spec),
        get(workflows::run),
        get(runners::page),
    ];
    PAGES
        .into_iter()
        .zip(pages)
        .fold(Router::new(), |r, (path, page)| r.route(path, page))
        .route("/login", get(login_form).post(login))
        .route("/logout", axum::routing::post(logout))
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
    crate::request::set_static(
        r.headers_mut(),
        [
            (header::CACHE_CONTROL, "no-store"),
            // Our own assets only; the inline SVG needs no script. `frame-ancestors`: no
            // framing (clickjacking of the buttons).
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; \
                 connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
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

/// Where a login may send the browser back to: one of our `PAGES` (with a query),
/// as `viewer` writes it, else `/`. Only URL characters pass (RFC 3986's, with
/// `%XX` escapes); other non-ASCII characters are percent-encoded; anything else — a
/// control character, raw or escaped, a backslash, a space, `.`/`..` segments, a path
/// that is not one of our pages — gives `/`. So the `Location` is always a path of
/// this server that every browser reads the same way (`/\t/evil.example` is
/// `//evil.example` to a browser, which drops tabs and newlines), and a valid header.
pub fn safe_next(next: Option<&str>) -> String {
    next.and_then(our_page).unwrap_or_else(|| "/".to_owned())
}

/// Longest `next` kept (a page's path and query are far shorter).
const MAX_NEXT: usize = 2048;

fn our_page(next: &str) -> Option<String> {
    let mut out = String::with_capacity(next.len());
    for (at, c) in next.char_indices() {
        match c {
            '%' => {
                let hex = next.get(at + 1..at + 3)?;
                if !hex.bytes().all(|h| h.is_ascii_hexdigit()) {
                    return None;
                }
                let b = u8::from_str_radix(hex, 16).ok()?;
                if b < 0x20 || b == 0x7f {
                    return None;
                }
                out.push('%');
            }
            c if c.is_ascii_alphanumeric() => out.push(c),
            '-' | '.' | '_' | '~' | '!' | '$' | '&' | '\'' | '(' | ')' | '*' | '+' | ',' | ';'
            | '=' | ':' | '@' | '/' | '?' => out.push(c),
            c if !c.is_ascii() && !c.is_control() => {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.push_str(&format!("%{b:02X}"));
                }
            }
            _ => return None,
        }
        if out.len() > MAX_NEXT {
            return None;
        }
    }
    let path = out.split_once('?').map_or(out.as_str(), |(p, _)| p);
    PAGES
        .iter()
        .any(|page| matches_page(page, path))
        .then_some(out)
}

/// Whether `path` is `page`, a `{…}` part standing for one segment (not `.` or `..`).
fn matches_page(page: &str, path: &str) -> bool {
    let (mut want, mut have) = (page.split('/'), path.split('/'));
    loop {
        match (want.next(), have.next()) {
            (None, None) => return true,
            (Some(w), Some(h)) if w.starts_with('{') => {
                // Browsers read `%2e` as a dot in a dot segment.
                let h = h.replace("%2e", ".").replace("%2E", ".");
                if h.is_empty() || h == "." || h == ".." {
                    return false;
                }
            }
            (Some(w), Some(h)) if w == h => {}
            _ => return false,
        }
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
/// What serving a dashboard page needs from its request: the viewer's headers, where
/// the page is (for the login redirect back to it) and its query string.
pub(crate) struct PageRequest {
    state: State,
    headers: HeaderMap,
    here: String,
    query: Option<String>,
}

impl axum::extract::FromRequestParts<State> for PageRequest {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &State,
    ) -> Result<Self, Self::Rejection> {
        Ok(Self {
            state: state.clone(),
            headers: parts.headers.clone(),
            here: here(&parts.uri),
            query: parts.uri.query().map(str::to_owned),
        })
    }
}

impl PageRequest {
    /// A dashboard page, the one way every page is served: the viewer (else the
    /// redirect to the login form), the query string checked by `parse` (an unknown or
    /// bad parameter is a 400 page), the page built by `build` on a blocking thread
    /// (the store is read there) with the viewer's CSRF token, and rendered; an error
    /// is the error page with its status.
    pub(crate) async fn show<Q, T>(
        self,
        parse: impl FnOnce(Option<&str>) -> Result<Q, ApiError>,
        build: impl FnOnce(&loops_runtime::Client, Q, String) -> Result<T, ApiError> + Send + 'static,
    ) -> Response
    where
        Q: Send + 'static,
        T: Template + Send + 'static,
    {
        let viewer = match viewer(&self.state, &self.headers, &self.here) {
            Ok(v) => v,
            Err(r) => return r.into_response(),
        };
        let csrf = viewer.csrf.clone();
        let built = async {
            let query = parse(self.query.as_deref())?;
            crate::api::blocking(&self.state, move |c| build(c, query, csrf)).await
        }
        .await;
        match built {
            Ok(page) => render(&page),
            Err(e) => error_page(e, viewer.csrf),
        }
    }
}

/// The `parse` of a page that takes no query parameters.
pub(crate) fn no_query(query: Option<&str>) -> Result<(), ApiError> {
    crate::request::Params::parse(query, &[]).map(drop)
}

pub(crate) fn here(uri: &axum::http::Uri) -> String {
    uri.path_and_query()
        .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_next_keeps_our_pages_only() {
        let cases: &[(&str, &str)] = &[
            ("/", "/"),
            ("/?status=failed&label=a", "/?status=failed&label=a"),
            ("/loops/backup", "/loops/backup"),
            ("/loops/café", "/loops/caf%C3%A9"),
            ("/loops/caf%C3%A9?x=1", "/loops/caf%C3%A9?x=1"),
            ("/runs/abc", "/runs/abc"),
            ("/workflow-runs/abc", "/workflow-runs/abc"),
            ("/workflows", "/workflows"),
            ("/runners", "/runners"),
            ("", "/"),
            ("//evil.example", "/"),
            ("/\\evil.example", "/"),
            ("/\t/evil.example", "/"),
            ("\t//evil.example", "/"),
            ("/\n/x", "/"),
            ("/loops/%0a", "/"),
            ("/loops/%7f", "/"),
            ("/loops/%zz", "/"),
            ("/loops/%4", "/"),
            ("/loops/\u{85}", "/"),
            ("/loops/..", "/"),
            ("/loops/%2e%2E", "/"),
            ("/loops/", "/"),
            ("/loops/a/b", "/"),
            ("/loops/a/", "/"),
            ("/login", "/"),
            ("/v1/loops", "/"),
            ("http://evil.example/", "/"),
            ("/ /evil", "/"),
            ("/loops/a#frag", "/"),
        ];
        for (next, want) in cases {
            assert_eq!(safe_next(Some(next)), *want, "{next:?}");
        }
        assert_eq!(safe_next(None), "/");
        let long = format!("/loops/{}", "a".repeat(MAX_NEXT));
        assert_eq!(safe_next(Some(&long)), "/");
    }

    #[test]
    fn every_safe_next_is_a_header_value_and_one_of_our_pages() {
        for next in ["/loops/ø\u{10FFFF}", "/runs/~!$&'()*+,;=:@", "/?a=//b?c"] {
            let got = safe_next(Some(next));
            assert!(HeaderValue::from_str(&got).is_ok(), "{got:?}");
            assert!(!got.starts_with("//") && !got.contains('\\'), "{got:?}");
            assert_ne!(got, "/", "{next:?}");
        }
    }
}
