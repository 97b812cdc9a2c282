//! Validation of user-supplied loop definitions. Every message names the offending
//! field and value, so a bad flag or JSON field is fixed in one try. Sizes are checked
//! against [`crate::limits`] here too, so no front end (or library caller) can store an
//! unbounded prompt, command or environment.

use crate::limits::{self, MAX_FIELD_BYTES};
pub use crate::text::Lines;
use crate::{Account, AgentTarget, CommandTarget, Notify, Provider, Schedule, Target};
use std::collections::BTreeMap;
use std::path::Path;

/// A rejected definition, with a message meant for the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ValidationError(pub String);

fn invalid<T>(message: impl Into<String>) -> Result<T, ValidationError> {
    Err(ValidationError(message.into()))
}

/// A flag's value that must be one of `choices` (each word with what it means):
/// anything else is refused as `invalid FLAG "x": expected one of a, b, c`, the one
/// message of every choice flag.
pub fn one_of<T: Copy>(flag: &str, text: &str, choices: &[(&str, T)]) -> Result<T, String> {
    match choices.iter().find(|(word, _)| *word == text) {
        Some((_, value)) => Ok(*value),
        None => {
            let words: Vec<&str> = choices.iter().map(|(word, _)| *word).collect();
            Err(format!(
                "invalid {flag} {text:?}: expected one of {}",
                words.join(", ")
            ))
        }
    }
}

/// A character of a plain name (an account profile in a cap, a provider option's
/// word): an ASCII letter or digit, '.', '_' or '-'. One alphabet for both.
pub fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// Refuses a control character in `text` unless `lines` allows it (tab and newline in
/// multi-line fields): stored text reaches terminals (`show`, `list`, logs), where ESC
/// and BEL would act (OSC 52 writes the clipboard). The message names the character by
/// its code point, never echoes it.
pub fn no_controls(
    what: &str,
    text: &str,
    lines: Lines,
    label: &str,
) -> Result<(), ValidationError> {
    let Some(c) = crate::text::forbidden_control(text, lines) else {
        return Ok(());
    };
    let allowed = match lines {
        Lines::One => "",
        Lines::Many => "; only tab and newline may be used",
        Lines::ManyCrlf => "; only tab, newline and carriage return may be used",
    };
    invalid(format!(
        "{label}: {what} contains a control character ({}){allowed}",
        crate::text::code_point(c)
    ))
}

/// Checks a loop name: non-empty, printable, no leading/trailing whitespace.
pub fn loop_name(name: &str) -> Result<(), ValidationError> {
    if name.trim().is_empty() {
        return invalid("loop name is empty");
    }
    if name.trim() != name {
        return invalid(format!(
            "loop name {name:?} has leading or trailing whitespace"
        ));
    }
    if name.chars().any(char::is_control) {
        return invalid(format!("loop name {name:?} contains control characters"));
    }
    if name.len() > 200 {
        return invalid("loop name is longer than 200 bytes");
    }
    Ok(())
}

/// Whether `text` has the shape of a record id: exactly 12 lowercase hex characters
/// (what the store generates). Such names are refused, so a name never shadows an id.
pub fn is_id_shaped(text: &str) -> bool {
    text.len() == ID_LEN && is_lower_hex(text)
}

/// Length of the ids the store generates.
pub const ID_LEN: usize = 12;

