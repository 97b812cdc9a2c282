//! Validation of user-supplied loop definitions. Every message names the offending
//! field and value, so a bad flag or JSON field is fixed in one try.

use crate::{Account, AgentTarget, CommandTarget, Provider, Target};

/// A rejected definition, with a message meant for the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ValidationError(pub String);

fn invalid<T>(message: impl Into<String>) -> Result<T, ValidationError> {
    Err(ValidationError(message.into()))
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

/// Checks a target of any kind. `label` prefixes messages (e.g. `step "build"`).
pub fn target(target: &Target, label: &str) -> Result<(), ValidationError> {
    match target {
        Target::Command(t) => command(t, label),
        Target::Agent(t) => agent(t, label),
        Target::Workflow(t) => {
            if t.workflow.trim().is_empty() {
                return invalid(format!("{label}: workflow name is empty"));
            }
            timeout(t.timeout_ms, label)
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
    env_keys(t.env.keys(), label)?;
    timeout(t.timeout_ms, label)
}

/// Agent targets: a prompt, and only the options the chosen provider understands.
pub fn agent(t: &AgentTarget, label: &str) -> Result<(), ValidationError> {
    if t.prompt.trim().is_empty() {
        return invalid(format!("{label}: prompt is empty"));
    }
    if t.provider == Provider::Codex && t.agent.is_some() {
        return invalid(format!("{label}: provider codex has no --agent option"));
    }
    if t.auth_profile.is_some() && t.provider != Provider::Codewith {
        return invalid(format!(
            "{label}: --auth-profile is only supported by provider codewith, not {}",
            t.provider
        ));
    }
    if t.provider == Provider::Opencode && t.model.as_deref().is_none_or(|m| m.trim().is_empty()) {
        return invalid(format!(
            "{label}: provider opencode needs --model provider/model (without it opencode retries forever)"
        ));
    }
    for (field, value) in [
        ("model", &t.model),
        ("agent", &t.agent),
        ("authProfile", &t.auth_profile),
        ("cwd", &t.cwd),
    ] {
        if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
            return invalid(format!("{label}: {field} is empty"));
        }
    }
    config_overrides(t, label)?;
    if let Some(account) = &t.account {
        account_fields(account, label)?;
    }
    env_keys(t.env.keys(), label)?;
    timeout(t.timeout_ms, label)
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
        if value.contains('\0') {
            return invalid(format!(
                "{label}: config override {key:?} contains a NUL byte"
            ));
        }
    }
    Ok(())
}

fn account_fields(account: &Account, label: &str) -> Result<(), ValidationError> {
    if account.profile.trim().is_empty() {
        return invalid(format!("{label}: account profile is empty"));
    }
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

fn env_keys<'a>(
    keys: impl Iterator<Item = &'a String>,
    label: &str,
) -> Result<(), ValidationError> {
    for key in keys {
        let valid = !key.is_empty()
            && !key.starts_with(|c: char| c.is_ascii_digit())
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return invalid(format!(
                "{label}: invalid environment variable name {key:?}"
            ));
        }
    }
    Ok(())
}

fn timeout(timeout_ms: Option<u64>, label: &str) -> Result<(), ValidationError> {
    if timeout_ms == Some(0) {
        return invalid(format!("{label}: timeout must be greater than zero"));
    }
    Ok(())
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
            timeout_ms: None,
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
            timeout_ms: None,
            account: None,
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
    fn names_and_env_keys() {
        assert!(loop_name("").is_err());
        assert!(loop_name(" x").is_err());
        assert!(loop_name("nightly-backup").is_ok());
        let mut t = cmd("true", false);
        t.env.insert("1BAD".into(), "v".into());
        assert!(command(&t, "loop").is_err());
    }
}
