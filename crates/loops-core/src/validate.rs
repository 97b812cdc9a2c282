//! Validation of user-supplied loop definitions. Every message names the offending
//! field and value, so a bad flag or JSON field is fixed in one try.

use crate::{AgentTarget, CommandTarget, Provider, Target};

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
    if let Some(account) = &t.account {
        if account.profile.trim().is_empty() {
            return invalid(format!("{label}: account profile is empty"));
        }
    }
    env_keys(t.env.keys(), label)?;
    timeout(t.timeout_ms, label)
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
    fn names_and_env_keys() {
        assert!(loop_name("").is_err());
        assert!(loop_name(" x").is_err());
        assert!(loop_name("nightly-backup").is_ok());
        let mut t = cmd("true", false);
        t.env.insert("1BAD".into(), "v".into());
        assert!(command(&t, "loop").is_err());
    }
}