/// Whether `text` is non-empty and all lowercase hex digits: the only names that can be
/// confused with an id prefix.
pub fn is_lower_hex(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Checks a description (of a loop, workflow or step): at most
/// [`limits::MAX_DESCRIPTION_BYTES`].
pub fn description(text: Option<&str>, label: &str) -> Result<(), ValidationError> {
    let len = text.map_or(0, str::len);
    limits::check("description", len, limits::MAX_DESCRIPTION_BYTES)
        .or_else(|e| invalid(format!("{label}: {e}")))?;
    no_controls("description", text.unwrap_or(""), Lines::Many, label)
}

/// A short one-line text field: at most [`MAX_FIELD_BYTES`], no control character.
fn field(name: &str, value: Option<&str>, label: &str) -> Result<(), ValidationError> {
    let len = value.map_or(0, str::len);
    limits::check(name, len, MAX_FIELD_BYTES).or_else(|e| invalid(format!("{label}: {e}")))?;
    no_controls(name, value.unwrap_or(""), Lines::One, label)
}

/// A working directory: stored absolute, so a run never depends on where its runner
/// was started (front ends resolve what the user typed before validation).
fn cwd(value: Option<&str>, label: &str) -> Result<(), ValidationError> {
    let Some(dir) = value else { return Ok(()) };
    if dir.trim().is_empty() {
        return invalid(format!("{label}: cwd is empty"));
    }
    field("cwd", Some(dir), label)?;
    if !Path::new(dir).is_absolute() {
        return invalid(format!("{label}: cwd {dir:?} is not an absolute path"));
    }
    Ok(())
}

/// Longest label, in bytes.
pub const MAX_LABEL_BYTES: usize = 64;
/// Most labels on one loop.
pub const MAX_LABELS: usize = 32;

/// Checks one label: `[a-z0-9][a-z0-9._-]*`, at most 64 bytes.
pub fn label(label: &str) -> Result<(), ValidationError> {
    let mut chars = label.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c));
    if !first_ok || !rest_ok {
        return invalid(format!(
            "invalid label {label:?}: use lowercase letters, digits, '.', '_' and '-', starting with a letter or digit"
        ));
    }
    if label.len() > MAX_LABEL_BYTES {
        return invalid(format!(
            "label {label:?} is longer than {MAX_LABEL_BYTES} bytes"
        ));
    }
    Ok(())
}

/// Checks labels and returns them sorted, each once (a repeated label is harmless).
pub fn labels(labels: &[String]) -> Result<Vec<String>, ValidationError> {
    for l in labels {
        label(l)?;
    }
    let mut out: Vec<String> = labels.to_vec();
    out.sort();
    out.dedup();
    if out.len() > MAX_LABELS {
        return invalid(format!("a loop has at most {MAX_LABELS} labels"));
    }
    Ok(out)
}

/// Longest notification URL, in bytes.
pub const MAX_URL_BYTES: usize = 2048;

/// Checks notification settings: a command and/or an `http(s)://host…` URL.
pub fn notify(n: &Notify, label: &str) -> Result<(), ValidationError> {
    if n.cmd.is_none() && n.url.is_none() {
        return invalid(format!(
            "{label}: notifications need a command (--notify-cmd) or a URL (--notify-url)"
        ));
    }
    if let Some(cmd) = &n.cmd {
        if cmd.trim().is_empty() {
            return invalid(format!("{label}: --notify-cmd is empty"));
        }
        if cmd.len() > limits::MAX_COMMAND_BYTES {
            return invalid(format!(
                "{label}: --notify-cmd is longer than {} bytes",
                limits::MAX_COMMAND_BYTES
            ));
        }
        if cmd.contains('\0') {
            return invalid(format!("{label}: --notify-cmd contains a NUL byte"));
        }
        no_controls("--notify-cmd", cmd, Lines::Many, label)?;
    }
    if let Some(url) = &n.url {
        url_field(url, label)?;
    }
    Ok(())
}

fn url_field(url: &str, label: &str) -> Result<(), ValidationError> {
    if url.len() > MAX_URL_BYTES {
        return invalid(format!(
            "{label}: --notify-url is longer than {MAX_URL_BYTES} bytes"
        ));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return invalid(format!(
            "{label}: --notify-url {url:?} contains whitespace or control characters"
        ));
    }
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| {
            ValidationError(format!(
                "{label}: --notify-url {url:?} is not an http:// or https:// URL"
            ))
        })?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit('@').next().unwrap_or("");
    if host.is_empty() || host.starts_with(':') {
        return invalid(format!("{label}: --notify-url {url:?} has no host"));
    }
    Ok(())
}

