//! A store's connection string with its secrets masked, for every place one is shown:
//! error messages, `daemon status`, `doctor`, `/v1/daemon`, `Debug` output and logs.
//!
//! Both forms libpq (and tokio-postgres) read are handled:
//!
//! - URLs, `postgres://` / `postgresql://` (any scheme, in fact): the password of the
//!   userinfo, and the value of every `password` / `sslpassword` query parameter
//!   (keys percent-decoded and compared without case). A password may hold `@`, `/`,
//!   `?`, `:` or `&`, percent-encoded or not; hosts may be lists (`h1,h2`), bracketed
//!   IPv6 addresses or percent-encoded socket directories, and `?host=/run/…` names a
//!   socket directory.
//! - Keyword/value strings (`host=db password='a b' user=u`): values quoted with `'`
//!   or bare, with backslash escapes, whitespace around `=` allowed, as libpq reads
//!   them.
//!
//! Masking is conservative rather than exact: where the two parsers read an odd URL
//! differently (tokio-postgres ends the userinfo at the first `@` of the whole
//! string, libpq at the first `@` before a `/`), everything either could take for a
//! password is masked, so an odd URL may show less than it holds but never its
//! password. A keyword/value string that does not parse is masked from the parameter
//! that did not parse to its end.

/// What a masked secret is replaced with.
const MASK: &str = "***";

/// Parameter names whose values are secrets (compared without case).
const SECRET_KEYS: [&str; 2] = ["password", "sslpassword"];

/// `store` with its passwords replaced by `***`: a URL, a keyword/value string, or
/// anything else (a path, `sqlite`), which is returned as it is unless it holds an
/// `@` (then it is masked as a URL without a scheme would be).
pub fn redact_url(store: &str) -> String {
    if let Some(i) = store.find("://") {
        if is_scheme(&store[..i]) {
            let (head, rest) = store.split_at(i + 3);
            return format!("{head}{}", redact_uri_rest(rest));
        }
    }
    if store.contains('=') {
        return redact_keywords(store);
    }
    if store.contains('@') {
        return redact_uri_rest(store);
    }
    store.to_owned()
}

fn is_scheme(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

fn is_secret_key(key: &str) -> bool {
    SECRET_KEYS.iter().any(|k| k.eq_ignore_ascii_case(key))
}

/// The part of a URL after `scheme://`, masked (see the module docs).
fn redact_uri_rest(rest: &str) -> String {
    let mut masked: Vec<(usize, usize)> = Vec::new();
    // The userinfo's password, read up to the first `@` (tokio-postgres) and up to the
    // last (a password holding an `@` that was not percent-encoded).
    for at in [rest.find('@'), rest.rfind('@')].into_iter().flatten() {
        if let Some(colon) = rest[..at].find(':') {
            masked.push((colon + 1, at));
        }
    }
    // Every `?key=value` / `&key=value` whose key is a secret, wherever it is.
    for (i, c) in rest.char_indices() {
        if c != '?' && c != '&' {
            continue;
        }
        let start = i + 1;
        let key_end = rest[start..]
            .find(['=', '&'])
            .map_or(rest.len(), |n| start + n);
        if rest[key_end..].starts_with('=') && is_secret_key(&percent_decode(&rest[start..key_end]))
        {
            let value = key_end + 1;
            let end = rest[value..].find('&').map_or(rest.len(), |n| value + n);
            masked.push((value, end));
        }
    }
    apply(rest, masked)
}

/// `text` with each of the byte ranges in `masked` (merged where they touch) replaced
/// by [`MASK`]; an empty range stays empty.
fn apply(text: &str, mut masked: Vec<(usize, usize)>) -> String {
    masked.retain(|(start, end)| start < end);
    masked.sort_unstable();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (start, end) in masked {
        if end <= at {
            continue;
        }
        if start > at {
            out.push_str(&text[at..start]);
            out.push_str(MASK);
        } else if !out.ends_with(MASK) {
            out.push_str(MASK);
        }
        at = end;
    }
    out.push_str(&text[at..]);
    out
}

/// `%XX` sequences decoded (as Latin-1 when they do not form UTF-8: only the secret
/// key names are compared, and those are ASCII).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                let value = hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0);
                out.push(u8::try_from(value).unwrap_or(b'?'));
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap_or_else(|e| e.into_bytes().into_iter().map(char::from).collect())
}

