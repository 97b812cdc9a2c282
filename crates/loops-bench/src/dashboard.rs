//! The web dashboard's overview (issue #14) over 1,000 loops and 100,000 runs: the
//! server's time for `GET /` through a real `loops serve`, the HTML's size, the same
//! page rendered in-process (and with every loop on one page), and the first
//! contentful paint in headless Chromium (tests/browser/fcp.mjs, when node and
//! chromium are there).

use crate::harness::{json_output, ms, verdict, warm_samples, Bencher, Stats};
use crate::http::Serve;
use crate::HistoryArgs;
use anyhow::{ensure, Context as _, Result};
use chrono::Utc;
use loops_http::web::{overview_html, OverviewQuery};
use loops_runtime::client::Client;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant as Mono;

/// One `GET path` with the bearer token over a fresh connection: the time to the
/// whole body, the status and the body's length.
pub(crate) fn get(addr: &str, token: &str, path: &str) -> Result<(f64, u16, usize)> {
    let start = Mono::now();
    let mut s = std::net::TcpStream::connect(addr)?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    )?;
    let mut buf = Vec::with_capacity(1 << 20);
    s.read_to_end(&mut buf)?;
    let took = ms(start.elapsed());
    let text = String::from_utf8_lossy(&buf);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let head_end = text.find("\r\n\r\n").map_or(0, |i| i + 4);
    Ok((took, status, buf.len() - head_end))
}

/// `GET /` timed `reps` times after the warm-up; and the size of its body.
pub(crate) fn time_overview(serve: &Serve, reps: usize) -> Result<(Stats, usize)> {
    let mut size = 0;
    let times = warm_samples(reps, || {
        let (took, status, len) = get(&serve.addr, &serve.token, "/")?;
        ensure!(status == 200, "GET / answered {status}");
        size = len;
        Ok(took)
    })?;
    Ok((times, size))
}

impl Bencher {
    pub(super) fn dashboard(&self, args: &HistoryArgs) -> Result<()> {
        let (loops, runs, reps) = (args.loops, args.runs, args.reps);
        let dir = self.history_dir(args)?;
        let data = dir.data();

        let mut serve = Serve::start(&self.bin, &data, &dir.log("serve.log"))?;
        let (http, size) = time_overview(&serve, reps)?;

        // In-process: the default page, and every loop on one page.
        let client = Client::open_read_only(&data)?;
        let (mut page, mut all, mut all_size) = (Vec::new(), Vec::new(), 0);
        for i in 0..reps + 3 {
            let t = Mono::now();
            let html = overview_html(&client, &OverviewQuery::default(), Utc::now(), "")
                .map_err(|e| anyhow::anyhow!(e.message))?;
            let a = ms(t.elapsed());
            let t = Mono::now();
            let one = OverviewQuery {
                per_page: loops.max(1),
                ..OverviewQuery::default()
            };
            let every_loop = overview_html(&client, &one, Utc::now(), "")
                .map_err(|e| anyhow::anyhow!(e.message))?;
            let b = ms(t.elapsed());
            all_size = every_loop.len();
            std::hint::black_box(html);
            if i >= 3 {
                page.push(a);
                all.push(b);
            }
        }
        let (page, all) = (Stats::of(page), Stats::of(all));
        // The strips' read alone (one statement for every loop).
        let ids: Vec<_> = client.list(None)?.into_iter().map(|l| l.id).collect();
        let mut strips = Vec::new();
        for _ in 0..reps {
            let t = Mono::now();
            std::hint::black_box(client.store().recent_runs(&ids, 20)?);
            strips.push(ms(t.elapsed()));
        }
        let strips = Stats::of(strips);

        let fcp = self.first_paint(&serve.addr, &serve.token, reps.min(10));
        serve.stop()?;

        println!("| loops | runs | `GET /` median ms | p90 | max | HTML bytes | in-process page ms | all {loops} loops on one page: ms / bytes | strips read ms | FCP median ms | p90 | target | verdict |");
        println!("|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---|---|");
        let (fcp_p50, fcp_p90, fcp_ok) = match &fcp {
            Ok(s) => (
                format!("{:.0}", s.p50),
                format!("{:.0}", s.p90),
                s.p50 <= 1_000.0,
            ),
            Err(e) => {
                eprintln!("first contentful paint not measured: {e:#}");
                ("–".to_owned(), "–".to_owned(), false)
            }
        };
        let met = http.p50 <= 100.0 && size <= 1 << 20 && fcp_ok;
        println!(
            "| {loops} | {runs} | {:.1} | {:.1} | {:.1} | {size} | {:.1} | {:.1} / {all_size} | {:.1} | {fcp_p50} | {fcp_p90} | server ≤ 100 ms, HTML ≤ 1 MB, FCP ≤ 1 s | {} |",
            http.p50, http.p90, http.max, page.p50, all.p50, strips.p50, verdict(met)
        );
        println!("\n({reps} timed requests after 3 warm-up ones, each on a new connection; the page shows {} loops, the rest on further pages.)", loops_http::web::PAGE);
        Ok(())
    }

    /// First contentful paint of `/` in headless Chromium, `n` loads.
    fn first_paint(&self, addr: &str, token: &str, n: usize) -> Result<Stats> {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let script = repo.join("tests/browser/fcp.mjs");
        ensure!(
            repo.join("tests/browser/node_modules/playwright-core")
                .is_dir(),
            "playwright-core is not installed (cd tests/browser && npm ci)"
        );
        let out = Command::new("node")
            .arg(&script)
            .current_dir(repo.join("tests/browser"))
            .env("LOOPS_URL", format!("http://{addr}"))
            .env("LOOPS_TOKEN", token)
            .env("LOOPS_LOADS", n.to_string())
            .stdin(Stdio::null())
            .output()
            .context("cannot run node")?;
        let v = json_output(&out, "fcp.mjs")?;
        let samples: Vec<f64> = v["fcpMs"]
            .as_array()
            .map(|a| a.iter().filter_map(serde_json::Value::as_f64).collect())
            .unwrap_or_default();
        ensure!(!samples.is_empty(), "no paint timings: {v}");
        Ok(Stats::of(samples))
    }
}
