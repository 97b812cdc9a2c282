//! Accounts (README, "Agent targets" → "Accounts"): running a target under an
//! OpenAccounts profile.
//!
//! When a target or step has `account {profile, tool}`, loops runs
//! `accounts env <profile> --tool <tool>` (the tool defaults to the agent's provider;
//! a command target must name one), reads its `export K=V` lines, removes the
//! inherited auth variables from the child's environment (tool config dirs,
//! `*_API_KEY`, `GH_TOKEN`, `GITHUB_TOKEN`, the `XDG_*_HOME` dirs), applies the
//! profile's variables and sets `LOOPS_ACCOUNT_PROFILE` / `LOOPS_ACCOUNT_TOOL`. The
//! profile directory must exist. Any failure is returned as a message and the caller
//! fails the run before the provider is ever spawned, so a prompt never reaches an
//! agent running under the wrong (or the daemon's own) credentials.
//!
//! Scrubbing matters because a daemon usually runs with its owner's environment: an
//! inherited `ANTHROPIC_API_KEY` or `CLAUDE_CONFIG_DIR` would silently win over the
//! profile's login for any variable the profile does not set.
//!
//! `export` lines are parsed with POSIX shell quoting (`'…'`, `"…"`, `\`, and bash's
//! `$'…'`), because the output is meant for `eval "$(accounts env …)"`: what a shell
//! would set is what the child gets. Variables are not expanded (`$HOME` stays
//! literal); `unset NAME` lines remove a variable; other lines are ignored.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use loops_core::Account;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use crate::env::{build_env, get, resolve_executable};

/// The OpenAccounts CLI.
pub const ACCOUNTS_EXECUTABLE: &str = "accounts";
/// Longest wait for `accounts env`; it reads local files and should answer at once.
pub const ACCOUNTS_TIMEOUT: Duration = Duration::from_secs(30);

/// Per-tool config directory variables: scrubbed from the inherited environment, and
/// the tool's own one names the profile directory in the `accounts env` output.
pub const TOOL_DIR_VARS: [(&str, &str); 7] = [
    ("claude", "CLAUDE_CONFIG_DIR"),
    ("codex", "CODEX_HOME"),
    ("codex-app", "CODEX_HOME"),
    ("codewith", "CODEWITH_HOME"),
    ("cursor", "CURSOR_CONFIG_DIR"),
    ("opencode", "OPENCODE_CONFIG_DIR"),
    ("aicopilot", "AICOPILOT_CONFIG_DIR"),
];

/// Most bytes kept from each stream of a helper process.
const MAX_CAPTURE: u64 = 1024 * 1024;
/// After a helper exits, how long to wait for pipes held open by its children.
const PIPE_GRACE: Duration = Duration::from_secs(1);

/// Whether an inherited variable carries credentials or points a tool at a config
/// directory, and so must not leak into a run under an account.
///
/// `XDG_RUNTIME_DIR` (and the `XDG_*_DIRS` search paths) stay: they hold sockets and
/// system defaults, not a user's logins, and removing the runtime dir breaks D-Bus.
pub fn is_inherited_auth_var(name: &str) -> bool {
    TOOL_DIR_VARS.iter().any(|(_, var)| *var == name)
        || name.ends_with("_API_KEY")
        || name == "GH_TOKEN"
        || name == "GITHUB_TOKEN"
        || (name.starts_with("XDG_") && name.ends_with("_HOME"))
}

/// The variable naming `tool`'s profile directory, if the tool is known.
pub fn tool_dir_var(tool: &str) -> Option<&'static str> {
    TOOL_DIR_VARS
        .iter()
        .find(|(t, _)| *t == tool)
        .map(|(_, var)| *var)
}

/// One effect of an `accounts env` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExportOp {
    Set(String, String),
    Unset(String),
}

/// Parses `accounts env` output: `export K=V …` and `unset K …` lines, shell-quoted.
/// Errors name the offending line by number and say what is wrong with it (an
/// unterminated quote, an invalid name), never quoting it: those lines carry
/// credentials, and the error becomes a run's `error`, which is shown everywhere.
pub fn parse_export_lines(text: &str) -> Result<Vec<ExportOp>, String> {
    let mut ops = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let words = shell_words(line).map_err(|e| format!("line {}: {e}", number + 1))?;
        let Some((first, rest)) = words.split_first() else {
            continue;
        };
        match first.as_str() {
            "export" => {
                for word in rest {
                    match word.split_once('=') {
                        Some((name, value)) if is_var_name(name) => {
                            ops.push(ExportOp::Set(name.to_owned(), value.to_owned()));
                        }
                        // `export NAME` marks an existing variable: nothing to set.
                        None if is_var_name(word) => {}
                        _ => {
                            return Err(format!(
                                "line {}: an export that is not NAME=VALUE",
                                number + 1
                            ))
                        }
                    }
                }
            }
            "unset" => {
                for word in rest.iter().filter(|w| !w.starts_with('-')) {
                    if !is_var_name(word) {
                        return Err(format!(
                            "line {}: an unset of something that is not a variable name",
                            number + 1
                        ));
                    }
                    ops.push(ExportOp::Unset(word.clone()));
                }
            }
            // Comments, messages and anything else a shell would not export.
            _ => {}
        }
    }
    Ok(ops)
}

