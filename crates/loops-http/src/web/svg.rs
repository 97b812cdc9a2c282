//! Inline SVG drawn on the server: a workflow spec's DAG (levels left to right, an
//! edge from each dependency to its dependent) and a loop's chart of run durations and
//! dispatch lag. Every text is escaped; every status carries a word, not only a colour.

use super::ansi::escape;
use super::words;
use loops_core::workflow::{Dag, WorkflowSpec};
use loops_core::StepStatus;
use std::fmt::Write as _;

/// Width of one level's column, and a node's box.
const COLUMN: u32 = 190;
const NODE_W: u32 = 150;
const NODE_H: u32 = 44;
/// Height of one row within a level.
const ROW: u32 = 64;
const MARGIN: u32 = 12;

/// A step's place in the drawing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    pub id: String,
    pub level: usize,
    /// Its row within its level (0 at the top).
    pub row: usize,
    pub x: u32,
    pub y: u32,
}

/// Where each step of a spec goes, and the edges (dependency → dependent, by index).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub nodes: Vec<Placed>,
    pub edges: Vec<(usize, usize)>,
    pub width: u32,
    pub height: u32,
}

/// Lays a spec out: each step in the column of its level (its longest chain of
/// dependencies), the steps of a level ordered by the mean row of their dependencies
/// (fewer crossings), then by their order in the spec; each column centred.
pub fn layout(spec: &WorkflowSpec) -> Layout {
    let dag = Dag::new(spec);
    let levels = dag.levels();
    let depth = levels.iter().copied().max().map_or(0, |m| m + 1);
    let mut rows = vec![0usize; levels.len()];
    let mut columns: Vec<Vec<usize>> = vec![Vec::new(); depth];
    for (i, &l) in levels.iter().enumerate() {
        columns[l].push(i);
    }
    for column in &mut columns {
        let mut keyed: Vec<(f64, usize)> = column
            .iter()
            .map(|&i| {
                let deps = dag.dependencies(i);
                let key = if deps.is_empty() {
                    i as f64
                } else {
                    deps.iter().map(|&d| rows[d] as f64).sum::<f64>() / deps.len() as f64
                };
                (key, i)
            })
            .collect();
        keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        *column = keyed.into_iter().map(|(_, i)| i).collect();
        for (row, &i) in column.iter().enumerate() {
            rows[i] = row;
        }
    }
    let tallest = columns.iter().map(Vec::len).max().unwrap_or(0) as u32;
    let height = tallest.max(1) * ROW + 2 * MARGIN;
    let width = (depth as u32).max(1) * COLUMN + 2 * MARGIN - (COLUMN - NODE_W);
    let mut nodes: Vec<Placed> = spec
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| Placed {
            id: s.id.as_str().to_owned(),
            level: levels[i],
            row: rows[i],
            x: 0,
            y: 0,
        })
        .collect();
    for column in &columns {
        let n = column.len() as u32;
        let top = MARGIN + (tallest - n) * ROW / 2;
        for (row, &i) in column.iter().enumerate() {
            nodes[i].x = MARGIN + nodes[i].level as u32 * COLUMN;
            nodes[i].y = top + row as u32 * ROW + (ROW - NODE_H) / 2;
        }
    }
    let edges = (0..spec.steps.len())
        .flat_map(|i| dag.dependencies(i).iter().map(move |&d| (d, i)))
        .collect();
    Layout {
        nodes,
        edges,
        width,
        height,
    }
}

