//! Control characters in text that reaches a terminal: which a definition field may
//! hold ([`forbidden_control`]: tab and newline only in multi-line fields), how a human
//! view shows the rest ([`escape_controls`]: visibly, `\x1b`, so a stored description
//! cannot write the clipboard with OSC 52 or clear the screen), and how a run's own
//! output is let through to a terminal ([`TerminalFilter`]: its SGR colours only).
//!
//! A control character here is what [`char::is_control`] says: C0 (U+0000–U+001F),
//! DEL and C1 (U+0080–U+009F, which some terminals obey as CSI, OSC, …).

use std::borrow::Cow;

/// Which control characters a field may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lines {
    /// None: names, paths, options, a command run without a shell.
    One,
    /// Tab and newline: descriptions, shell command lines, arguments, env values.
    Many,
    /// Tab, newline and carriage return: prompts (a prompt file written on Windows).
    ManyCrlf,
}

impl Lines {
    fn allows(self, c: char) -> bool {
        match self {
            Lines::One => false,
            Lines::Many => matches!(c, '\t' | '\n'),
            Lines::ManyCrlf => matches!(c, '\t' | '\n' | '\r'),
        }
    }
}

/// The first control character of `text` that a field of this kind may not hold.
pub fn forbidden_control(text: &str, lines: Lines) -> Option<char> {
    text.chars().find(|&c| c.is_control() && !lines.allows(c))
}

/// `U+001B`: how a message names a control character (never the character itself).
pub fn code_point(c: char) -> String {
    format!("U+{:04X}", u32::from(c))
}