/// Longest jitter for schedules without a period of their own (cron, once): a day.
pub const MAX_JITTER_MS: u64 = 86_400_000;

/// Checks a jitter against the schedule: shorter than an interval's period (or a
/// dynamic loop's minimum interval), else at most a day.
pub fn jitter(schedule: &Schedule, jitter_ms: u64) -> Result<(), ValidationError> {
    let (limit, what) = match schedule {
        Schedule::Interval { every_ms, .. } => (*every_ms, "its --every"),
        Schedule::Dynamic { min_interval_ms } => (*min_interval_ms, "its --dynamic interval"),
        Schedule::Cron { .. } | Schedule::Once { .. } => (MAX_JITTER_MS + 1, "a day"),
    };
    if jitter_ms >= limit {
        let shown = |ms: u64| {
            crate::Duration::from_millis(ms).map_or_else(|| format!("{ms}ms"), |d| d.to_string())
        };
        return invalid(format!(
            "--jitter {} must be shorter than {what} ({})",
            shown(jitter_ms),
            shown(limit.min(MAX_JITTER_MS))
        ));
    }
    Ok(())
}

/// Checks a loop's agent-operations settings (README, "Agent operations") against
/// its retry delay.
pub fn ops(ops: &crate::LoopOps, retry_delay_ms: u64) -> Result<(), ValidationError> {
    let shown = |ms: u64| {
        crate::Duration::from_millis(ms).map_or_else(|| format!("{ms}ms"), |d| d.to_string())
    };
    if ops.retry_delay_max_ms < retry_delay_ms {
        return invalid(format!(
            "--retry-delay-max {} is shorter than --retry-delay {}",
            shown(ops.retry_delay_max_ms),
            shown(retry_delay_ms)
        ));
    }
    if ops.max_failures == Some(0) {
        return invalid("--max-failures must be at least 1");
    }
    if ops.max_runs == Some(0) {
        return invalid("--max-runs must be at least 1");
    }
    if let Some(cmd) = &ops.until_cmd {
        if cmd.trim().is_empty() {
            return invalid("--until-cmd is empty");
        }
        no_controls("--until-cmd", cmd, Lines::Many, "loop")?;
        limits::check("--until-cmd", cmd.len(), limits::MAX_COMMAND_BYTES)
            .map_err(ValidationError)?;
    }
    if let Some(pattern) = &ops.until_output {
        no_controls("--until-output", pattern, Lines::One, "loop")?;
        crate::stop::compile(pattern).map_err(ValidationError)?;
    }
    Ok(())
}

/// Budgets are for agent loops: only an agent's runs report usage.
pub fn budgets(ops: &crate::LoopOps, target: &Target) -> Result<(), ValidationError> {
    if matches!(target, Target::Agent(_)) {
        return Ok(());
    }
    for (set, flag) in [
        (ops.budget_tokens.is_some(), "--budget-tokens"),
        (ops.budget_usd.is_some(), "--budget-usd"),
    ] {
        if set {
            return invalid(format!(
                "{flag} is for agent loops (a {} loop reports no usage)",
                target.kind()
            ));
        }
    }
    Ok(())
}

/// Checks a target of any kind. `label` prefixes messages (e.g. `step "build"`).
pub fn target(target: &Target, label: &str) -> Result<(), ValidationError> {
    match target {
        Target::Command(t) => command(t, label),
        Target::Agent(t) => agent(t, label),
        Target::Workflow(t) => {
            if t.workflow.trim().is_empty() {
                return invalid(format!("{label}: workflow name is empty"));
            }
            field("workflow name", Some(&t.workflow), label)?;
            for (name, value) in &t.params {
                crate::workflow_params::check_given(name, value)
                    .map_err(|e| ValidationError(format!("{label}: {e}")))?;
            }
            Ok(())
        }
    }
}

