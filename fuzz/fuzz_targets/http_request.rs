//! The HTTP server's request decoding (`loops_http::decode`): byte 0 picks the
//! decoder, the rest is its input — a query string, a form body and `encode`, the
//! login form's `next`, the JSON body of `POST /v1/loops`, a merge patch of
//! `PATCH /v1/loops/{key}`, a workflow spec body, `Cookie` header values.
//!
//! Checks, beyond "never panics, never takes > 1 s": a query keeps only known keys; a
//! form value survives `encode` and decoding again; `next` is `/` or a path of ours of
//! visible ASCII that no browser reads as another host, and filtering it again changes
//! nothing; a definition's target survives a JSON round trip; a merge patch applied
//! twice gives what it gave once (RFC 7386 patches are idempotent); an accepted spec
//! validates and survives a JSON round trip.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loops_http::decode;

/// The definition a patch is applied to.
const CURRENT: &str = r#"{"name": "backup", "description": "nightly", "schedule": {"type": "interval", "everyMs": 3600000, "anchor": "fixed_rate"}, "target": {"type": "command", "command": "tar czf /tmp/b.tgz ~/src", "shell": true, "env": {"A": "1"}}, "labels": ["ops"]}"#;

const KNOWN: [&str; 4] = ["label", "status", "limit", "showOutput"];

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    match which % 7 {
        0 => {
            if let Ok(pairs) = decode::query(&text, &KNOWN) {
                assert!(pairs.iter().all(|(k, _)| KNOWN.contains(&k.as_str())));
            }
        }
        1 => {
            for (k, v) in decode::form(&text) {
                let again = decode::form(&format!("{}={}", decode::encode(&k), decode::encode(&v)));
                assert_eq!(again, vec![(k.clone(), v.clone())], "{text:?}");
            }
        }
        2 => {
            let next = decode::login_next(Some(&text));
            if next != "/" {
                assert!(next.starts_with('/') && !next.starts_with("//"), "{next:?}");
                assert!(
                    next.bytes()
                        .all(|b| (0x21..=0x7e).contains(&b) && b != b'\\'),
                    "{next:?}"
                );
            }
            assert_eq!(decode::login_next(Some(&next)), next, "{text:?}");
        }
        3 => {
            if let Ok((def, _)) = decode::loop_definition(rest) {
                let json = serde_json::to_string(&def.target).unwrap();
                let back: loops_core::Target = serde_json::from_str(&json).unwrap();
                assert_eq!(back, def.target, "{json}");
            }
        }
        4 => {
            let (current, _) = decode::loop_definition(CURRENT.as_bytes()).unwrap();
            if let Ok((once, _)) = decode::loop_patch(&current, rest) {
                let twice = decode::loop_patch(&once, rest).map(|(d, _)| d);
                assert_eq!(twice.as_ref(), Ok(&once), "{text:?}");
            }
        }
        5 => {
            if let Ok(spec) = decode::workflow_spec(rest) {
                assert!(loops_core::workflow::validate(&spec).is_ok());
                let stored = serde_json::to_string(&spec).unwrap();
                assert_eq!(
                    loops_core::workflow::parse_spec(&stored).as_ref(),
                    Ok(&spec)
                );
            }
        }
        _ => {
            let values: Vec<&str> = text.split('\n').collect();
            if let Some(v) = decode::cookie(&values, "loops_session") {
                assert!(!v.contains(';'), "{v:?}");
            }
        }
    }
});
