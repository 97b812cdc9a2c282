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

/// Connections of the flood: more than the server's default cap (1,024) and than a
/// default soft open-files limit (1,024) leaves room for.
const FLOOD: usize = 1_100;

/// The owner's request on a fresh connection: its status and how long the whole
/// exchange took.
fn owner_request(addr: &str, token: &str) -> (u16, Duration) {
    let start = std::time::Instant::now();
    let mut s = match TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_secs(5)) {
        Ok(s) => s,
        Err(_) => return (0, start.elapsed()),
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let request = format!(
        "GET /v1/loops HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    );
    if s.write_all(request.as_bytes()).is_err() {
        return (0, start.elapsed());
    }
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let status = String::from_utf8_lossy(&answer)
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, start.elapsed())
}

/// Whether the server closed `s` (EOF or reset), without blocking.
fn closed_by_peer(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 512];
    match s.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

/// `FLOOD` half-open connections (`GET / HTTP/1.1` and a header, never the blank line
/// that ends the head) from a client without the token, against a server started with
/// the usual soft open-files limit of 1,024: the server raised its limit to the hard
/// one, the owner is answered within 1 s throughout, the owner's event stream lives
/// on, every half-open connection is closed within seconds (evicted, or timed out),
/// and a complete request without the token gets its 401 and its connection closed.
#[test]
fn a_flood_of_half_open_connections_leaves_the_owner_answered() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    if hard < FLOOD as u64 + 512 {
        assert!(
            std::env::var_os("CI").is_none(),
            "the hard open-files limit {hard} is too low for a flood of {FLOOD}"
        );
        eprintln!("skipped: the hard open-files limit {hard} is too low for a flood of {FLOOD}");
        return;
    }
    // The test's own limit, for its side of the flood.
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
    let w = World::new();
    w.create_cmd("job", &["--every", "1h"], "true");
    let nofile = format!("--nofile=1024:{hard}");
    let api = w.serve_via(&["prlimit", &nofile, "--"], "127.0.0.1:0", &[]);
    let addr = api.url.trim_start_matches("http://").to_owned();
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", api.pid())).unwrap();
    let open_files: Vec<&str> = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(
        open_files[3],
        hard.to_string(),
        "the server's soft limit was raised to the hard one: {open_files:?}"
    );
    let events = api.sse("/v1/events", None);
    assert_eq!(owner_request(&addr, &api.token).0, 200);

    let mut flood: Vec<(TcpStream, std::time::Instant)> = Vec::with_capacity(FLOOD);
    let mut owner = Vec::new();
    for i in 0..FLOOD {
        let mut s =
            TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_secs(5)).unwrap();
        let _ = s.write_all(format!("GET / HTTP/1.1\r\nHost: {addr}\r\n").as_bytes());
        flood.push((s, std::time::Instant::now()));
        if i % 100 == 99 {
            owner.push((i + 1, owner_request(&addr, &api.token)));
        }
    }
    for _ in 0..5 {
        owner.push((FLOOD, owner_request(&addr, &api.token)));
    }
    for (open, (status, took)) in &owner {
        assert!(
            *status == 200 && *took < Duration::from_secs(1),
            "the owner's request with {open} flood connections open: status {status} after {took:?}; all: {owner:?}; server: {}",
            api.stderr_text()
        );
    }

    // The owner's event stream outlived the flood.
    let made = w.json(&[
        "create",
        "command",
        "after-flood",
        "--every",
        "1h",
        "--cmd",
        "true",
    ]);
    let created = crate::http::next_event(&events, Duration::from_secs(10), |e| {
        e.event == "loop.created" && e.json()["loopId"] == made["id"]
    });
    assert_eq!(created.json()["data"]["loop"]["name"], "after-flood");

    // Every half-open connection is closed by the server within seconds of its start.
    for (s, _) in &flood {
        s.set_nonblocking(true).unwrap();
    }
    let mut open: Vec<(TcpStream, std::time::Instant)> = flood;
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let mut longest = Duration::ZERO;
    while !open.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {FLOOD} half-open connections still open 15 s after the flood",
            open.len()
        );
        open.retain_mut(|(s, since)| {
            if closed_by_peer(s) {
                longest = longest.max(since.elapsed());
                false
            } else {
                true
            }
        });
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        longest < Duration::from_secs(10),
        "a half-open connection lived {longest:?}"
    );
    eprintln!("owner's requests (flood connections open, status, time): {owner:?}; the longest-lived half-open connection: {longest:?}");

    // A complete request without the token: its 401, then the connection is closed
    // (it may not stay as an idle keep-alive).
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let start = std::time::Instant::now();
    s.write_all(format!("GET /v1/loops HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
        .unwrap();
    let mut answer = Vec::new();
    let read = s.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 401"), "{text}");
    assert!(
        read.is_ok() && start.elapsed() < Duration::from_secs(8),
        "the unauthenticated connection was left open: {read:?} after {:?}",
        start.elapsed()
    );
    assert_eq!(owner_request(&addr, &api.token).0, 200);
}