/// The DAG as SVG. With `statuses` (one per step, in spec order), each node is
/// coloured and labelled by its status; `href` gives a node's link (its output).
pub fn dag(
    layout: &Layout,
    statuses: Option<&[StepStatus]>,
    href: impl Fn(&str) -> String,
) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg class=\"dag\" role=\"img\" aria-label=\"workflow steps, dependencies left to right\" \
         viewBox=\"0 0 {w} {h}\" width=\"{w}\" height=\"{h}\">\
         <defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"7\" \
         markerHeight=\"7\" orient=\"auto-start-reverse\"><path d=\"M0 0L10 5L0 10z\" class=\"arrowhead\"/>\
         </marker></defs>",
        w = layout.width,
        h = layout.height
    );
    for &(from, to) in &layout.edges {
        let (a, b) = (&layout.nodes[from], &layout.nodes[to]);
        let (x1, y1) = (a.x + NODE_W, a.y + NODE_H / 2);
        let (x2, y2) = (b.x, b.y + NODE_H / 2);
        let mid = (x1 + x2) / 2;
        let _ = write!(
            s,
            "<path class=\"edge\" data-from=\"{}\" data-to=\"{}\" d=\"M{x1} {y1}C{mid} {y1} {mid} {y2} {x2} {y2}\" marker-end=\"url(#arrow)\"/>",
            escape(&a.id),
            escape(&b.id)
        );
    }
    for (i, n) in layout.nodes.iter().enumerate() {
        let status = statuses.and_then(|st| st.get(i).copied());
        // A spec's DAG (no run) draws its steps plain.
        let plain = words::Badge {
            class: "spec",
            marker: "",
            word: "",
        };
        let badge = status.map_or(plain, words::step_status);
        let (class, marker, word) = (badge.class, badge.marker, badge.word);
        let id = escape(&n.id);
        let label = if word.is_empty() {
            id.clone()
        } else {
            format!("{id}: {word}")
        };
        let _ = write!(
            s,
            "<a href=\"{href}\" class=\"node st-{class}\" data-step=\"{id}\" aria-label=\"{label}\">\
             <title>{label}</title>\
             <rect x=\"{x}\" y=\"{y}\" width=\"{NODE_W}\" height=\"{NODE_H}\" rx=\"6\"/>\
             <text x=\"{tx}\" y=\"{ty}\" class=\"name\">{id}</text>",
            href = escape(&href(&n.id)),
            x = n.x,
            y = n.y,
            tx = n.x + 10,
            ty = n.y + 18,
        );
        if !word.is_empty() {
            let _ = write!(
                s,
                "<text x=\"{tx}\" y=\"{ty}\" class=\"state\">{marker} {word}</text>",
                tx = n.x + 10,
                ty = n.y + 35,
            );
        }
        s.push_str("</a>");
    }
    s.push_str("</svg>");
    s
}

/// One run in a loop's chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub duration_ms: Option<u64>,
    /// From the slot to the start.
    pub lag_ms: Option<u64>,
    pub failed: bool,
    /// The tooltip.
    pub label: String,
}

/// Which value of a point a panel shows.
type Series = fn(&Point) -> Option<u64>;

