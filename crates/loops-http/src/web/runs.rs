//! `/runs/{id}`: one run — status, timing, attempt, exit code, error, the agent's
//! summary and usage, its notifications, and its stdout and stderr: stored output with
//! its ANSI colours rendered here, in pages of [`OUTPUT_PAGE`] bytes (the last page
//! first); a running run's output followed live by our script from
//! `/v1/runs/{id}/output?follow=true` (colours rendered in the browser).

use super::PageRequest;
use super::{ansi, words, Base};
use crate::error::ApiError;
use crate::request::Params;
use askama::Template;
use axum::extract::Path;
use axum::response::Response;
use loops_core::{Instant, Run, RunStatus};
use loops_runtime::Client;

/// Bytes of output on one page.
pub const OUTPUT_PAGE: usize = 128 << 10;

/// One stream of output, as shown.
pub(crate) struct Output {
    /// `stdout` or `stderr`.
    pub name: &'static str,
    /// The page's HTML (escaped, with colour spans).
    pub html: String,
    pub bytes: usize,
    /// 1-based page shown, and how many there are.
    pub page: usize,
    pub pages: usize,
    /// Links to every page, when there are several.
    pub links: Vec<PageLink>,
}

/// A link to one page of output.
pub(crate) struct PageLink {
    pub number: usize,
    pub href: String,
    pub current: bool,
}