/// A command needs a non-empty executable; without a shell it must be a single word.
pub fn command(t: &CommandTarget, label: &str) -> Result<(), ValidationError> {
    let cmd = t.command.trim();
    if cmd.is_empty() {
        return invalid(format!("{label}: command is empty"));
    }
    if !t.shell && cmd.contains(char::is_whitespace) {
        return invalid(format!(
            "{label}: command {:?} contains whitespace but does not run in a shell; put flags in args or set shell true",
            t.command
        ));
    }
    let argv_len = t.command.len() + t.args.iter().map(String::len).sum::<usize>();
    limits::check(
        "command line (command and arguments)",
        argv_len,
        limits::MAX_COMMAND_BYTES,
    )
    .or_else(|e| invalid(format!("{label}: {e}")))?;
    if t.command.contains('\0') || t.args.iter().any(|a| a.contains('\0')) {
        return invalid(format!("{label}: command or arguments contain a NUL byte"));
    }
    // A shell command line may be a script of several lines; a program's name not.
    let lines = if t.shell { Lines::Many } else { Lines::One };
    no_controls("command", &t.command, lines, label)?;
    for (i, arg) in t.args.iter().enumerate() {
        no_controls(&format!("args[{i}]"), arg, Lines::Many, label)?;
    }
    cwd(t.cwd.as_deref(), label)?;
    if let Some(account) = &t.account {
        account_fields(account, label)?;
        // Agents default the tool to their provider; a bare command has no such hint.
        if account.tool.is_none() {
            return invalid(format!(
                "{label}: account {:?} needs a tool for a command target (--account-tool, e.g. claude)",
                account.profile
            ));
        }
    }
    env(&t.env, label)
}

/// Agent targets: a prompt, and only the options the chosen provider understands.
pub fn agent(t: &AgentTarget, label: &str) -> Result<(), ValidationError> {
    if t.prompt.trim().is_empty() {
        return invalid(format!("{label}: prompt is empty"));
    }
    limits::check("prompt", t.prompt.len(), limits::MAX_PROMPT_BYTES)
        .or_else(|e| invalid(format!("{label}: {e}")))?;
    no_controls("prompt", &t.prompt, Lines::ManyCrlf, label)?;
    if t.provider == Provider::Codex && t.agent.is_some() {
        return invalid(format!("{label}: provider codex has no --agent option"));
    }
    if t.auth_profile.is_some() && t.provider != Provider::Codewith {
        return invalid(format!(
            "{label}: --auth-profile is only supported by provider codewith, not {}",
            t.provider
        ));
    }
    if crate::session::continues(t.session) && !crate::session::can_resume(t.provider) {
        return invalid(format!(
            "{label}: --session continue is supported by providers {}, not {} (it has no resume option we could check)",
            crate::session::RESUMING_PROVIDERS,
            t.provider
        ));
    }
    if t.provider == Provider::Opencode && t.model.as_deref().is_none_or(|m| m.trim().is_empty()) {
        return invalid(format!(
            "{label}: provider opencode needs --model provider/model (without it opencode retries forever)"
        ));
    }
    for (name, value) in [
        ("model", &t.model),
        ("agent", &t.agent),
        ("authProfile", &t.auth_profile),
        ("promptFile", &t.prompt_file),
    ] {
        if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
            return invalid(format!("{label}: {name} is empty"));
        }
        field(name, value.as_deref(), label)?;
    }
    cwd(t.cwd.as_deref(), label)?;
    config_overrides(t, label)?;
    crate::provider_options::validate(t, label)?;
    if let Some(account) = &t.account {
        account_fields(account, label)?;
    }
    account_pool(t, label)?;
    env(&t.env, label)
}

