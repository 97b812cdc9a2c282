//! ANSI colours in stored output as HTML: SGR sequences (`ESC [ … m`) become
//! `<span class="…">` (bold, dim, italic, underline, the 8 + 8 colours of foreground
//! and background); every other escape sequence is dropped; the text is HTML-escaped.
//! The live tail does the same in the browser (`assets/app.js`, `ansiToHtml`).

/// The current style.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct Style {
    bold: bool,
    dim: bool,
    italic: bool,
    underline: bool,
    fg: Option<u8>,
    bg: Option<u8>,
}

impl Style {
    fn classes(&self) -> String {
        let mut c = Vec::new();
        if self.bold {
            c.push("ab".to_owned());
        }
        if self.dim {
            c.push("ad".to_owned());
        }
        if self.italic {
            c.push("ai".to_owned());
        }
        if self.underline {
            c.push("au".to_owned());
        }
        if let Some(n) = self.fg {
            c.push(format!("f{n}"));
        }
        if let Some(n) = self.bg {
            c.push(format!("g{n}"));
        }
        c.join(" ")
    }

    fn apply(&mut self, params: &str) {
        let codes: Vec<u16> = if params.is_empty() {
            vec![0]
        } else {
            params
                .split(';')
                .map(|p| p.parse::<u16>().unwrap_or(0))
                .collect()
        };
        let mut i = 0;
        while i < codes.len() {
            match codes[i] {
                0 => *self = Style::default(),
                1 => self.bold = true,
                2 => self.dim = true,
                3 => self.italic = true,
                4 => self.underline = true,
                22 => {
                    self.bold = false;
                    self.dim = false;
                }
                23 => self.italic = false,
                24 => self.underline = false,
                n @ 30..=37 => self.fg = Some((n - 30) as u8),
                n @ 90..=97 => self.fg = Some((n - 90 + 8) as u8),
                39 => self.fg = None,
                n @ 40..=47 => self.bg = Some((n - 40) as u8),
                n @ 100..=107 => self.bg = Some((n - 100 + 8) as u8),
                49 => self.bg = None,
                // 256-colour and true-colour forms: their arguments are skipped.
                38 | 48 => {
                    i += match codes.get(i + 1) {
                        Some(5) => 2,
                        Some(2) => 4,
                        _ => 0,
                    };
                }
                _ => {}
            }
            i += 1;
        }
    }
}

/// Escapes `text` for HTML (element content and attribute values).
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    escape_into(&mut out, text);
    out
}

pub(crate) fn escape_into(out: &mut String, text: &str) {
    for ch in text.chars() {
        match ch {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
}

/// `text` (with ANSI escapes) as escaped HTML with style spans.
pub fn to_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 64);
    let mut style = Style::default();
    let mut open = false;
    let mut rest = text;
    while let Some(pos) = rest.find('\u{1b}') {
        escape_into(&mut out, &rest[..pos]);
        let after = &rest[pos + 1..];
        let (consumed, sgr) = sequence(after);
        if let Some(params) = sgr {
            let before = style;
            style.apply(params);
            if style != before {
                if open {
                    out.push_str("</span>");
                    open = false;
                }
                let classes = style.classes();
                if !classes.is_empty() {
                    out.push_str("<span class=\"");
                    out.push_str(&classes);
                    out.push_str("\">");
                    open = true;
                }
            }
        }
        rest = &after[consumed..];
    }
    escape_into(&mut out, rest);
    if open {
        out.push_str("</span>");
    }
    out
}

/// The length of the escape sequence at the start of `s` (after the ESC), and the
/// parameters when it is an SGR (`[…m`).
fn sequence(s: &str) -> (usize, Option<&str>) {
    let bytes = s.as_bytes();
    match bytes.first() {
        Some(b'[') => {
            // CSI: parameter and intermediate bytes, then one final byte 0x40–0x7e.
            let mut i = 1;
            while i < bytes.len() && (0x20..=0x3f).contains(&bytes[i]) {
                i += 1;
            }
            if i < bytes.len() && (0x40..=0x7e).contains(&bytes[i]) {
                let params = &s[1..i];
                let sgr = (bytes[i] == b'm'
                    && params.bytes().all(|b| b.is_ascii_digit() || b == b';'))
                .then_some(params);
                (i + 1, sgr)
            } else {
                (i, None)
            }
        }
        // OSC: up to BEL or ESC \.
        Some(b']') => {
            let end = s
                .find('\u{7}')
                .map(|p| p + 1)
                .or_else(|| s.find("\u{1b}\\").map(|p| p + 2))
                .unwrap_or(s.len());
            (end, None)
        }
        Some(_) => (s.chars().next().map_or(0, char::len_utf8), None),
        None => (0, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_become_spans_and_text_is_escaped() {
        assert_eq!(
            to_html("\u{1b}[1;31mred <b>\u{1b}[0m plain & done"),
            "<span class=\"ab f1\">red &lt;b&gt;</span> plain &amp; done"
        );
        assert_eq!(
            to_html("\u{1b}[92mok\u{1b}[39m"),
            "<span class=\"f10\">ok</span>"
        );
        // 256-colour arguments are skipped, cursor moves and titles dropped.
        assert_eq!(
            to_html("\u{1b}[38;5;196mx\u{1b}[m\u{1b}[2K\u{1b}]0;title\u{7}y"),
            "xy"
        );
        assert_eq!(to_html("a\u{1b}"), "a");
    }
}
