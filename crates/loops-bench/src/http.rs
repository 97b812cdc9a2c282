//! Benchmarks of `loops serve` (issue #13): request rates with `oha`, and event
//! delivery to many SSE clients while the daemon runs 1,000 loops a second.

use crate::harness::{
    all_runs, clock_ticks_per_sec, delta_ms, every, json_output, keep_every_run, loadavg, millis,
    populate, populate_every, sleep, status_kb, verdict, whole_ms, BenchDir, Bencher, CpuTicks,
    Exec, Stats, Window,
};
use anyhow::{bail, ensure, Context as _, Result};
use chrono::{TimeDelta, Utc};
use loops_core::{Run, RunStatus};
use loops_runtime::client::Client;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant as Mono};

/// A `loops serve` child on a free loopback port.
pub(super) struct Serve {
    child: Child,
    pid: u32,
    pub(super) addr: String,
    pub(super) token: String,
}

impl Serve {
    pub(super) fn start(bin: &Path, data: &Path, log: &Path) -> Result<Self> {
        let log_file = std::fs::File::create(log)?;
        let mut child = Command::new(bin)
            .args(["serve", "--addr", "127.0.0.1:0"])
            .env("LOOPS_DATA_DIR", data)
            .env("LOOPS_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .spawn()
            .context("cannot start loops serve")?;
        let mut line = String::new();
        let stdout = child.stdout.take().context("no stdout")?;
        BufReader::new(stdout).read_line(&mut line)?;
        let addr = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("http://"))
            .with_context(|| format!("loops serve printed {line:?}"))?
            .to_owned();
        let token = std::fs::read_to_string(data.join("http.token"))?
            .trim()
            .to_owned();
        let pid = child.id();
        Ok(Self {
            child,
            pid,
            addr,
            token,
        })
    }

    pub(super) fn stop(&mut self) -> Result<()> {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.pid)?);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM)?;
        let start = Mono::now();
        while self.child.try_wait()?.is_none() {
            ensure!(
                start.elapsed() < Duration::from_secs(30),
                "loops serve did not stop"
            );
            sleep(Duration::from_millis(5));
        }
        Ok(())
    }

    /// The server's anonymous memory and its RSS high-water mark, in kB.
    pub(super) fn memory_kb(&self) -> Result<(u64, u64)> {
        Ok((
            status_kb(self.pid, "RssAnon:")?,
            status_kb(self.pid, "VmHWM:")?,
        ))
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `oha` on PATH or in `~/.cargo/bin`.
fn oha() -> Result<std::path::PathBuf> {
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let candidates = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain(home.map(|h| h.join(".cargo/bin")));
    for dir in candidates {
        let path = dir.join("oha");
        if path.is_file() {
            return Ok(path);
        }
    }
    bail!("oha not found (cargo install oha)")
}

/// What one oha run measured.
struct OhaFigures {
    requests: u64,
    rps: f64,
    p50: f64,
    p99: f64,
    max: f64,
    non_200: u64,
}

fn run_oha(oha: &Path, url: &str, token: &str, secs: u64, conns: usize) -> Result<OhaFigures> {
    let out = Command::new(oha)
        .args([
            "--no-tui",
            "--output-format",
            "json",
            "-z",
            &format!("{secs}s"),
            "-c",
            &conns.to_string(),
            "-H",
            &format!("Authorization: Bearer {token}"),
            url,
        ])
        .stdin(Stdio::null())
        .output()
        .context("cannot run oha")?;
    let v = json_output(&out, "oha")?;
    let f = |p: &str| {
        v.pointer(p)
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(f64::NAN)
    };
    let codes = v["statusCodeDistribution"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut requests = 0;
    let mut non_200 = 0;
    for (code, n) in codes {
        let n = n.as_u64().unwrap_or(0);
        requests += n;
        if code != "200" {
            non_200 += n;
        }
    }
    Ok(OhaFigures {
        requests,
        rps: f("/summary/requestsPerSec"),
        p50: f("/latencyPercentiles/p50") * 1_000.0,
        p99: f("/latencyPercentiles/p99") * 1_000.0,
        max: f("/summary/slowest") * 1_000.0,
        non_200,
    })
}

/// One SSE client: reads `/v1/events` until `stop`, timing each event against its
/// `at` (the instant of the change, taken before its commit).
fn sse_client(addr: String, token: String, stop: Arc<AtomicBool>) -> Result<(Vec<f64>, u64)> {
    let mut s = std::net::TcpStream::connect(&addr)?;
    s.set_read_timeout(Some(Duration::from_millis(200)))?;
    write!(
        s,
        "GET /v1/events HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n"
    )?;
    let mut reader = BufReader::with_capacity(256 << 10, s);
    let mut latencies = Vec::with_capacity(100_000);
    let mut events = 0u64;
    let mut line = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) => return Err(e.into()),
        }
        let got = Utc::now();
        let Some(data) = line.strip_prefix(b"data: ") else {
            continue;
        };
        events += 1;
        // `"at":"2026-12-01T10:00:00.123Z"`, without parsing the whole event.
        let text = String::from_utf8_lossy(data);
        if let Some(i) = text.find("\"at\":\"") {
            let rest = &text[i + 6..];
            if let Some(end) = rest.find('"') {
                if let Ok(at) = chrono::DateTime::parse_from_rfc3339(&rest[..end]) {
                    latencies.push(delta_ms(got - at.with_timezone(&Utc)));
                }
            }
        }
    }
    Ok((latencies, events))
}