/// A keyword/value connection string with the values of secret keywords masked.
fn redact_keywords(s: &str) -> String {
    let mut masked = Vec::new();
    let mut p = KeywordParser { s, at: 0 };
    loop {
        let start = p.at;
        match p.parameter() {
            Ok(Some((key, value))) => {
                if is_secret_key(key) {
                    masked.push(value);
                }
            }
            Ok(None) => break,
            Err(Unparsed) => {
                // What did not parse may hold a secret: mask it all.
                let from = s[start..]
                    .find(|c: char| !c.is_whitespace())
                    .map_or(s.len(), |n| start + n);
                masked.push((from, s.len()));
                break;
            }
        }
    }
    apply(s, masked)
}

/// libpq's conninfo grammar: `keyword = value` pairs separated by whitespace; a value
/// is `'quoted'` (backslash escapes `\'` and `\\`) or runs to the next whitespace
/// (backslash escapes any character).
struct KeywordParser<'a> {
    s: &'a str,
    at: usize,
}

/// A parameter: its keyword and the byte range of its value (quotes included).
type Parameter<'a> = (&'a str, (usize, usize));

/// Where the grammar broke.
struct Unparsed;

impl<'a> KeywordParser<'a> {
    fn peek(&self) -> Option<char> {
        self.s[self.at..].chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.at += c.len_utf8();
        Some(c)
    }