/// How a control character is shown: `\t`, `\n`, `\r`, `\x1b` (C0, DEL), `\u{9b}` (C1).
fn push_escape(out: &mut String, c: char) {
    match c {
        '\t' => out.push_str("\\t"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        c if u32::from(c) < 0x80 => out.push_str(&format!("\\x{:02x}", u32::from(c))),
        c => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
    }
}

/// `text` with every control character shown as an escape, but tab and newline when
/// `lines` is [`Lines::Many`] (or CR too, [`Lines::ManyCrlf`]): what every human view
/// prints of stored text, whatever validation let in (rows older than it included).
pub fn escape_controls(text: &str, lines: Lines) -> Cow<'_, str> {
    if forbidden_control(text, lines).is_none() {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() && !lines.allows(c) {
            push_escape(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Longest SGR sequence passed through (`ESC [ 38;2;255;255;255;48;… m`); a longer
/// one is shown escaped.
const MAX_SGR: usize = 64;

/// A run's output on its way to a terminal: SGR sequences (`ESC [ params m`, the
/// colours and styles programs print) pass; tab, newline and CR LF pass; every other
/// control character — ESC of any other sequence (OSC 52 writing the clipboard, OSC 0
/// the title, `ESC [2J`), BEL, a lone CR, C1 — and bytes that are not UTF-8 are shown
/// as escapes. Fed in pieces as they arrive ([`TerminalFilter::push`]): a sequence or
/// a character split between two pieces is held until the next one.
#[derive(Debug, Default)]
pub struct TerminalFilter {
    pending: Vec<u8>,
}

/// What the bytes at the start of a piece are.
enum Token {
    /// Pass these bytes.
    Pass(usize),
    /// Show these bytes as escapes.
    Escape(usize),
    /// Not decidable before more input.
    Incomplete,
}

fn token(bytes: &[u8], at_end: bool) -> Token {
    let b = bytes[0];
    match b {
        b'\t' | b'\n' => Token::Pass(1),
        b'\r' => match bytes.get(1) {
            Some(b'\n') => Token::Pass(2),
            None if !at_end => Token::Incomplete,
            _ => Token::Escape(1),
        },
        0x1b => sgr(bytes, at_end),
        0x00..=0x1f | 0x7f => Token::Escape(1),
        0x20..=0x7e => {
            let n = bytes
                .iter()
                .position(|&b| !(0x20..=0x7e).contains(&b))
                .unwrap_or(bytes.len());
            Token::Pass(n)
        }
        _ => utf8(bytes, at_end),
    }
}

/// `ESC [ [0-9;:]* m` passes; any other escape is shown.
fn sgr(bytes: &[u8], at_end: bool) -> Token {
    match bytes.get(1) {
        None if !at_end => return Token::Incomplete,
        Some(b'[') => {}
        _ => return Token::Escape(1),
    }
    for (i, &b) in bytes.iter().enumerate().skip(2) {
        if i > MAX_SGR {
            return Token::Escape(1);
        }
        match b {
            b'0'..=b'9' | b';' | b':' => {}
            b'm' => return Token::Pass(i + 1),
            _ => return Token::Escape(1),
        }
    }
    if at_end || bytes.len() > MAX_SGR {
        Token::Escape(1)
    } else {
        Token::Incomplete
    }
}

/// One UTF-8 character: passes unless it is a C1 control; an invalid byte is shown.
fn utf8(bytes: &[u8], at_end: bool) -> Token {
    let want = match bytes[0] {
        0xc2..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf4 => 4,
        _ => return Token::Escape(1),
    };
    if bytes.len() < want {
        // Incomplete only when what there is could still be the start of a character.
        let prefix_ok = bytes[1..].iter().all(|b| (0x80..=0xbf).contains(b));
        return if !at_end && prefix_ok {
            Token::Incomplete
        } else {
            Token::Escape(1)
        };
    }
    match std::str::from_utf8(&bytes[..want]) {
        Ok(s) if s.chars().any(char::is_control) => Token::Escape(want),
        Ok(_) => Token::Pass(want),
        Err(_) => Token::Escape(1),
    }
}

/// `bytes` as escapes: the characters they are, else each byte as `\xNN`.
fn escape_bytes(bytes: &[u8], out: &mut Vec<u8>) {
    let mut text = String::new();
    match std::str::from_utf8(bytes) {
        Ok(s) => s.chars().for_each(|c| push_escape(&mut text, c)),
        Err(_) => bytes
            .iter()
            .for_each(|b| text.push_str(&format!("\\x{b:02x}"))),
    }
    out.extend_from_slice(text.as_bytes());
}

impl TerminalFilter {
    /// Filters `input`, appending what the terminal may get to `out`; the end of a
    /// sequence or character cut at the end of `input` waits for the next piece.
    pub fn push(&mut self, input: &[u8], out: &mut Vec<u8>) {
        let mut data = std::mem::take(&mut self.pending);
        data.extend_from_slice(input);
        let rest = Self::run(&data, false, out);
        self.pending = data[rest..].to_vec();
    }

    /// Filters what is still held back (the output ended).
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        let data = std::mem::take(&mut self.pending);
        Self::run(&data, true, out);
    }

    /// Filters `data`; the offset of what must wait for more.
    fn run(data: &[u8], at_end: bool, out: &mut Vec<u8>) -> usize {
        let mut i = 0;
        while i < data.len() {
            match token(&data[i..], at_end) {
                Token::Pass(n) => {
                    out.extend_from_slice(&data[i..i + n]);
                    i += n;
                }
                Token::Escape(n) => {
                    escape_bytes(&data[i..i + n], out);
                    i += n;
                }
                Token::Incomplete => break,
            }
        }
        i
    }
}

/// [`TerminalFilter`] over a whole output at once.
pub fn for_terminal(bytes: &[u8]) -> Vec<u8> {
    let mut filter = TerminalFilter::default();
    let mut out = Vec::with_capacity(bytes.len());
    filter.push(bytes, &mut out);
    filter.finish(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_refuse_what_their_kind_does_not_allow() {
        assert_eq!(forbidden_control("plain text", Lines::One), None);
        assert_eq!(forbidden_control("a\tb", Lines::One), Some('\t'));
        assert_eq!(forbidden_control("a\n\tb", Lines::Many), None);
        assert_eq!(forbidden_control("a\r\nb", Lines::Many), Some('\r'));
        assert_eq!(forbidden_control("a\r\nb", Lines::ManyCrlf), None);
        for bad in ["\x1b[2J", "\x07", "\0", "\x7f", "\u{9b}31m", "\u{85}"] {
            assert!(forbidden_control(bad, Lines::ManyCrlf).is_some(), "{bad:?}");
        }
        assert_eq!(forbidden_control("ünïcödé ✓ \u{200f}", Lines::One), None);
        assert_eq!(code_point('\x1b'), "U+001B");
    }

    #[test]
    fn human_views_show_control_characters_escaped() {
        assert!(matches!(
            escape_controls("fine", Lines::One),
            Cow::Borrowed(_)
        ));
        assert_eq!(
            escape_controls("\x1b]52;c;eA==\x07x\ty\nz\u{9b}", Lines::One),
            "\\x1b]52;c;eA==\\x07x\\ty\\nz\\u{9b}"
        );
        assert_eq!(
            escape_controls("a\tb\nc\r\x1b", Lines::Many),
            "a\tb\nc\\r\\x1b"
        );
    }

    #[test]
    fn a_terminal_gets_colours_and_nothing_else() {
        let out = for_terminal(
            b"\x1b[31mred\x1b[0m \x1b[1;38;5;208mbold\x1b[m \x1b]0;title\x07 \x1b[2J \x1b[5A x\r\ny\rz\n",
        );
        assert_eq!(
            String::from_utf8(out).unwrap_or_default(),
            "\x1b[31mred\x1b[0m \x1b[1;38;5;208mbold\x1b[m \\x1b]0;title\\x07 \\x1b[2J \\x1b[5A x\r\ny\\rz\n"
        );
        // C1 controls (UTF-8 and raw), bytes that are not UTF-8, text kept.
        let out = for_terminal("é ✓ \u{9b}2J".as_bytes());
        assert_eq!(out, "é ✓ \\u{9b}2J".as_bytes());
        assert_eq!(for_terminal(b"a\x9bb\xffc"), b"a\\x9bb\\xffc");
        // An over-long SGR is not one.
        let long = format!("\x1b[{}m", "1;".repeat(40));
        assert!(for_terminal(long.as_bytes()).starts_with(b"\\x1b["));
    }

    #[test]
    fn pieces_cut_anywhere_filter_as_the_whole() {
        let whole: &[u8] = "\x1b[32mok\x1b[0m \x1b]52;c;x\x07 é✓ a\r\nb\r \u{9b}".as_bytes();
        let expected = for_terminal(whole);
        for cut in 0..=whole.len() {
            let mut f = TerminalFilter::default();
            let mut out = Vec::new();
            f.push(&whole[..cut], &mut out);
            f.push(&whole[cut..], &mut out);
            f.finish(&mut out);
            assert_eq!(out, expected, "cut at {cut}");
        }
        // Byte by byte.
        let mut f = TerminalFilter::default();
        let mut out = Vec::new();
        for b in whole {
            f.push(std::slice::from_ref(b), &mut out);
        }
        f.finish(&mut out);
        assert_eq!(out, expected);
    }
}