#[derive(Template)]
#[template(path = "run.html")]
pub(crate) struct RunPage {
    pub base: Base,
    pub id: String,
    pub loop_id: String,
    pub loop_name: String,
    pub running: bool,
    pub badge: words::Badge,
    pub facts: Vec<(&'static str, String)>,
    pub error: String,
    /// What the error quoted from the run's output (the page shows the output).
    pub error_output: String,
    pub summary: String,
    pub usage: Vec<(&'static str, String)>,
    pub outputs: Vec<Output>,
    pub deliveries: Vec<(String, String, String)>,
}

/// The `page`-th (1-based; 0 = last) page of `text`, cut at character boundaries,
/// and the number of pages.
pub fn output_page(text: &str, page: usize) -> (&str, usize, usize) {
    let pages = text.len().div_ceil(OUTPUT_PAGE).max(1);
    let page = if page == 0 || page > pages {
        pages
    } else {
        page
    };
    let floor = |mut i: usize| {
        i = i.min(text.len());
        while !text.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    let start = floor((page - 1) * OUTPUT_PAGE);
    let end = floor(page * OUTPUT_PAGE);
    (&text[start..end], page, pages)
}

/// The block of the stream `name` (`stdout` or `stderr`) on its page of `pages`
/// (stdout's, stderr's); its page links keep the other stream on its page.
fn output(run: &Run, name: &'static str, pages: (usize, usize)) -> Output {
    let (text, page, other) = if name == "stdout" {
        (run.stdout.as_deref(), pages.0, ("stderr", pages.1))
    } else {
        (run.stderr.as_deref(), pages.1, ("stdout", pages.0))
    };
    let text = text.unwrap_or("");
    let (slice, page, pages) = output_page(text, page);
    let links = if pages > 1 {
        (1..=pages)
            .map(|n| PageLink {
                number: n,
                href: format!(
                    "/runs/{}?{name}={n}&{}={}#{name}",
                    run.id.as_str(),
                    other.0,
                    other.1
                ),
                current: n == page,
            })
            .collect()
    } else {
        Vec::new()
    };
    Output {
        name,
        html: ansi::to_html(slice),
        bytes: text.len(),
        page,
        pages,
        links,
    }
}

fn build(
    c: &Client,
    id: &str,
    pages: (usize, usize),
    now: Instant,
    csrf: String,
) -> Result<RunPage, ApiError> {
    let run = c.get_run(id)?;
    let max_attempts = c.get(run.loop_id.as_str()).ok().map(|lp| lp.max_attempts);
    let badge = words::run_status(run.status);
    let running = run.status == RunStatus::Running;
    let mut facts = vec![
        ("slot", words::instant(&run.scheduled_for)),
        (
            "attempt",
            match max_attempts {
                Some(m) => format!("{} of {m}", run.attempt),
                None => run.attempt.to_string(),
            },
        ),
        ("source", run.source.to_string()),
        ("created", words::instant(&run.created_at)),
    ];
    if let Some(s) = run.started_at {
        facts.push(("started", words::instant(&s)));
        facts.push((
            "dispatch lag",
            words::elapsed((s - run.scheduled_for).num_milliseconds().max(0) as u64),
        ));
    }
    if let Some(f) = run.finished_at {
        facts.push(("finished", words::instant(&f)));
    }
    match (run.duration_ms, run.started_at) {
        (Some(d), _) => facts.push(("duration", words::elapsed(d))),
        (None, Some(s)) if running => facts.push((
            "running for",
            words::elapsed((now - s).num_milliseconds().max(0) as u64),
        )),
        _ => {}
    }
    if let Some(code) = run.exit_code {
        facts.push(("exit code", code.to_string()));
    }
    if let Some(class) = run.failure_class {
        let text = match run.retry_at {
            Some(at) => format!(
                "{class} (provider says retry after {})",
                words::instant(&at)
            ),
            None => class.to_string(),
        };
        facts.push(("failure", text));
    }
    if let Some(account) = &run.account {
        facts.push(("account", account.clone()));
    }
    if let Some(id) = &run.session_id {
        facts.push(("session", id.clone()));
    }
    if let Some(note) = &run.session_note {
        facts.push(("session note", note.clone()));
    }
    if let Some(pid) = run.pid {
        facts.push(("pid", pid.to_string()));
    }
    if let Some(by) = &run.claimed_by {
        facts.push(("runner", by.clone()));
    }
    let mut usage = Vec::new();
    if let Some(u) = &run.usage {
        if let Some(n) = u.input_tokens {
            usage.push(("input tokens", n.to_string()));
        }
        if let Some(n) = u.output_tokens {
            usage.push(("output tokens", n.to_string()));
        }
        if let Some(cost) = u.cost_usd {
            usage.push(("cost", format!("${cost:.4}")));
        }
    }
    let outputs = if running {
        // Followed live by the script from the start of the spool.
        ["stdout", "stderr"]
            .into_iter()
            .map(|name| Output {
                name,
                html: String::new(),
                bytes: 0,
                page: 1,
                pages: 1,
                links: Vec::new(),
            })
            .collect()
    } else {
        ["stdout", "stderr"]
            .into_iter()
            .map(|name| output(&run, name, pages))
            .collect()
    };
    let deliveries = c
        .deliveries_of_runs(std::slice::from_ref(&run.id))?
        .into_iter()
        .map(|mut d| {
            loops_core::redact::redact_delivery(&mut d, false);
            (
                format!("{} via {} ({})", d.event, d.channel, d.target),
                d.status.to_string(),
                d.last_error.unwrap_or_default(),
            )
        })
        .collect();
    Ok(RunPage {
        base: Base {
            title: format!(
                "Run {} of {}",
                words::short_id(run.id.as_str()),
                run.loop_name
            ),
            nav: "overview",
            csrf,
        },
        id: run.id.as_str().to_owned(),
        loop_id: run.loop_id.as_str().to_owned(),
        loop_name: run.loop_name.clone(),
        running,
        badge,
        facts,
        error: run.error.clone().unwrap_or_default(),
        error_output: run.error_output.clone().unwrap_or_default(),
        summary: run.summary.clone().unwrap_or_default(),
        usage,
        outputs,
        deliveries,
    })
}

pub(crate) async fn page(Path(id): Path<String>, request: PageRequest) -> Response {
    request
        .show(output_pages, move |c, pages, csrf| {
            build(c, &id, pages, chrono::Utc::now(), csrf)
        })
        .await
}

/// The pages of stdout and stderr asked for (`stdout=N`, `stderr=N`; 0, the last).
fn output_pages(query: Option<&str>) -> Result<(usize, usize), ApiError> {
    let p = Params::parse(query, &["stdout", "stderr"])?;
    Ok((
        p.count("stdout")?.unwrap_or(0),
        p.count("stderr")?.unwrap_or(0),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_output_is_paged_at_character_boundaries() {
        let text = "é".repeat(OUTPUT_PAGE); // two bytes each: two pages
        let (last, page, pages) = output_page(&text, 0);
        assert_eq!((page, pages), (2, 2));
        let (first, _, _) = output_page(&text, 1);
        assert_eq!(first.len() + last.len(), text.len());
        assert!(first.len() <= OUTPUT_PAGE);
        assert_eq!(output_page("", 0), ("", 1, 1));
        assert_eq!(output_page("abc", 9), ("abc", 1, 1));
    }
}