/// What one round of `http-events` measured.
struct Round {
    clients: usize,
    runs: usize,
    lag: Stats,
    delivery: Stats,
    events: u64,
    missed: i64,
    daemon_cpu: f64,
    serve_cpu: f64,
}

impl Bencher {
    /// `GET /v1/loops/{id}` and `GET /v1/loops?limit=100` over N loops, with oha.
    pub(super) fn http_get(&self, n: usize, secs: u64, conns: usize) -> Result<()> {
        let oha = oha()?;
        let dir = self.fresh_dir()?;
        let (ids, setup) = populate_every(&dir.data(), n, "get", Exec::True, 3_600_000)?;
        eprintln!("created {n} loops in {:.2} s", setup.as_secs_f64());
        let mut serve = Serve::start(&self.bin, &dir.data(), &dir.log("serve.log"))?;
        let mut ids: Vec<&String> = ids.keys().collect();
        ids.sort();
        let one = ids.get(n / 2).context("no loop")?;
        let url = format!("http://{}", serve.addr);
        println!("| request | connections | secs | requests | non-200 | req/s | p50 ms | p99 ms | max ms | target | verdict |");
        println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|");
        for (label, path, target) in [
            (
                "`GET /v1/loops/{id}`",
                format!("/v1/loops/{one}"),
                Some((5_000.0, 10.0)),
            ),
            (
                "`GET /v1/loops?limit=100`",
                "/v1/loops?limit=100".to_owned(),
                Some((3_000.0, 15.0)),
            ),
            (
                "`GET /v1/loops?limit=100&offset=900`",
                "/v1/loops?limit=100&offset=900".to_owned(),
                Some((3_000.0, 15.0)),
            ),
        ] {
            let load0 = loadavg();
            let cpu0 = CpuTicks::of(serve.pid)?;
            let f = run_oha(&oha, &format!("{url}{path}"), &serve.token, secs, conns)?;
            let cpu1 = CpuTicks::of(serve.pid)?;
            let (own, _) = cpu1.since_ms(&cpu0, clock_ticks_per_sec());
            let (target_text, met) = match target {
                Some((rps, p99)) => (
                    format!("≥ {rps:.0} req/s, p99 ≤ {p99:.0} ms"),
                    verdict(f.rps >= rps && f.p99 <= p99 && f.non_200 == 0).to_owned(),
                ),
                None => ("–".to_owned(), "–".to_owned()),
            };
            println!(
                "| {label} | {conns} | {secs} | {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {target_text} | {met} |",
                f.requests, f.non_200, f.rps, f.p50, f.p99, f.max
            );
            eprintln!(
                "  server CPU {:.0}% of a core over the run; load {load0} → {}",
                own / (secs as f64 * 10.0),
                loadavg()
            );
        }
        serve.stop()
    }