fn is_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Splits one line into words the way a POSIX shell would (without expansion).
fn shell_words(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '#' if !in_word => break,
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err("unterminated single quote".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                // Inside double quotes a backslash escapes only these.
                let escaped = |e| matches!(e, '\\' | '"' | '$' | '`').then_some(e);
                quoted(&mut chars, &mut word, '"', escaped, "double quote")?;
            }
            '$' if chars.peek() == Some(&'\'') => {
                chars.next();
                in_word = true;
                quoted(&mut chars, &mut word, '\'', ansi_c_escape, "$'…' quote")?;
            }
            '\\' => {
                in_word = true;
                if let Some(next) = chars.next() {
                    word.push(next);
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

/// The rest of a quoted part of a word, up to its closing `close`, into `word`. A
/// backslash before a character that `escaped` maps stands for what it maps to; before
/// any other character it is kept, with the character. `what` names the quote in the
/// error for a missing `close`.
fn quoted(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    word: &mut String,
    close: char,
    escaped: impl Fn(char) -> Option<char>,
    what: &str,
) -> Result<(), String> {
    loop {
        match chars.next() {
            Some(c) if c == close => return Ok(()),
            Some('\\') => match chars.next() {
                Some(e) => match escaped(e) {
                    Some(c) => word.push(c),
                    None => {
                        word.push('\\');
                        word.push(e);
                    }
                },
                None => return Err(format!("unterminated {what}")),
            },
            Some(c) => word.push(c),
            None => return Err(format!("unterminated {what}")),
        }
    }
}

/// The escapes of bash's `$'…'` (what `printf %q` and `declare -p` emit for newlines).
fn ansi_c_escape(e: char) -> Option<char> {
    Some(match e {
        'n' => '\n',
        't' => '\t',
        'r' => '\r',
        'e' | 'E' => '\u{1b}',
        'a' => '\u{7}',
        'b' => '\u{8}',
        'f' => '\u{c}',
        'v' => '\u{b}',
        '\\' | '\'' | '"' | '?' => e,
        _ => return None,
    })
}

/// A profile whose environment has been fetched and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedAccount {
    pub profile: String,
    pub tool: String,
    /// The profile's directory (it exists).
    pub profile_dir: PathBuf,
    /// What `accounts env` asked for, in order.
    pub ops: Vec<ExportOp>,
}

impl ResolvedAccount {
    /// `base` (the inherited environment) with the auth variables removed, then the
    /// profile's variables applied, then `LOOPS_ACCOUNT_PROFILE` / `LOOPS_ACCOUNT_TOOL`.
    /// Target `env` and run metadata are layered on top later by
    /// [`crate::env::build_env`].
    pub fn apply(&self, base: impl IntoIterator<Item = (String, String)>) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = base
            .into_iter()
            .filter(|(name, _)| !is_inherited_auth_var(name))
            .collect();
        for op in &self.ops {
            match op {
                ExportOp::Set(name, value) => set(&mut env, name, value),
                ExportOp::Unset(name) => env.retain(|(k, _)| k != name),
            }
        }
        for (name, value) in self.metadata() {
            set(&mut env, name, &value);
        }
        env
    }

    /// `LOOPS_ACCOUNT_PROFILE` and `LOOPS_ACCOUNT_TOOL`, to be set last (with the run's
    /// other `LOOPS_*` metadata) so a target's `env` cannot disguise the account.
    pub fn metadata(&self) -> [(&'static str, String); 2] {
        [
            ("LOOPS_ACCOUNT_PROFILE", self.profile.clone()),
            ("LOOPS_ACCOUNT_TOOL", self.tool.clone()),
        ]
    }
}

fn set(env: &mut Vec<(String, String)>, name: &str, value: &str) {
    match env.iter_mut().find(|(k, _)| k == name) {
        Some(entry) => value.clone_into(&mut entry.1),
        None => env.push((name.to_owned(), value.to_owned())),
    }
}

/// Runs `accounts env <profile> --tool <tool>` with `env` (the inherited environment;
/// its PATH is extended with the user bin dirs under its `HOME`, like a child's) and
/// checks the result. `tool_hint` is the provider's tool, used when the account names
/// none. Blocks for at most [`ACCOUNTS_TIMEOUT`].
pub fn resolve(
    account: &Account,
    tool_hint: Option<&str>,
    env: &[(String, String)],
) -> Result<ResolvedAccount, String> {
    let profile = account.profile.as_str();
    let tool = account
        .tool
        .as_deref()
        .or(tool_hint)
        .ok_or_else(|| {
            format!("account {profile}: no tool given and none can be inferred from the target (set account.tool)")
        })?;
    let who = format!("{profile}/{tool}");
    let home = get(env, "HOME").map(PathBuf::from);
    let lookup_env = build_env(
        env.iter().cloned(),
        home.as_deref(),
        &Default::default(),
        &[],
    );
    let exe = resolve_executable(ACCOUNTS_EXECUTABLE, &lookup_env).ok_or_else(|| {
        format!("account {who}: Executable not found in PATH: {ACCOUNTS_EXECUTABLE}")
    })?;
    let mut cmd = Command::new(&exe);
    cmd.args(["env", profile, "--tool", tool])
        .env_clear()
        .envs(lookup_env.iter().map(|(k, v)| (k, v)));
    let captured = run_with_timeout(cmd, ACCOUNTS_TIMEOUT).map_err(|e| match e {
        HelperError::Spawn(e) => format!("failed to run accounts env for {who}: {e}"),
        HelperError::TimedOut => format!(
            "accounts env for {who} did not answer within {}s",
            ACCOUNTS_TIMEOUT.as_secs()
        ),
    })?;
    if !captured.status.success() {
        // What it printed is not quoted: the helper's output may hold credentials, and
        // this message becomes the run's error, shown wherever runs are.
        let status = captured
            .status
            .code()
            .map_or_else(|| captured.status.to_string(), |c| format!("status {c}"));
        return Err(if captured.stderr.trim().is_empty() {
            format!("accounts env failed for {who} ({status})")
        } else {
            format!(
                "accounts env failed for {who} ({status}); run `accounts env {profile} --tool {tool}` to see what it says"
            )
        });
    }
    let ops = parse_export_lines(&captured.stdout)
        .map_err(|e| format!("accounts env for {who} printed an unreadable {e}"))?;
    // The tool's own directory variable names the profile; tools loops does not know
    // follow the OpenAccounts convention of exporting the directory first.
    let dir = tool_dir_var(tool)
        .and_then(|var| {
            ops.iter().rev().find_map(|op| match op {
                ExportOp::Set(name, value) if name == var => Some(value.clone()),
                _ => None,
            })
        })
        .or_else(|| {
            ops.iter().find_map(|op| match op {
                ExportOp::Set(_, value) => Some(value.clone()),
                ExportOp::Unset(_) => None,
            })
        })
        .filter(|d| !d.is_empty())
        .ok_or_else(|| format!("accounts env returned no profile directory for {who}"))?;
    let profile_dir = PathBuf::from(dir);
    if !profile_dir.is_dir() {
        return Err(format!(
            "account profile directory does not exist for {who}: {}",
            profile_dir.display()
        ));
    }
    Ok(ResolvedAccount {
        profile: profile.to_owned(),
        tool: tool.to_owned(),
        profile_dir,
        ops,
    })
}

/// [`resolve`] and [`ResolvedAccount::apply`] in one step: the environment a process
/// running under `account` inherits (before the target's own `env` and the run
/// metadata are added).
pub fn account_env(
    account: &Account,
    tool_hint: Option<&str>,
    base_env: Vec<(String, String)>,
) -> Result<Vec<(String, String)>, String> {
    let resolved = resolve(account, tool_hint, &base_env)?;
    Ok(resolved.apply(base_env))
}

/// A helper process's output.
#[derive(Debug)]
pub(crate) struct Captured {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Why a helper process gave no answer.
#[derive(Debug)]
pub(crate) enum HelperError {
    Spawn(std::io::Error),
    TimedOut,
}

/// Runs a short helper (`accounts env`, `<cli> --version`) synchronously with stdin
/// closed, capturing output; after `timeout` its process group is killed. Used where
/// the caller is synchronous (target preparation, preflight, doctor).
pub(crate) fn run_with_timeout(
    mut cmd: Command,
    timeout: Duration,
) -> Result<Captured, HelperError> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group, so a timeout also reaches anything it started.
        .process_group(0);
    let mut child = cmd.spawn().map_err(HelperError::Spawn)?;
    let stdout = reader(child.stdout.take());
    let stderr = reader(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) | Err(_) => {
                if let Ok(pid) = i32::try_from(child.id()) {
                    let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
                }
                let _ = child.kill();
                let _ = child.wait();
                return Err(HelperError::TimedOut);
            }
        }
    };
    Ok(Captured {
        status,
        stdout: stdout.recv_timeout(PIPE_GRACE).unwrap_or_default(),
        stderr: stderr.recv_timeout(PIPE_GRACE).unwrap_or_default(),
    })
}

