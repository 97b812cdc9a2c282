//! `loops serve` against a hostile local user (issue #19): the login form's `next`
//! never sends the browser off-site nor echoes control characters, and a flood of
//! half-open connections from someone without the token neither exhausts the
//! server's file descriptors nor keeps the owner waiting.

use crate::util::World;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One HTTP/1.1 exchange over a raw socket (so the exact bytes of the answer's head
/// are seen, whatever a client library would make of them): the status, the head's
/// lines and the body.
pub(crate) fn raw_exchange(addr: &str, request: &str) -> (u16, Vec<String>, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let lines: Vec<String> = head.split("\r\n").map(str::to_owned).collect();
    let status = lines
        .first()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, lines, body.to_owned())
}

/// The value of header `name` in a head's lines.
fn header<'a>(lines: &'a [String], name: &str) -> Option<&'a str> {
    lines.iter().skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// The login form's hidden `next` value, as the page carries it (HTML-escaped: `&`
/// is `&#38;`), unescaped.
fn hidden_next(page: &str) -> String {
    let start = page
        .find("name=\"next\" value=\"")
        .unwrap_or_else(|| panic!("no next field in {page}"))
        + "name=\"next\" value=\"".len();
    let end = page[start..].find('"').unwrap() + start;
    page[start..end].replace("&#38;", "&").replace("&amp;", "&")
}

/// Every `next` a hostile link could carry, as it is written in the query or form
/// (percent-encoded), and where the login must send the browser: only one of our own
/// pages, else `/`.
const NEXTS: [(&str, &str); 33] = [
    // Off-site, directly or as a browser would read them.
    ("//evil.example", "/"),
    ("//evil.example/loops/x", "/"),
    ("/\\evil.example", "/"),
    ("/%5Cevil.example", "/"),
    ("/%5C/evil.example", "/"),
    ("%5C%5Cevil.example", "/"),
    ("/%09/evil.example", "/"),
    ("/%09%09/evil.example", "/"),
    ("%09//evil.example", "/"),
    ("/%2F/evil.example", "/"),
    ("%2F%2Fevil.example", "/"),
    ("/%252F%252Fevil.example", "/"),
    ("http://evil.example", "/"),
    ("https:evil.example", "/"),
    ("javascript:alert(1)", "/"),
    ("%20//evil.example", "/"),
    ("/loops/x/../..//evil.example", "/"),
    ("/loops/..", "/"),
    // Control characters: never echoed, never a 500.
    ("/%0A/x", "/"),
    ("/loops/%0D%0ASet-Cookie:%20x=1", "/"),
    ("/loops/x%250A", "/"),
    ("/runs/x%00", "/"),
    ("/loops/a%7F", "/"),
    // Not a page of ours.
    ("/v1/loops", "/"),
    // Ours: kept as they are.
    ("/", "/"),
    ("/runners", "/runners"),
    ("/workflows", "/workflows"),
    ("/loops/backup", "/loops/backup"),
    ("/loops/caf%C3%A9", "/loops/caf%C3%A9"),
    ("/runs/0123456789ab", "/runs/0123456789ab"),
    ("/workflow-runs/0123456789ab", "/workflow-runs/0123456789ab"),
    ("/workflows/nightly", "/workflows/nightly"),
    (
        "/%3Fstatus%3Dfailed%26label%3Dnightly",
        "/?status=failed&label=nightly",
    ),
];

#[test]
fn login_next_only_leads_to_our_own_pages() {
    let w = World::new();
    let api = w.serve(&[]);
    let addr = api.url.trim_start_matches("http://").to_owned();
    for (sent, expected) in NEXTS {
        // The form as the login page shows it.
        let (status, _, page) = raw_exchange(
            &addr,
            &format!(
                "GET /login?next={sent} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
            ),
        );
        assert_eq!(status, 200, "GET /login?next={sent}: {page}");
        let shown = hidden_next(&page);
        assert_eq!(shown, expected, "GET /login?next={sent}");
        assert!(!shown.chars().any(char::is_control), "{sent}: {shown:?}");
        // The login itself: the right token, then the redirect.
        let body = format!("token={}&next={sent}", api.token);
        let (status, head, text) = raw_exchange(
            &addr,
            &format!(
                "POST /login HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            ),
        );
        assert_eq!(status, 303, "POST next={sent}: {head:?} {text}");
        assert_eq!(
            header(&head, "location"),
            Some(expected),
            "POST next={sent}"
        );
        assert!(header(&head, "set-cookie").is_some(), "POST next={sent}");
        assert!(
            head.iter()
                .all(|l| !l.to_ascii_lowercase().starts_with("set-cookie: x=")),
            "POST next={sent}: {head:?}"
        );
        // A failed login shows the form again, with the same safe `next`.
        let body = format!("token=wrong&next={sent}");
        let (status, _, page) = raw_exchange(
            &addr,
            &format!(
                "POST /login HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            ),
        );
        assert_eq!(status, 401, "POST wrong token, next={sent}");
        assert_eq!(hidden_next(&page), expected, "{sent}");
    }
    // The way in: a page asked for without a session sends the browser to the login
    // form with a `next` that the form keeps (our own pages survive the round trip).
    let (status, head, _) = raw_exchange(
        &addr,
        &format!("GET /loops/caf%C3%A9?x=1 HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
    );
    assert_eq!(status, 303, "{head:?}");
    let location = header(&head, "location").unwrap().to_owned();
    assert!(location.starts_with("/login?next="), "{location}");
    let (_, _, page) = raw_exchange(
        &addr,
        &format!("GET {location} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
    );
    assert_eq!(hidden_next(&page), "/loops/caf%C3%A9?x=1");
}