    fn skip_ws(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.bump();
        }
    }

    /// The next parameter; `None` at the end.
    fn parameter(&mut self) -> Result<Option<Parameter<'a>>, Unparsed> {
        self.skip_ws();
        let start = self.at;
        while self.peek().is_some_and(|c| !c.is_whitespace() && c != '=') {
            self.bump();
        }
        let key = &self.s[start..self.at];
        if key.is_empty() {
            return match self.peek() {
                None => Ok(None),
                Some(_) => Err(Unparsed),
            };
        }
        self.skip_ws();
        if self.bump() != Some('=') {
            return Err(Unparsed);
        }
        self.skip_ws();
        let value_start = self.at;
        if self.peek() == Some('\'') {
            self.bump();
            loop {
                match self.bump() {
                    None => return Err(Unparsed),
                    Some('\\') => {
                        self.bump();
                    }
                    Some('\'') => break,
                    Some(_) => {}
                }
            }
        } else {
            while let Some(c) = self.peek() {
                if c.is_whitespace() {
                    break;
                }
                self.bump();
                if c == '\\' {
                    self.bump();
                }
            }
            if self.at == value_start {
                return Err(Unparsed);
            }
        }
        Ok(Some((key, (value_start, self.at))))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Every form libpq accepts, with the password `s3cret` (or a variant holding the
    /// characters that broke the old redaction): the secret never shows, the rest does
    /// where it is unambiguous.
    #[test]
    fn urls_lose_their_passwords() {
        let cases = [
            // userinfo
            (
                "postgres://u:s3cret@h:5432/db",
                "postgres://u:***@h:5432/db",
            ),
            ("postgresql://u:s3cret@h/db", "postgresql://u:***@h/db"),
            ("PostgreSQL://u:s3cret@h/db", "PostgreSQL://u:***@h/db"),
            ("postgres://u:s3/cret@h/db", "postgres://u:***@h/db"),
            ("postgres://u:s3?cret@h/db", "postgres://u:***@h/db"),
            ("postgres://u:s3:cret@h/db", "postgres://u:***@h/db"),
            ("postgres://u:s3@cret@h/db", "postgres://u:***@h/db"),
            ("postgres://u:s3%40cr%2Fet@h/db", "postgres://u:***@h/db"),
            ("postgres://u:s3&cret=1@h/db", "postgres://u:***@h/db"),
            ("postgres://u:@h/db", "postgres://u:@h/db"),
            ("postgres://u@h/db", "postgres://u@h/db"),
            ("postgres://h/db", "postgres://h/db"),
            ("postgres://u:s3cret@h", "postgres://u:***@h"),
            // several hosts, IPv6, sockets
            (
                "postgres://u:s3cret@h1,h2:5433/db",
                "postgres://u:***@h1,h2:5433/db",
            ),
            (
                "postgres://u:s3cret@[::1]:5432/db",
                "postgres://u:***@[::1]:5432/db",
            ),
            (
                "postgres://u:s3cret@%2Frun%2Fpostgresql/db",
                "postgres://u:***@%2Frun%2Fpostgresql/db",
            ),
            (
                "postgres:///db?host=/run/postgresql&password=s3cret",
                "postgres:///db?host=/run/postgresql&password=***",
            ),
            // query parameters
            (
                "postgres://h/db?user=u&password=s3cret",
                "postgres://h/db?user=u&password=***",
            ),
            (
                "postgres://h/db?password=s3cret&sslmode=disable",
                "postgres://h/db?password=***&sslmode=disable",
            ),
            (
                "postgres://h/db?PASSWORD=s3cret",
                "postgres://h/db?PASSWORD=***",
            ),
            (
                "postgres://h/db?pass%77ord=s3cret",
                "postgres://h/db?pass%77ord=***",
            ),
            (
                "postgres://h/db?sslpassword=s3cret",
                "postgres://h/db?sslpassword=***",
            ),
            (
                "postgres://h/db?password=s3/c?r@et",
                "postgres://h/db?password=***",
            ),
            (
                "postgres://u:s3cret@h/db?sslmode=disable&password=s3cret",
                "postgres://u:***@h/db?sslmode=disable&password=***",
            ),
            ("postgres://h/db?password=", "postgres://h/db?password="),
            // not URLs
            ("sqlite", "sqlite"),
            ("/var/lib/loops", "/var/lib/loops"),
            ("u:s3cret@h/db", "u:***@h/db"),
        ];
        for (url, shown) in cases {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }

    #[test]
    fn odd_urls_mask_more_rather_than_leak() {
        for url in [
            "postgres://h:5432/db?password=s3@cret",
            "postgres://u:s3?password=cret@h",
            "postgres://u:s3cret@h/db?user=a@b",
            "postgres://h/db?user=u&password=s3cret@h2",
        ] {
            let shown = redact_url(url);
            for part in ["s3", "cret"] {
                assert!(!shown.contains(part), "{url} -> {shown}");
            }
        }
    }

    #[test]
    fn keyword_strings_lose_their_passwords() {
        let cases = [
            (
                "host=h password=s3cret user=u",
                "host=h password=*** user=u",
            ),
            (
                "host=h password='s3 cret' user=u",
                "host=h password=*** user=u",
            ),
            (r"password='s3\'cret' dbname=d", "password=*** dbname=d"),
            (r"password=s3\ cret dbname=d", "password=*** dbname=d"),
            ("password = s3cret dbname=d", "password = *** dbname=d"),
            ("  host=h\tpassword=s3cret\n", "  host=h\tpassword=***\n"),
            ("host=h sslpassword=s3cret", "host=h sslpassword=***"),
            ("host=h PassWord=s3cret", "host=h PassWord=***"),
            ("host=h user=u", "host=h user=u"),
            // what does not parse is masked from there on
            ("host=h password='s3cret", "host=h ***"),
            ("host=h oops password=s3cret", "host=h ***"),
            ("host=h password=", "host=h ***"),
        ];
        for (text, shown) in cases {
            assert_eq!(redact_url(text), shown, "{text}");
        }
    }

    /// The mask covers exactly what tokio-postgres reads as the password.
    #[test]
    fn the_masked_part_is_what_the_driver_reads_as_the_password() {
        use std::str::FromStr;
        for (url, password) in [
            ("postgres://u:s3%2Fcret@h/db", "s3/cret"),
            ("postgres://u:s3/cret@h/db", "s3/cret"),
            ("postgres://u:s3?cret@h/db", "s3?cret"),
            ("postgres://h/db?user=u&password=s3cret", "s3cret"),
            ("host=h password='s3 cret' user=u", "s3 cret"),
            (r"host=h password=s3\ cret user=u", "s3 cret"),
        ] {
            let config = tokio_postgres::Config::from_str(url).unwrap();
            assert_eq!(config.get_password(), Some(password.as_bytes()), "{url}");
            assert!(redact_url(url).contains(MASK), "{url}");
        }
    }
}