/// An account pool names two or more distinct profiles, each as `account` would, and
/// replaces `account` (the run records which one it took).
fn account_pool(t: &AgentTarget, label: &str) -> Result<(), ValidationError> {
    if t.account_pool.is_empty() {
        return Ok(());
    }
    if t.account.is_some() {
        return invalid(format!(
            "{label}: account and accountPool are mutually exclusive"
        ));
    }
    for (i, profile) in t.account_pool.iter().enumerate() {
        let account = Account {
            profile: profile.clone(),
            tool: None,
        };
        account_fields(&account, label)?;
        if t.account_pool[..i].contains(profile) {
            return invalid(format!(
                "{label}: account {profile:?} is in the account pool twice"
            ));
        }
    }
    Ok(())
}

/// `configOverrides` become `-c key=value` for codex-shaped CLIs only; keys are dotted
/// config paths, so none can pass for a flag.
fn config_overrides(t: &AgentTarget, label: &str) -> Result<(), ValidationError> {
    if t.config_overrides.is_empty() {
        return Ok(());
    }
    if !matches!(t.provider, Provider::Codex | Provider::Codewith) {
        return invalid(format!(
            "{label}: config overrides are only supported by providers codex and codewith, not {}",
            t.provider
        ));
    }
    let total: usize = t
        .config_overrides
        .iter()
        .map(|(k, v)| k.len() + v.len() + 1)
        .sum();
    limits::check("configOverrides", total, limits::MAX_COMMAND_BYTES)
        .or_else(|e| invalid(format!("{label}: {e}")))?;
    for (key, value) in &t.config_overrides {
        let valid_key = !key.is_empty()
            && key.split('.').all(|segment| {
                !segment.is_empty()
                    && segment
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            })
            && !key.starts_with('-');
        if !valid_key {
            return invalid(format!(
                "{label}: invalid config override key {key:?}: expected a dotted path like model_providers.mock.base_url"
            ));
        }
        map_value(&format!("config override {key:?}"), value, label)?;
    }
    Ok(())
}

/// A value of a key → value map a child process receives (an environment variable, a
/// config override): no NUL byte and no control character but tab and newline, each
/// refusal naming `what` (`environment variable "K"`).
fn map_value(what: &str, value: &str, label: &str) -> Result<(), ValidationError> {
    if value.contains('\0') {
        return invalid(format!("{label}: {what} contains a NUL byte"));
    }
    no_controls(what, value, Lines::Many, label)
}

fn account_fields(account: &Account, label: &str) -> Result<(), ValidationError> {
    if account.profile.trim().is_empty() {
        return invalid(format!("{label}: account profile is empty"));
    }
    field("account profile", Some(&account.profile), label)?;
    field("account tool", account.tool.as_deref(), label)?;
    // Both end up as argv words of `accounts env <profile> --tool <tool>`.
    if account.profile.starts_with('-') {
        return invalid(format!(
            "{label}: account profile {:?} must not start with '-'",
            account.profile
        ));
    }
    if let Some(tool) = &account.tool {
        if tool.trim().is_empty() || tool.starts_with('-') {
            return invalid(format!("{label}: invalid account tool {tool:?}"));
        }
    }
    Ok(())
}