    /// Event delivery to `clients` SSE clients while the daemon runs N loops every
    /// second, and the daemon's dispatch lag with and without those clients.
    pub(super) fn http_events(
        &self,
        n: usize,
        clients: usize,
        secs: u64,
        max_concurrent: usize,
    ) -> Result<()> {
        ensure!(secs >= 8, "need --secs >= 8");
        let rounds = [
            self.events_round(n, 0, secs, max_concurrent)?,
            self.events_round(n, clients, secs, max_concurrent)?,
        ];
        println!("| SSE clients | runs in window | missed slots | dispatch lag p50 ms | p99 ms | max ms | events received | delivery p50 ms | p99 ms | max ms | daemon CPU | server CPU |");
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for r in &rounds {
            let d = |v: f64| {
                if r.clients == 0 {
                    "–".to_owned()
                } else {
                    format!("{v:.1}")
                }
            };
            println!(
                "| {} | {} | {} | {:.0} | {:.0} | {:.0} | {} | {} | {} | {} | {:.0}% | {:.0}% |",
                r.clients,
                r.runs,
                r.missed,
                r.lag.p50,
                r.lag.p99,
                r.lag.max,
                r.events,
                d(r.delivery.p50),
                d(r.delivery.p99),
                d(r.delivery.max),
                r.daemon_cpu,
                r.serve_cpu,
            );
        }
        let (base, with) = (&rounds[0], &rounds[1]);
        println!(
            "\ndelivery p99 {:.1} ms (target ≤ 100 ms): {}; dispatch lag p99 {:.0} ms with {} clients against {:.0} ms without (target ≤ 1.2×, issue #21): {}",
            with.delivery.p99,
            verdict(with.delivery.p99 <= 100.0),
            with.lag.p99,
            with.clients,
            base.lag.p99,
            verdict(with.lag.p99 <= 1.2 * base.lag.p99.max(1.0)),
        );
        Ok(())
    }

    fn events_round(
        &self,
        n: usize,
        clients: usize,
        secs: u64,
        max_concurrent: usize,
    ) -> Result<Round> {
        let dir: BenchDir = self.fresh_dir()?;
        let client = Client::open(&dir.data())?;
        let base = whole_ms(Utc::now() + TimeDelta::seconds(2));
        let (first_slots, _) = populate(&client, n, "tick", Exec::True, |i| {
            (every(1_000), base + millis(i * 1_000 / n))
        })?;
        drop(client);
        let mut serve = Serve::start(&self.bin, &dir.data(), &dir.log("serve.log"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let threads: Vec<_> = (0..clients)
            .map(|_| {
                let (addr, token, stop) =
                    (serve.addr.clone(), serve.token.clone(), Arc::clone(&stop));
                std::thread::spawn(move || sse_client(addr, token, stop))
            })
            .collect();
        let mc = max_concurrent.to_string();
        let mut daemon = self.start_daemon(&dir, "daemon.log", &keep_every_run(&mc))?;
        let tck = clock_ticks_per_sec();
        let (d0, s0) = (daemon.cpu()?, CpuTicks::of(serve.pid)?);
        sleep(Duration::from_secs(secs));
        let (d1, s1) = (daemon.cpu()?, CpuTicks::of(serve.pid)?);
        let stopped_at = Utc::now();
        daemon.stop()?;
        stop.store(true, Ordering::Relaxed);
        let window = Window::new(daemon.ready_at, base, stopped_at);
        let (ws, we) = (window.start, window.end);
        let mut delivery = Vec::new();
        let mut events = 0;
        for t in threads {
            let (lat, count) = t
                .join()
                .map_err(|_| anyhow::anyhow!("an SSE client panicked"))??;
            events += count;
            delivery.extend(lat);
        }
        serve.stop()?;
        let runs: Vec<Run> = all_runs(&dir.db())?;
        let in_window = |r: &&Run| r.scheduled_for >= ws && r.scheduled_for <= we;
        let lag: Vec<f64> = runs
            .iter()
            .filter(in_window)
            .filter(|r| r.status != RunStatus::Skipped)
            .filter_map(|r| r.started_at.map(|s| delta_ms(s - r.scheduled_for)))
            .collect();
        let window_runs = runs.iter().filter(in_window).count();
        let mut expected = 0i64;
        for first in first_slots.values().flatten() {
            expected += window.slots_from(*first);
        }
        let (own, _) = d1.since_ms(&d0, tck);
        let (serve_own, _) = s1.since_ms(&s0, tck);
        let pct = |ms: f64| ms / (secs as f64 * 10.0);
        Ok(Round {
            clients,
            runs: window_runs,
            lag: Stats::of(lag),
            delivery: Stats::of(delivery),
            events,
            missed: expected - i64::try_from(window_runs).unwrap_or(0),
            daemon_cpu: pct(own),
            serve_cpu: pct(serve_own),
        })
    }
}