/// Two small panels, runs oldest to newest: durations, then dispatch lag; failed
/// runs marked with a cross (and said so in their tooltip).
pub fn chart(points: &[Point]) -> String {
    let mut s = String::new();
    if points.is_empty() {
        return s;
    }
    let (w, panel, gap) = (720u32, 110u32, 28u32);
    let h = 2 * panel + 2 * gap;
    let _ = write!(
        s,
        "<svg class=\"chart\" role=\"img\" aria-label=\"run durations and dispatch lag, oldest to newest\" \
         viewBox=\"0 0 {w} {h}\" preserveAspectRatio=\"none\">"
    );
    let series: [(&str, Series); 2] = [
        ("duration", |p| p.duration_ms),
        ("dispatch lag", |p| p.lag_ms),
    ];
    let step = if points.len() > 1 {
        (w - 60) as f64 / (points.len() - 1) as f64
    } else {
        0.0
    };
    for (k, (name, value)) in series.iter().enumerate() {
        let top = gap + k as u32 * (panel + gap);
        let max = points.iter().filter_map(value).max().unwrap_or(0).max(1);
        let _ = write!(
            s,
            "<text x=\"4\" y=\"{}\" class=\"axis\">{name} (max {})</text>\
             <line x1=\"50\" y1=\"{b}\" x2=\"{w}\" y2=\"{b}\" class=\"base\"/>",
            top - 8,
            words::elapsed(max),
            b = top + panel,
        );
        let xy = |i: usize, v: u64| {
            let x = 50.0 + i as f64 * step;
            let y = (top + panel) as f64 - v as f64 / max as f64 * panel as f64;
            (x, y)
        };
        let mut line = String::new();
        for (i, p) in points.iter().enumerate() {
            if let Some(v) = value(p) {
                let (x, y) = xy(i, v);
                let _ = write!(
                    line,
                    "{}{x:.1},{y:.1}",
                    if line.is_empty() { "" } else { " " }
                );
            }
        }
        if !line.is_empty() {
            let _ = write!(s, "<polyline class=\"series s{k}\" points=\"{line}\"/>");
        }
        for (i, p) in points.iter().enumerate() {
            let Some(v) = value(p) else { continue };
            let (x, y) = xy(i, v);
            let title = escape(&p.label);
            if p.failed {
                let _ = write!(
                    s,
                    "<path class=\"failmark\" d=\"M{a:.1} {b:.1}L{c:.1} {d:.1}M{a:.1} {d:.1}L{c:.1} {b:.1}\"><title>{title}</title></path>",
                    a = x - 4.0,
                    b = y - 4.0,
                    c = x + 4.0,
                    d = y + 4.0
                );
            } else {
                let _ = write!(
                    s,
                    "<circle class=\"dot s{k}\" cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"2.5\"><title>{title}</title></circle>"
                );
            }
        }
    }
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: &str) -> WorkflowSpec {
        serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}"))
    }

    fn diamond() -> WorkflowSpec {
        spec(
            r#"{"name":"d","steps":[
            {"id":"a","target":{"type":"command","command":"true"}},
            {"id":"b","target":{"type":"command","command":"true"},"dependsOn":["a"]},
            {"id":"c","target":{"type":"command","command":"true"},"dependsOn":["a"]},
            {"id":"d","target":{"type":"command","command":"true"},"dependsOn":["b","c"]}]}"#,
        )
    }

    #[test]
    fn a_diamond_is_laid_out_in_three_levels_left_to_right() {
        let l = layout(&diamond());
        let by = |id: &str| {
            l.nodes
                .iter()
                .find(|n| n.id == id)
                .cloned()
                .unwrap_or_else(|| panic!("{id}"))
        };
        let (a, b, c, d) = (by("a"), by("b"), by("c"), by("d"));
        assert_eq!((a.level, b.level, c.level, d.level), (0, 1, 1, 2));
        assert!(a.x < b.x && b.x == c.x && c.x < d.x);
        // b above c, a and d centred between them.
        assert!(b.y < c.y);
        assert_eq!(a.y, d.y);
        assert!(b.y < a.y && a.y < c.y);
        let mut edges = l.edges.clone();
        edges.sort_unstable();
        assert_eq!(edges, vec![(0, 1), (0, 2), (1, 3), (2, 3)]);
        let svg = dag(
            &l,
            Some(&[
                StepStatus::Succeeded,
                StepStatus::Running,
                StepStatus::Failed,
                StepStatus::Pending,
            ]),
            |id| format!("?step={id}"),
        );
        assert_eq!(svg.matches("class=\"edge\"").count(), 4);
        assert!(
            svg.contains("class=\"node st-ok\" data-step=\"a\""),
            "{svg}"
        );
        assert!(
            svg.contains("class=\"node st-fail\" data-step=\"c\""),
            "{svg}"
        );
        assert!(svg.contains("▶ running"), "{svg}");
        assert!(svg.contains("href=\"?step=d\""), "{svg}");
    }

    #[test]
    fn a_step_id_is_escaped_in_the_drawing() {
        // Step ids are validated, but the drawing escapes whatever it is given.
        let mut l = layout(&diamond());
        l.nodes[0].id = "<script>".to_owned();
        let svg = dag(&l, None, |_| "x".to_owned());
        assert!(!svg.contains("<script>"));
        assert!(svg.contains("&lt;script&gt;"));
    }

    #[test]
    fn failures_are_marked_in_the_chart() {
        let p = |d, failed| Point {
            duration_ms: Some(d),
            lag_ms: Some(5),
            failed,
            label: format!("run <{d}>"),
        };
        let svg = chart(&[p(100, false), p(300, true), p(200, false)]);
        // One cross per panel for the failed run, dots for the others.
        assert_eq!(svg.matches("class=\"failmark\"").count(), 2);
        assert_eq!(svg.matches("<circle").count(), 4);
        assert!(svg.contains("run &lt;300&gt;"));
        assert!(chart(&[]).is_empty());
    }
}