/// Environment variables: valid names, values without NUL bytes, each value at most
/// [`limits::MAX_ENV_VALUE_BYTES`] and all of them at most [`limits::MAX_ENV_BYTES`].
fn env(vars: &BTreeMap<String, String>, label: &str) -> Result<(), ValidationError> {
    let mut total = 0;
    for (key, value) in vars {
        let valid = !key.is_empty()
            && !key.starts_with(|c: char| c.is_ascii_digit())
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return invalid(format!(
                "{label}: invalid environment variable name {key:?}"
            ));
        }
        let what = format!("environment variable {key:?}");
        map_value(&what, value, label)?;
        limits::check(&what, value.len(), limits::MAX_ENV_VALUE_BYTES)
            .or_else(|e| invalid(format!("{label}: {e}")))?;
        total += key.len() + value.len() + 1;
    }
    limits::check("environment", total, limits::MAX_ENV_BYTES)
        .or_else(|e| invalid(format!("{label}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ConfigIsolation;
    use std::collections::BTreeMap;

    fn cmd(command: &str, shell: bool) -> CommandTarget {
        CommandTarget {
            command: command.into(),
            args: vec![],
            cwd: None,
            shell,
            env: BTreeMap::new(),
            timeout: None,
            idle_timeout: None,
            account: None,
        }
    }

    fn agent_target(provider: Provider) -> AgentTarget {
        AgentTarget {
            provider,
            prompt: "do it".into(),
            prompt_file: None,
            cwd: None,
            model: None,
            agent: None,
            auth_profile: None,
            config_isolation: ConfigIsolation::Safe,
            config_overrides: BTreeMap::new(),
            env: BTreeMap::new(),
            timeout: None,
            idle_timeout: None,
            account: None,
            account_pool: Vec::new(),
            session: crate::SessionMode::DEFAULT,
            permission_mode: None,
            sandbox: None,
            effort: None,
            variant: None,
            add_dirs: Vec::new(),
            max_turns: None,
            allow_tools: Vec::new(),
            deny_tools: Vec::new(),
        }
    }

    #[test]
    fn command_with_spaces_needs_a_shell() {
        assert!(command(&cmd("git status", true), "loop").is_ok());
        let err = command(&cmd("git status", false), "loop").unwrap_err();
        assert!(
            err.0.contains("put flags in args or set shell true"),
            "{err}"
        );
        assert!(command(&cmd("  ", true), "loop").is_err());
    }

    #[test]
    fn provider_specific_rules() {
        let mut t = agent_target(Provider::Codex);
        t.agent = Some("x".into());
        assert!(agent(&t, "loop")
            .unwrap_err()
            .0
            .contains("codex has no --agent"));
        let mut t = agent_target(Provider::Claude);
        t.auth_profile = Some("p".into());
        assert!(agent(&t, "loop").is_err());
        assert!(agent(&agent_target(Provider::Opencode), "loop").is_err());
        let mut t = agent_target(Provider::Claude);
        t.prompt = " \n".into();
        assert_eq!(agent(&t, "loop").unwrap_err().0, "loop: prompt is empty");
    }

    #[test]
    fn config_overrides_only_for_codex_shaped_providers() {
        let mut t = agent_target(Provider::Codex);
        t.config_overrides.insert(
            "model_providers.mock.base_url".into(),
            "\"http://x\"".into(),
        );
        assert!(agent(&t, "loop").is_ok());
        t.provider = Provider::Codewith;
        assert!(agent(&t, "loop").is_ok());
        t.provider = Provider::Claude;
        assert!(agent(&t, "loop")
            .unwrap_err()
            .0
            .contains("only supported by providers codex and codewith"));
        for bad in ["", "-c", "a..b", ".a", "a b", "a=b"] {
            let mut t = agent_target(Provider::Codex);
            t.config_overrides.insert(bad.into(), "1".into());
            assert!(agent(&t, "loop").is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn accounts_need_a_profile_and_commands_a_tool() {
        let account = |profile: &str, tool: Option<&str>| {
            Some(Account {
                profile: profile.into(),
                tool: tool.map(Into::into),
            })
        };
        let mut t = agent_target(Provider::Claude);
        t.account = account("work", None);
        assert!(agent(&t, "loop").is_ok());
        t.account = account(" ", None);
        assert!(agent(&t, "loop").is_err());
        t.account = account("--help", None);
        assert!(agent(&t, "loop").is_err());
        let mut c = cmd("gh pr list", true);
        c.account = account("work", None);
        assert!(command(&c, "loop").unwrap_err().0.contains("needs a tool"));
        c.account = account("work", Some("gh"));
        assert!(command(&c, "loop").is_ok());
    }

    #[test]
    fn empty_optional_agent_fields_are_rejected() {
        let mut t = agent_target(Provider::Claude);
        t.model = Some(" ".into());
        assert_eq!(agent(&t, "loop").unwrap_err().0, "loop: model is empty");
    }

    #[test]
    fn id_shaped_names() {
        assert!(is_id_shaped("0d410cf0c607"));
        assert!(!is_id_shaped("0D410CF0C607"), "ids are lowercase");
        assert!(!is_id_shaped("0d410cf0c60"), "too short");
        assert!(!is_id_shaped("0d410cf0c6070"), "too long");
        assert!(!is_id_shaped("0d410cf0c60g"));
        assert!(is_lower_hex("cafe"));
        assert!(!is_lower_hex("backup"));
        assert!(!is_lower_hex(""));
    }

    #[test]
    fn sizes_are_bounded() {
        use crate::limits::*;
        let mut t = agent_target(Provider::Claude);
        t.prompt = "p".repeat(MAX_PROMPT_BYTES);
        assert!(agent(&t, "loop").is_ok(), "the limit itself is allowed");
        t.prompt.push('p');
        assert_eq!(
            agent(&t, "loop").unwrap_err().0,
            "loop: prompt is larger than 1 MiB"
        );
        let mut c = cmd("echo", false);
        c.args = vec!["a".repeat(MAX_COMMAND_BYTES)];
        assert_eq!(
            command(&c, "loop").unwrap_err().0,
            "loop: command line (command and arguments) is larger than 64 KiB"
        );
        let mut c = cmd("true", true);
        c.env
            .insert("BIG".into(), "v".repeat(MAX_ENV_VALUE_BYTES + 1));
        assert_eq!(
            command(&c, "loop").unwrap_err().0,
            "loop: environment variable \"BIG\" is larger than 64 KiB"
        );
        let mut c = cmd("true", true);
        for i in 0..5 {
            c.env
                .insert(format!("V{i}"), "v".repeat(MAX_ENV_VALUE_BYTES));
        }
        assert_eq!(
            command(&c, "loop").unwrap_err().0,
            "loop: environment is larger than 256 KiB"
        );
        let long = "d".repeat(MAX_DESCRIPTION_BYTES + 1);
        assert_eq!(
            description(Some(&long), "loop").unwrap_err().0,
            "loop: description is larger than 4 KiB"
        );
        assert!(description(None, "loop").is_ok());
        let mut t = agent_target(Provider::Claude);
        t.model = Some("m".repeat(MAX_FIELD_BYTES + 1));
        assert_eq!(
            agent(&t, "loop").unwrap_err().0,
            "loop: model is larger than 4 KiB"
        );
        let mut t = agent_target(Provider::Codex);
        t.config_overrides
            .insert("k".into(), "v".repeat(MAX_COMMAND_BYTES));
        assert_eq!(
            agent(&t, "loop").unwrap_err().0,
            "loop: configOverrides is larger than 64 KiB"
        );
    }

    #[test]
    fn cwd_must_be_absolute() {
        let mut c = cmd("true", true);
        c.cwd = Some("sub".into());
        assert_eq!(
            command(&c, "loop").unwrap_err().0,
            "loop: cwd \"sub\" is not an absolute path"
        );
        c.cwd = Some("/srv/sub".into());
        assert!(command(&c, "loop").is_ok());
        let mut t = agent_target(Provider::Claude);
        t.cwd = Some(" ".into());
        assert_eq!(agent(&t, "loop").unwrap_err().0, "loop: cwd is empty");
    }

    #[test]
    fn nul_bytes_are_refused() {
        let mut c = cmd("echo", false);
        c.args = vec!["a\0b".into()];
        assert!(command(&c, "loop").is_err());
        let mut c = cmd("true", true);
        c.env.insert("A".into(), "x\0".into());
        assert!(command(&c, "loop").is_err());
    }

    #[test]
    fn names_and_env_keys() {
        assert!(loop_name("").is_err());
        assert!(loop_name(" x").is_err());
        assert!(loop_name("nightly-backup").is_ok());
        let mut t = cmd("true", false);
        t.env.insert("1BAD".into(), "v".into());
        assert!(command(&t, "loop").is_err());
    }

    #[test]
    fn labels_have_one_syntax_and_come_back_sorted_once() {
        assert_eq!(
            labels(&["nightly".into(), "ci".into(), "nightly".into()]).unwrap(),
            vec!["ci".to_owned(), "nightly".to_owned()]
        );
        for ok in ["a", "0", "gpu-1", "team.ops", "a_b"] {
            assert!(label(ok).is_ok(), "{ok}");
        }
        for bad in ["", "A", "-a", ".a", "a b", "ä", "a/b"] {
            let e = label(bad).unwrap_err();
            assert!(e.0.contains("invalid label"), "{bad}: {e}");
        }
        assert!(label(&"a".repeat(65)).unwrap_err().0.contains("64 bytes"));
    }

    #[test]
    fn notify_urls_must_be_http() {
        let n = |url: &str| Notify {
            cmd: None,
            url: Some(url.into()),
            on: crate::NotifyOn::Failure,
        };
        assert!(notify(&n("https://hooks.example.com/x?y=1"), "loop").is_ok());
        assert!(notify(&n("http://127.0.0.1:8080/"), "loop").is_ok());
        for bad in [
            "ftp://x",
            "example.com",
            "http://",
            "https:///path",
            "http://a b",
        ] {
            assert!(notify(&n(bad), "loop").is_err(), "{bad}");
        }
        let none = Notify {
            cmd: None,
            url: None,
            on: crate::NotifyOn::Failure,
        };
        assert!(notify(&none, "loop").is_err());
    }

    #[test]
    fn ops_settings_are_checked_against_the_retry_delay() {
        let mut o = crate::LoopOps::default();
        assert!(ops(&o, 60_000).is_ok());
        o.retry_delay_max_ms = 30_000;
        assert_eq!(
            ops(&o, 60_000).unwrap_err().0,
            "--retry-delay-max 30s is shorter than --retry-delay 1m"
        );
        o.retry_delay_max_ms = 60_000;
        o.max_failures = Some(0);
        assert_eq!(
            ops(&o, 60_000).unwrap_err().0,
            "--max-failures must be at least 1"
        );
        o.max_failures = None;
        o.max_runs = Some(0);
        assert_eq!(
            ops(&o, 60_000).unwrap_err().0,
            "--max-runs must be at least 1"
        );
        o.max_runs = Some(3);
        o.until_cmd = Some(" ".into());
        assert_eq!(ops(&o, 60_000).unwrap_err().0, "--until-cmd is empty");
        o.until_cmd = Some("test -e marker".into());
        o.until_output = Some("[".into());
        let err = ops(&o, 60_000).unwrap_err().0;
        assert!(
            err.starts_with("--until-output \"[\" is not a valid regex: "),
            "{err}"
        );
        o.until_output = Some("ALL TESTS PASS".into());
        assert!(ops(&o, 60_000).is_ok());
    }

    #[test]
    fn jitter_is_shorter_than_the_period() {
        let every = Schedule::Interval {
            every_ms: 60_000,
            anchor: crate::Anchor::FixedRate,
        };
        assert!(jitter(&every, 59_999).is_ok());
        let e = jitter(&every, 60_000).unwrap_err();
        assert!(e.0.contains("shorter than its --every (1m)"), "{e}");
        let cron = Schedule::Cron {
            expression: "0 * * * *".into(),
            timezone: "UTC".into(),
        };
        assert!(jitter(&cron, MAX_JITTER_MS).is_ok());
        assert!(jitter(&cron, MAX_JITTER_MS + 1).is_err());
    }
}