/// Reads a pipe to its end on a thread (so neither pipe can fill up and block the
/// child); the text arrives on the returned channel.
fn reader(pipe: Option<impl Read + Send + 'static>) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(pipe) = pipe {
            let _ = pipe.take(MAX_CAPTURE).read_to_end(&mut bytes);
        }
        let _ = tx.send(String::from_utf8_lossy(&bytes).into_owned());
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(name: &str, value: &str) -> ExportOp {
        ExportOp::Set(name.into(), value.into())
    }

    #[test]
    fn parses_shell_quoting() {
        let text = r#"
# comment
export CLAUDE_CONFIG_DIR='/home/u/.accounts/work claude'
export A="x \"y\" \$z \n" B=plain\ word
export C=$'line1\nit\'s'
export D='it'\''s'
unset GH_TOKEN
echo "switched"
export KEEP
"#;
        assert_eq!(
            parse_export_lines(text).unwrap(),
            vec![
                set("CLAUDE_CONFIG_DIR", "/home/u/.accounts/work claude"),
                set("A", "x \"y\" $z \\n"),
                set("B", "plain word"),
                set("C", "line1\nit's"),
                set("D", "it's"),
                ExportOp::Unset("GH_TOKEN".into()),
            ]
        );
    }

    #[test]
    fn rejects_broken_lines() {
        assert!(parse_export_lines("export A='open")
            .unwrap_err()
            .contains("line 1"));
        assert!(parse_export_lines("export 1A=x").is_err());
        assert!(parse_export_lines("export A=\"open").is_err());
        // The lines hold credentials: an error names the line, never quotes it.
        for broken in [
            "export TOKEN='sk-SECRET",
            "export TOKEN=\"sk-SECRET",
            "export sk-SECRET",
            "unset sk-SECRET",
            "export 1sk-SECRET=x",
        ] {
            let e = parse_export_lines(&format!("# ok\n{broken}")).unwrap_err();
            assert!(e.starts_with("line 2: "), "{e}");
            assert!(!e.contains("SECRET"), "{e}");
        }
    }

    #[test]
    fn scrubs_auth_variables_then_applies_the_profile() {
        let resolved = ResolvedAccount {
            profile: "work".into(),
            tool: "claude".into(),
            profile_dir: "/p".into(),
            ops: vec![
                set("CLAUDE_CONFIG_DIR", "/p"),
                set("XDG_CONFIG_HOME", "/p/xdg"),
            ],
        };
        let base = [
            ("PATH", "/bin"),
            ("ANTHROPIC_API_KEY", "daemon-key"),
            ("OPENROUTER_API_KEY", "k"),
            ("GH_TOKEN", "t"),
            ("GITHUB_TOKEN", "t"),
            ("CODEX_HOME", "/daemon/codex"),
            ("CLAUDE_CONFIG_DIR", "/daemon/claude"),
            ("XDG_CONFIG_HOME", "/daemon/cfg"),
            ("XDG_CACHE_HOME", "/daemon/cache"),
            ("XDG_RUNTIME_DIR", "/run/user/1"),
            ("LOOPS_ACCOUNT_PROFILE", "spoofed"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()));
        let env = resolved.apply(base);
        let get = |k: &str| crate::env::get(&env, k).map(str::to_owned);
        assert_eq!(get("PATH").as_deref(), Some("/bin"));
        for gone in [
            "ANTHROPIC_API_KEY",
            "OPENROUTER_API_KEY",
            "GH_TOKEN",
            "GITHUB_TOKEN",
            "CODEX_HOME",
            "XDG_CACHE_HOME",
        ] {
            assert_eq!(get(gone), None, "{gone} leaked");
        }
        assert_eq!(get("CLAUDE_CONFIG_DIR").as_deref(), Some("/p"));
        assert_eq!(get("XDG_CONFIG_HOME").as_deref(), Some("/p/xdg"));
        assert_eq!(get("XDG_RUNTIME_DIR").as_deref(), Some("/run/user/1"));
        assert_eq!(get("LOOPS_ACCOUNT_PROFILE").as_deref(), Some("work"));
        assert_eq!(get("LOOPS_ACCOUNT_TOOL").as_deref(), Some("claude"));
    }

    #[test]
    fn helper_timeout_kills_the_group() {
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", "sleep 30 & sleep 30"]);
        let started = Instant::now();
        assert!(matches!(
            run_with_timeout(cmd, Duration::from_millis(200)),
            Err(HelperError::TimedOut)
        ));
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
